// The run directory's pids/: each rank writes "PID HOSTNAME START" there (RunLog; START is the
// process's start time in clock ticks since boot); launchers and survivors read it to signal a rank
// of this job, or to see it gone. A pid file only names a candidate: the process counts as that rank
// while it runs on this host with that start time and its environment still carries the marks asked
// for (a pid file left by an earlier job, a recycled pid or a rank on another host does not).
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * The empty file in pids/ that names the launch that made the run directory (its PMIx namespace,
 * launcherNamespace), so that a slow rank of that launch does not take the files its faster ranks
 * already wrote for a run of another launch; the name alone is the mark, so that no rank can read
 * it half-written. Not jobMark (below): rank 0's pid file may not be written yet, or be an earlier
 * job's, while the launch's ranks still start, and the namespace is the launch's only, not that of
 * the ranks it spawns later, which jobMark covers too.
 */
export function launchMarkName(namespace: string): string {
  return `launch-${namespace.replace(/[^A-Za-z0-9@._-]/g, '_')}`;
}

export interface PidFile {
  pid: number;
  host: string;
  /** start time (/proc/PID/stat field 22) */
  start: string;
}

/** A process's state letter and start time, or null when there is no such process. */
export function processStat(pid: number): { state: string; start: string } | null {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return null;
  }
  // after the command name in parentheses (which may hold spaces): field 3 (state) onwards
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0], start: fields[19] };
}

