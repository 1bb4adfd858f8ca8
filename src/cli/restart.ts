// ft-run --max-restarts: what a job that ended without finishing is restarted with. It resumes from
// the newest complete checkpoint into the same run directory, on the hosts that still answer (a
// hostfile's over ssh, a Slurm allocation's to srun) with as many ranks as they have slots for, up
// to the first job's, and with the drills that already fired left out; or one line says why it cannot.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { findJobCheckpoint } from '../checkpoint/checkpoint';
import { firedPoints, parseDrill, type Drill, type DrillPoint } from '../liveness/drills';
import { runFiles } from '../run/files';
import { lastRecord } from '../run/reader';
import type { StepRecord } from '../run/records';
import { readHostfile, trainFlag } from './mpirun';
import { slurmAllocation } from './slurm';

/** How long a host gets to answer (ssh, or srun under Slurm) before a restart leaves it out. */
const reachSeconds = 10;

export interface Restart {
  /** the checkpoint it resumes from, and that checkpoint's step */
  checkpoint: string;
  step: number;
  /** the last step the ended job committed (undefined: none was) */
  lastStep?: number;
  ranks: number;
  /** the hosts that answered, as a hostfile (undefined: the job ran on this machine alone) */
  hostfile?: string;
  /** the hosts that did not answer */
  unreachable: string[];
  /** ft-train's flags for it */
  trainArgs: string[];
}

/** What a restart needs to know of the job that ended. */
export interface EndedJob {
  runDir: string;
  checkpointDir: string;
  /** the checkpoint the job started from (its resume event's), if it resumed */
  resumedFrom?: string;
  /** where the job's lines start in each rank's log (absent: a log the job began) */
  logsFrom: ReadonlyMap<string, number>;
  /** where its lines start in metrics.jsonl (past the steps of the jobs before it) */
  metricsFrom: number;
  trainArgs: string[];
  /** the first job's ranks, the most a restart starts */
  ranks: number;
  hostfile?: string;
  sshConfig?: string;
  /** the restart's number (1 for the first), where its hostfile goes */
  number: number;
}

/** Thrown when a restart is not possible: its message is the line ft-run prints. */
export class NoRestart extends Error {}

/** The restart of `job`: its checkpoint, hosts, ranks and flags; throws NoRestart with the reason. */
export async function planRestart(job: EndedJob): Promise<Restart> {
  let found;
  try {
    found = findJobCheckpoint(job.checkpointDir, job.resumedFrom);
  } catch (error) {
    throw new NoRestart((error as Error).message, { cause: error });
  }
  const lastStep = lastRecord<StepRecord>(path.join(job.runDir, runFiles.metrics), job.metricsFrom)?.step;
  let ranks = job.ranks;
  let hostfileLines: string[] | undefined;
  const unreachable: string[] = [];
  const allocation = job.hostfile !== undefined ? readHostfile(job.hostfile) : slurmAllocation(process.env);
  if (allocation !== undefined) {
    // a hostfile's hosts answer over ssh, an allocation's nodes run a job step: all asked at once
    const asked = await Promise.all(
      allocation.map((line) => (job.hostfile !== undefined ? answers(line.host, job.sshConfig) : runsStep(line.host))),
    );
    const answered = allocation.filter((line, i) => asked[i] || (unreachable.push(line.host), false));
    if (answered.length === 0)
      throw new NoRestart(
        `no host answers (${job.hostfile !== undefined ? `of ${job.hostfile}, over ssh` : `of Slurm job ${process.env.SLURM_JOB_ID}, to srun`}: ${unreachable.join(', ')})`,
      );
    ranks = Math.min(
      job.ranks,
      answered.reduce((sum, line) => sum + line.slots, 0),
    );
    hostfileLines = answered.map((line) => line.line);
  }
  const minRanks = Number(trainFlag(job.trainArgs, 'min-ranks') ?? 1);
  const spares = Number(trainFlag(job.trainArgs, 'spares') ?? 0);
  const reserves = Number(trainFlag(job.trainArgs, 'reserves') ?? 0);
  const idle = [spares > 0 ? `${spares} of them spares` : '', reserves > 0 ? `${reserves} reserves` : ''].filter(Boolean).join(', ');
  if (ranks - spares - reserves < minRanks)
    throw new NoRestart(
      `the hosts that answer have room for ${ranks} rank(s)${idle ? ` (${idle})` : ''}, below --min-ranks ${minRanks}` +
        (unreachable.length > 0 ? ` (${unreachable.join(', ')} did not answer)` : ''),
    );
  const trainArgs = restartArgs(
    job.trainArgs,
    found.dir,
    lastStep === undefined ? found.manifest.step : lastStep + 1,
    // a rank on another host may fire a drill at the next step's start, its host lost, before the
    // leader records the step they all finished: the notes say what fired beyond `reached`
    firedPoints(path.join(job.runDir, runFiles.logs), job.logsFrom),
  );
  // written once the restart is sure, so that a refused one leaves no file behind
  let hostfile: string | undefined;
  if (hostfileLines !== undefined) {
    hostfile = path.join(os.tmpdir(), `ft-run-${process.pid}-restart-${job.number}.hosts`);
    fs.writeFileSync(hostfile, hostfileLines.join('\n') + '\n');
  }
  return { checkpoint: found.dir, step: found.manifest.step, lastStep, ranks, hostfile, unreachable, trainArgs };
}

