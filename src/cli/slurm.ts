// Inside a Slurm allocation (sbatch, salloc), the job's hosts and slots come from Slurm's
// environment: SLURM_JOB_NODELIST (a hostlist: "node[01-03,07],login2") and SLURM_TASKS_PER_NODE
// ("2(x3),1": the tasks each node may run, in the same order). mpirun (PRRTE) reads the allocation
// itself and starts its daemons with srun; launch/ft-run needs the same figures to place the ranks,
// to refuse more ranks than the allocation holds, and to restart on the nodes still there.
import type { HostLine } from './mpirun';

/** The allocation's nodes with their slots, or undefined outside Slurm (no SLURM_JOB_ID). Throws an Error naming what is malformed. */
export function slurmAllocation(env: NodeJS.ProcessEnv): HostLine[] | undefined {
  if (env.SLURM_JOB_ID === undefined) return undefined;
  const nodelist = env.SLURM_JOB_NODELIST ?? env.SLURM_NODELIST;
  const tasks = env.SLURM_TASKS_PER_NODE;
  if (nodelist === undefined || tasks === undefined)
    throw new Error(
      `SLURM_JOB_ID is set (${env.SLURM_JOB_ID}) but SLURM_JOB_NODELIST or SLURM_TASKS_PER_NODE is not: run inside an allocation (sbatch, salloc), or unset SLURM_JOB_ID`,
    );
  const hosts = expandHostlist(nodelist);
  const slots = expandCounts(tasks);
  if (hosts.length !== slots.length)
    throw new Error(`SLURM_JOB_NODELIST names ${hosts.length} node(s) but SLURM_TASKS_PER_NODE "${tasks}" counts ${slots.length}`);
  return hosts.map((host, i) => ({ host, slots: slots[i], line: `${host} slots=${slots[i]}` }));
}

/** A Slurm hostlist's names in order: "a[1-3,07],b" -> a1 a2 a3 a07 b (ranges keep their zero padding). */
export function expandHostlist(list: string): string[] {
  const bad = (why: string) => new Error(`SLURM_JOB_NODELIST "${list}": ${why}`);
  const names: string[] = [];
  // split at the commas outside brackets
  for (const item of list.split(/,(?![^[]*\])/)) {
    const match = /^([^[\]\s,]*)(?:\[([^\]]+)\]([^[\]\s,]*))?$/.exec(item);
    if (item === '' || match === null) throw bad(`cannot read "${item}"`);
    const [, prefix, ranges, suffix = ''] = match;
    if (ranges === undefined) {
      names.push(prefix);
      continue;
    }
    for (const range of ranges.split(',')) {
      const bounds = /^(\d+)(?:-(\d+))?$/.exec(range);
      if (bounds === null) throw bad(`cannot read the range "${range}"`);
      const [first, last = first] = [bounds[1], bounds[2]];
      if (Number(last) < Number(first)) throw bad(`the range "${range}" runs backwards`);
      for (let n = Number(first); n <= Number(last); ++n) names.push(`${prefix}${String(n).padStart(first.length, '0')}${suffix}`);
    }
  }
  return names;
}

/** SLURM_TASKS_PER_NODE's counts, one per node: "2(x3),1" -> 2 2 2 1. */
export function expandCounts(text: string): number[] {
  const counts: number[] = [];
  for (const item of text.split(',')) {
    const match = /^([1-9]\d*)(?:\(x([1-9]\d*)\))?$/.exec(item);
    if (match === null) throw new Error(`SLURM_TASKS_PER_NODE "${text}": cannot read "${item}"`);
    for (let i = 0; i < Number(match[2] ?? 1); ++i) counts.push(Number(match[1]));
  }
  return counts;
}