/** How often a process's main thread has been switched out (voluntarily or not), or null when it is gone: unchanged only while it does not run. */
function contextSwitches(pid: number): number | null {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/status`, 'latin1');
  } catch {
    return null;
  }
  const count = (name: string): number => Number(new RegExp(`^${name}:\\s*(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  const switches = count('voluntary_ctxt_switches') + count('nonvoluntary_ctxt_switches');
  return Number.isFinite(switches) ? switches : null;
}

/** A pid file's text for this process. */
export function pidFileText(): string {
  return `${process.pid} ${os.hostname()} ${processStat(process.pid)?.start ?? ''}\n`;
}

/**
 * This job's mark for the files it makes in pids/ beside the pid files: rank 0's pid file as a
 * name (rank 0 is started by the launch and writes it first), so that an earlier job's files in
 * the same run directory never count.
 */
function jobMark(pidsDir: string): string | null {
  const first = readPidFile(pidsDir, 0);
  return first ? `-${first.host}-${first.pid}-${first.start}` : null;
}

/**
 * Whether this process is the first of its job to claim the job's stop line, for a stop where the
 * ranks cannot agree on who prints it (the communicator cannot be repaired): a file made
 * exclusively in pids/. Where the run directory is not shared between hosts, the first rank on
 * each host claims it. A claim that cannot be written (a full disk) counts as won: a line too many
 * rather than none.
 */
export function claimStopLine(pidsDir: string): boolean {
  try {
    fs.writeFileSync(path.join(pidsDir, `stop${jobMark(pidsDir) ?? ''}`), pidFileText(), { flag: 'wx' });
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'EEXIST';
  }
  return true;
}

/**
 * Marks spawned (or woken) ranks as given up, before their processes are killed by their pid
 * files: one that writes its pid file only after that finds the mark (wasGivenUp) and leaves, so
 * that none waits out its own start-up deadline unseen. Not written (a full disk, or no pid file of
 * rank 0 to name the job by): it does wait.
 */
export function markGivenUp(pidsDir: string, worldRanks: readonly number[]): void {
  const job = jobMark(pidsDir);
  if (job === null) return;
  for (const rank of worldRanks) {
    try {
      fs.writeFileSync(path.join(pidsDir, `given-up-${rank}${job}`), '');
    } catch {
      // the rank's own deadline still ends it
    }
  }
}

/** Whether this job gave up world rank `rank` (markGivenUp); asked by that rank once its pid file is written. */
export function wasGivenUp(pidsDir: string, rank: number): boolean {
  const job = jobMark(pidsDir);
  return job !== null && fs.existsSync(path.join(pidsDir, `given-up-${rank}${job}`));
}

/** The world ranks with a pid file, ascending. */
export function rankList(pidsDir: string): number[] {
  return fs.existsSync(pidsDir)
    ? fs
        .readdirSync(pidsDir)
        .map(Number)
        .filter(Number.isSafeInteger)
        .sort((a, b) => a - b)
    : [];
}

/** What world rank `rank` wrote in its pid file, or null without a readable one. */
export function readPidFile(pidsDir: string, rank: number): PidFile | null {
  let text: string;
  try {
    text = fs.readFileSync(path.join(pidsDir, String(rank)), 'utf8');
  } catch {
    return null;
  }
  const [pid, host = '', start = ''] = text.trim().split(' ');
  return Number.isSafeInteger(Number(pid)) ? { pid: Number(pid), host, start } : null;
}

/** The pid world rank `rank` wrote if it ran on this host, else null. */
export function readPid(pidsDir: string, rank: number): number | null {
  const file = readPidFile(pidsDir, rank);
  return file !== null && file.host === os.hostname() ? file.pid : null;
}

/** Whether the process a pid file names runs (not a zombie) on this host, as the same process that wrote it. */
function runsHere(file: PidFile): boolean {
  if (file.host !== os.hostname()) return false;
  const stat = processStat(file.pid);
  return stat !== null && stat.state !== 'Z' && stat.state !== 'X' && stat.start === file.start;
}

/** Whether world rank `rank` ran on this host and is gone: its pid file names this host, and that process runs no more. */
export function goneFromHere(pidsDir: string, rank: number): boolean {
  const file = readPidFile(pidsDir, rank);
  return file !== null && file.host === os.hostname() && !runsHere(file);
}

/** A process's environment ("NAME=value" entries), or null when it is gone or not ours to read. */
export function environOf(pid: number): string[] | null {
  try {
    return fs.readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0');
  } catch {
    return null;
  }
}

/**
 * The pid of rank `rank` while that process runs on this host with every one of `marks` in its
 * environment. Without marks its environment is not read: a killed process on its way out (still
 * running, its memory already released: tens of ms on a busy host) gives none to read, and would
 * count as gone here while goneFromHere still sees it run.
 */
export function rankProcess(pidsDir: string, rank: number, marks: readonly string[]): number | null {
  const file = readPidFile(pidsDir, rank);
  if (file === null || !runsHere(file)) return null;
  if (marks.length === 0) return file.pid;
  const environ = environOf(file.pid);
  return environ !== null && marks.every((mark) => environ.includes(mark)) ? file.pid : null;
}

/**
 * World rank `rank`'s process on this host (with `marks`, as rankProcess) while it is stopped
 * (SIGSTOP, a debugger): its pid and context switches, a look that stays the same only while it
 * stays stopped without being scheduled once; null when it runs or is gone.
 */
export function stoppedLook(pidsDir: string, rank: number, marks: readonly string[]): string | null {
  const pid = rankProcess(pidsDir, rank, marks);
  const state = pid === null ? undefined : processStat(pid)?.state;
  const switches = pid === null ? null : contextSwitches(pid);
  return (state === 'T' || state === 't') && switches !== null ? `${pid} ${switches}` : null;
}

/**
 * Sends `signal` to each of `ranks` whose process runs on this host with the marks `marksOf(rank)`
 * gives; a process that ends in the meantime is skipped. The ranks signalled.
 */
export function signalRanks(
  pidsDir: string,
  ranks: readonly number[],
  marksOf: (rank: number) => readonly string[],
  signal: NodeJS.Signals,
): number[] {
  const signalled: number[] = [];
  for (const rank of ranks) {
    const pid = rankProcess(pidsDir, rank, marksOf(rank));
    if (pid === null) continue;
    try {
      process.kill(pid, signal);
      signalled.push(rank);
    } catch {
      // it ended between the check and the signal
    }
  }
  return signalled;
}