/**
 * ft-train's flags for a restart from `checkpoint`: --resume replaced, and the drills that fired
 * left out: those of steps up to `reached` (the step the ended job was in), and those `fired`
 * names (their notes).
 */
export function restartArgs(trainArgs: string[], checkpoint: string, reached: number, fired: readonly DrillPoint[] = []): string[] {
  const kept: string[] = [];
  for (let i = 0; i < trainArgs.length; ++i) {
    const [flag, inline] = splitFlag(trainArgs[i]);
    if (flag !== '--resume' && flag !== '--drill') {
      kept.push(trainArgs[i]);
      continue;
    }
    const value = inline ?? trainArgs[i + 1];
    if (inline === undefined) ++i;
    if (flag === '--drill' && !hasFired(value ?? '', reached, fired)) kept.push('--drill', value);
  }
  return [...kept, '--resume', checkpoint];
}

/** Whether drill `text` fired in the ended job (one that does not parse did not: ft-train refuses it in its own words). */
function hasFired(text: string, reached: number, fired: readonly DrillPoint[]): boolean {
  let drill: Drill;
  try {
    drill = parseDrill(text);
  } catch {
    return false;
  }
  return (
    drill.step <= reached || fired.some((point) => point.rank === drill.rank && point.step === drill.step && point.phase === drill.phase)
  );
}

function splitFlag(arg: string): [string, string | undefined] {
  const at = arg.indexOf('=');
  return arg.startsWith('--') && at > 0 ? [arg.slice(0, at), arg.slice(at + 1)] : [arg, undefined];
}

/** Whether the allocation's node `host` runs a job step (srun, beside any other step) within reachSeconds. */
function runsStep(host: string): Promise<boolean> {
  return succeeds('srun', ['--overlap', '--nodes=1', '--ntasks=1', `--nodelist=${host}`, '--quiet', 'true']);
}

/** Whether `host` runs a command over ssh within reachSeconds (this machine's own name always does). */
function answers(host: string, sshConfig: string | undefined): Promise<boolean> {
  if (host === 'localhost' || host === os.hostname()) return Promise.resolve(true);
  const config = sshConfig !== undefined ? ['-F', sshConfig] : [];
  return succeeds('ssh', [...config, '-o', 'BatchMode=yes', '-o', `ConnectTimeout=${reachSeconds}`, host, 'true']);
}

/** Whether `command` exits 0 within reachSeconds (killed past it). */
function succeeds(command: string, args: string[]): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: 'ignore', timeout: reachSeconds * 1000, killSignal: 'SIGKILL' });
    child.on('error', () => resolve(false));
    child.on('exit', (code) => resolve(code === 0));
  });
}
