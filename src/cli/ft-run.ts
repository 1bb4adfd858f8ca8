// launch/ft-run: starts an ft-train job the safe way, in the spirit of torchrun. Finds the ULFM
// mpirun, builds its command (src/cli/mpirun.ts: --with-ft ulfm, the hang detector, oversubscription
// only past the slots, root's consent), turns Ctrl-C or SIGTERM into ft-train's clean stop, and
// judges the outcome by the run directory, since mpirun exits 0 even when every rank was killed.
// With --max-restarts it starts an unfinished job again from its newest checkpoint (restart.ts).
// Exit codes: 0 the run completed (whatever mpirun says: it counts the death of a spawned rank against
// the job) or stopped cleanly, 1 it ended without finishing, 2 bad input or no ULFM, otherwise mpirun's own.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { commandLine, last, UsageError } from './command';
import { FrozenRanks } from './frozen-ranks';
import { outcome, type StopRecord } from './job-outcome';
import { killJobProcesses } from './job-processes';
import { NoRestart, planRestart, type Restart } from './restart';
import {
  checkUlfm,
  defaultHangTimeoutS,
  forwardJobStderr,
  hangTimeoutOf,
  runtimeStopSignal,
  trainCommand,
  trainFlag,
  type Command,
} from './mpirun';
import { newestCheckpoint } from '../checkpoint/checkpoint';
import { frozenRankMs, hangBounds, minorityStopMs } from '../liveness/hang-bounds';
import { rankLogName, runFiles } from '../run/files';
import { goneFromHere, rankList, readPidFile, signalRanks } from '../run/pids';
import { fileSize, readObject, recordsFrom } from '../run/reader';
import { stopLogPrefix } from '../run/records';
import { appendRunEvent } from '../run/writer';

/** How long the ranks get to checkpoint and stop after the first SIGINT/SIGTERM before mpirun is told to end the job. */
const stopGraceMs = 30_000;
/**
 * How long mpirun gets to end by itself once a run completed without its cut-off side (whose ranks
 * logged their minority stop), before ft-run ends it: where it reaches every host, it ends within
 * moments of its last rank.
 */
const mpirunEndMs = 2_000;

// one paragraph, wrapped by yargs to the terminal's width
const usage = `$0 -n N [--hostfile F [--ssh-config C]] [--script FILE] [--dry-run] -- <ft-train flags>

${[
  "Runs ft-train on N ranks under the ULFM Open MPI's mpirun ($FT_MPI_HOME, default /opt/ompi-ulfm;",
  'launch/setup builds it) with --with-ft ulfm, --oversubscribe only when N exceeds the slots (this',
  "machine's cores, or the sum of the hostfile's slots=K), and ULFM's hang detector set from ft-train's",
  `--hang-timeout (default ${defaultHangTimeoutS} s). The first Ctrl-C or SIGTERM asks the ranks to checkpoint and stop;`,
  `${stopGraceMs / 1000} s later (or at a second one) mpirun ends the job. Exit code 0 only if the run directory`,
  'holds a complete summary.json or a clean stop, 1 if the job ended without finishing, 2 on bad input',
  "or no ULFM, otherwise mpirun's own. With --max-restarts R, a job that ends without finishing (not",
  'one stopped by Ctrl-C) starts again, up to R times, from the newest complete checkpoint (its own, else',
  'the one it resumed from) into the same',
  'run directory, on the hosts that still answer (over ssh, or to srun inside a Slurm allocation) with',
  'as many ranks as their slots allow (at most N), leaving out the --drill points that fired (of the steps',
  "it reached, or noted in a rank's log); one",
  'line and one restart event each. With --script, every rank runs `node --single-threaded-gc FILE',
  '<flags>` instead of ft-train: a program over the library (train() or elastic()) that takes at least',
  '--run-dir DIR (and --hang-timeout S, if not the default) among its flags.',
].join(' ')}`;

/** `word` as a POSIX shell reads it back. */
function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * What of the run directory was there before this job: a resumed run appends to its history, and
 * only this job's events, logs and summary tell how it went.
 */
interface Before {
  /** where this job's lines start in events.jsonl and metrics.jsonl */
  eventsFrom: number;
  metricsFrom: number;
  /** a summary.json that was there already (ft-train refuses to write into such a run) */
  summary: boolean;
  /** where this job's lines start in each rank's log (absent: a log this job began) */
  logsFrom: Map<string, number>;
}

function before(runDir: string): Before {
  const logs = path.join(runDir, runFiles.logs);
  const logNames = fs.existsSync(logs) ? fs.readdirSync(logs) : [];
  return {
    eventsFrom: fileSize(path.join(runDir, runFiles.events)),
    metricsFrom: fileSize(path.join(runDir, runFiles.metrics)),
    summary: fs.existsSync(path.join(runDir, runFiles.summary)),
    logsFrom: new Map(logNames.map((name) => [name, fileSize(path.join(logs, name))])),
  };
}

/** Whether this job wrote summary.json. */
function summaryWritten(runDir: string, was: Before): boolean {
  return !was.summary && fs.existsSync(path.join(runDir, runFiles.summary));
}

/** A line of events.jsonl, as far as ft-run reads it. */
type JobEvent = StopRecord & Partial<{ from: string; lost: number[] }>;

/** This job's lines of events.jsonl (a resumed run's earlier ones left out). */
function jobEvents(runDir: string, was: Before): JobEvent[] {
  return recordsFrom<JobEvent>(path.join(runDir, runFiles.events), was.eventsFrom);
}

/** Why the run in `runDir` did not finish, or undefined when it completed or stopped cleanly on SIGTERM; `events`: this job's. */
function unfinished(runDir: string, was: Before, events: JobEvent[]): string | undefined {
  const summaryFile = path.join(runDir, runFiles.summary);
  if (summaryWritten(runDir, was)) {
    let status: unknown;
    try {
      status = readObject(summaryFile).status;
    } catch (error) {
      return (error as Error).message;
    }
    return status === 'complete' ? undefined : `${summaryFile} says status ${JSON.stringify(status)}`;
  }
  return lastStop(events)?.reason === 'sigterm' ? undefined : `no summary.json${was.summary ? ' of its own' : ''} in ${runDir}`;
}

/** The last `stop` event of `events`, if any. */
function lastStop(events: JobEvent[]): StopRecord | undefined {
  return events.filter((record) => record.event === 'stop').at(-1);
}

/** The checkpoint this job resumed from (its `resume` event's in `events`), if it did. */
function resumedFrom(events: JobEvent[]): string | undefined {
  const from = events.find((record) => record.event === 'resume')?.from;
  return typeof from === 'string' ? from : undefined;
}

/**
 * The ranks this job's survivors lost, once the run completed and each of them logged its minority
 * stop (the side of a cut link away from the rest): the survivors wrote the run's last file and
 * the cut-off ranks write nothing more, while mpirun, which cannot reach their host, waits for
 * them. Undefined before that, where a lost rank logged no such stop (a killed rank, whose end
 * mpirun sees), or where none was lost.
 */
function cutOffRanksStopped(runDir: string, was: Before): number[] | undefined {
  if (!summaryWritten(runDir, was)) return undefined;
  const lost = jobEvents(runDir, was).flatMap((record) =>
    record.event === 'revoke+shrink' && Array.isArray(record.lost) ? record.lost : [],
  );
  return lost.length > 0 && lost.every((rank) => stoppedAsMinority(runDir, was, rank))
    ? [...new Set(lost)].sort((a, b) => a - b)
    : undefined;
}

/** Whether rank `rank` logged a minority stop in this job (its log since the job started). */
function stoppedAsMinority(runDir: string, was: Before, rank: number): boolean {
  const name = rankLogName(rank);
  return recordsFrom<Partial<{ message: string }>>(path.join(runDir, runFiles.logs, name), was.logsFrom.get(name) ?? 0).some(
    (entry) => typeof entry.message === 'string' && entry.message.startsWith(stopLogPrefix('minority')),
  );
}

/**
 * This host's ranks that stopped as a minority, once every rank of the job on this host is gone
 * and one of them at least did: the side of a cut link away from the rest is here, where mpirun
 * runs. The other side writes the run on if it is a majority; after an even split (both sides
 * stop) nobody does, while mpirun waits on the other side's host for good. Undefined before that.
 */
function minorityHere(runDir: string, was: Before): number[] | undefined {
  const pidsDir = path.join(runDir, runFiles.pids);
  // the ranks here (a pid file naming this host: an earlier job's are gone too), all gone, before any log is read
  const here = rankList(pidsDir).filter((rank) => readPidFile(pidsDir, rank)?.host === os.hostname());
  if (here.length === 0 || !here.every((rank) => goneFromHere(pidsDir, rank))) return undefined;
  const stopped = here.filter((rank) => stoppedAsMinority(runDir, was, rank));
  return stopped.length > 0 ? stopped : undefined;
}

/** The sizes of the run's metrics and events: what changes while any rank still writes the run. */
function runWritten(runDir: string): string {
  return `${fileSize(path.join(runDir, runFiles.metrics))} ${fileSize(path.join(runDir, runFiles.events))}`;
}

/**
 * Sends SIGTERM to the job's ranks on this host: the pids in <run-dir>/pids/ whose environment
 * carries `marker` (a pid file left by an earlier job, or one from another host, names some other
 * process). One rank's request stops every rank at the next step boundary. Returns how many it signalled.
 */
function stopRanks(runDir: string, marker: string): number {
  const pidsDir = path.join(runDir, runFiles.pids);
  return signalRanks(pidsDir, rankList(pidsDir), () => [marker], 'SIGTERM').length;
}

/** Whether the ranks are done with the run directory: summary.json written, or a stop recorded. */
function runEnded(runDir: string, was: Before): boolean {
  return summaryWritten(runDir, was) || lastStop(jobEvents(runDir, was)) !== undefined;
}

/**
 * How long mpirun may outlive the run it ran, and what would keep it. Across hosts, a side cut off
 * from the rest needs its minority stop's time (minorityStopMs); on one host every rank sees the
 * others, and what a rank does after the run ended (waiting for its peers to be gone, a write
 * meeting its disk deadline) is bounded by one comm deadline. Then 10 s for mpirun itself. It ends
 * sooner once the run completed and every rank it lost logged its minority stop (cutOffRanksStopped).
 */
function endGrace(job: Command, trainArgs: string[]): { ms: number; why: string } {
  const bounds = hangBounds(hangTimeoutOf(trainArgs));
  return job.hosts > 1
    ? { ms: minorityStopMs(bounds) + 10_000, why: 'ranks on a host it cannot reach?' }
    : { ms: bounds.commMs + 10_000, why: 'a rank stuck in the kernel?' };
}

/**
 * Runs the job with the terminal's stdout and stderr; resolves to mpirun's exit code and whether
 * ft-run asked the ranks to stop. mpirun waits for every host's ranks, and one behind a cut link
 * never reports: once the run has ended (summary.json or a stop), mpirun gets `endGrace`, then
 * ft-run ends it; so it does `endGrace` after the run directory last changed once this host's
 * ranks stopped as a minority (minorityHere). A rank of the job on this host stopped for good for
 * `hungMs` is killed (FrozenRanks).
 */
function runJob(
  job: Command,
  runDir: string,
  was: Before,
  endGrace: { ms: number; why: string },
  hungMs: number,
): Promise<{ code: number; stopAsked: boolean; endedByMinority: boolean }> {
  const marker = `FT_RUN_JOB=${process.pid}`;
  const pidsDir = path.join(runDir, runFiles.pids);
  const frozen = new FrozenRanks(pidsDir, [marker], hungMs);
  // a process group of its own: Ctrl-C reaches ft-run alone, which asks for a clean stop (mpirun
  // would kill the ranks at once); stdin closed, since a background group reading the terminal stops
  const child = spawn(job.command, job.args, {
    env: { ...job.env, FT_RUN_JOB: String(process.pid) },
    stdio: ['ignore', 'inherit', 'pipe'],
    detached: true,
  });
  forwardJobStderr(child.stderr!);
  let stopTimer: NodeJS.Timeout | undefined;
  const endJob = () => child.kill(runtimeStopSignal);
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopTimer !== undefined) {
      console.error(`ft-run: ${signal} again: ending the job`);
      endJob();
      return;
    }
    const signalled = stopRanks(runDir, marker);
    if (signalled === 0 && rankList(path.join(runDir, runFiles.pids)).length === 0) {
      console.error(`ft-run: ${signal}: no rank has started training yet: ending the job`);
      stopTimer = setTimeout(endJob, 0);
    } else if (signalled === 0) {
      // under Slurm a requeue or a time limit signals the ranks too, and they may be on their way out already
      console.error(
        `ft-run: ${signal}: no rank on this host left to ask (they stop on the signal too); the job ends in ${stopGraceMs / 1000} s at the latest`,
      );
      stopTimer = setTimeout(endJob, stopGraceMs);
    } else {
      console.error(
        `ft-run: ${signal}: asked ${signalled} rank(s) to checkpoint and stop; the job ends in ${stopGraceMs / 1000} s at the latest`,
      );
      stopTimer = setTimeout(endJob, stopGraceMs);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // every 200 ms: a tighter poll of the run directory stalls training steps on small machines
  let killTimer: NodeJS.Timeout | undefined;
  // since when the run ended (or this host's ranks stopped as a minority) and nothing more came to
  // the run directory: a stop from a cut-off rank may come while the others still write the run
  let quiet: { since: number; written: string; ended: boolean } | undefined;
  let endedByMinority = false;
  // a summary or a stop, once written, stays: the events are not read again
  let ended = false;
  const watch = setInterval(() => {
    const hung = frozen.killHung(Date.now());
    if (hung !== null) console.error(`ft-run: ${hung}`);
    if (killTimer !== undefined) return;
    ended ||= runEnded(runDir, was);
    const minority = ended || job.hosts === 1 ? undefined : minorityHere(runDir, was);
    const written = runWritten(runDir);
    if ((!ended && minority === undefined) || quiet?.written !== written || quiet.ended !== ended)
      quiet = ended || minority !== undefined ? { since: Date.now(), written, ended } : undefined;
    if (quiet === undefined) return;
    const waited = Date.now() - quiet.since;
    if (!ended) {
      if (waited < endGrace.ms) return;
      endedByMinority = true;
      console.error(
        `ft-run: this host's rank(s) ${minority!.join(', ')} stopped as a minority and nothing came to the run directory from the others for ${endGrace.ms / 1000} s (both sides of a cut stopped?), but mpirun has not ended (it waits on a host it cannot reach): ending it`,
      );
    } else {
      const stopped = waited >= mpirunEndMs ? cutOffRanksStopped(runDir, was) : undefined;
      if (stopped !== undefined)
        console.error(
          `ft-run: the run completed and the rank(s) it lost (${stopped.join(', ')}) stopped as a minority, but mpirun has not ended (it waits on a host it cannot reach): ending it`,
        );
      else if (waited >= endGrace.ms)
        console.error(`ft-run: the run ended ${endGrace.ms / 1000} s ago but mpirun has not (${endGrace.why}): ending it`);
      else return;
    }
    endJob();
    killTimer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 5000);
  }, 200);
  const stopWatching = (): void => {
    clearTimeout(stopTimer);
    clearTimeout(killTimer);
    clearInterval(watch);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
  return new Promise((resolve, reject) => {
    child.on('error', (error) => {
      stopWatching();
      reject(new Error(`${job.command}: ${error.message}`));
    });
    child.on('exit', (code, signal) => {
      stopWatching();
      // what mpirun started and left behind here (ssh, in a session of its own, to a host it cannot reach)
      killJobProcesses(marker, true);
      resolve({ code: code ?? 128 + (os.constants.signals[signal!] ?? 0), stopAsked: stopTimer !== undefined, endedByMinority });
    });
  });
}

/** ft-run's command line, checked. */
interface Invocation {
  ranks: number;
  trainArgs: string[];
  runDir: string;
  hostfile?: string;
  sshConfig?: string;
  script?: string;
  maxRestarts: number;
  dryRun: boolean;
}

/** Parses and checks ft-run's command line; throws UsageError with the line to print. */
function parse(): Invocation {
  const args = commandLine('ft-run', usage)
    .option('n', { type: 'number', demandOption: true, describe: 'ranks to start' })
    .option('hostfile', { type: 'string', describe: 'Open MPI hostfile (HOST [slots=K] per line) (default: none, this machine alone)' })
    .option('ssh-config', {
      type: 'string',
      describe: "ssh client configuration for reaching the hosts (ssh -F FILE) (default: ssh's own)",
    })
    .option('script', {
      type: 'string',
      describe:
        'run this node program on every rank instead of ft-train (one over the library: train() or elastic()) (default: none, ft-train)',
    })
    .option('max-restarts', {
      type: 'number',
      default: 0,
      describe:
        'when the job ends without finishing, start it again from the newest complete checkpoint on the hosts that still answer, at most this many times',
    })
    .option('dry-run', { type: 'boolean', default: false, describe: 'print the mpirun command line and exit' })
    .parseSync();
  const ranks = last(args.n);
  if (!Number.isSafeInteger(ranks) || ranks < 1) throw new UsageError(`ft-run: -n expects an integer >= 1, got ${ranks}`);
  const maxRestarts = last(args['max-restarts']);
  if (!Number.isSafeInteger(maxRestarts) || maxRestarts < 0)
    throw new UsageError(`ft-run: --max-restarts expects an integer >= 0, got ${maxRestarts}`);
  const trainArgs = args._.map(String);
  if (trainArgs.length === 0) throw new UsageError('ft-run: give the ft-train flags after -- (see --help)');
  const runDir = trainFlag(trainArgs, 'run-dir') ?? '';
  if (runDir === '')
    throw new UsageError(
      `ft-run: the ${args.script === undefined ? 'ft-train' : "script's"} flags need --run-dir DIR (its summary.json tells whether the run finished)`,
    );
  if (maxRestarts > 0 && trainFlag(trainArgs, 'on-failure') === 'none')
    throw new UsageError(
      'ft-run: --max-restarts with --on-failure none: none is the overhead baseline, whose job ends at a failure by design; choose exact or shrink to restart',
    );
  const sshConfig = args['ssh-config'] === undefined ? undefined : last(args['ssh-config']);
  if (sshConfig !== undefined && !fs.existsSync(sshConfig)) throw new UsageError(`ft-run: --ssh-config ${sshConfig}: no such file`);
  const script = args.script === undefined ? undefined : path.resolve(last(args.script));
  if (script !== undefined && !fs.existsSync(script)) throw new UsageError(`ft-run: --script ${last(args.script!)}: no such file`);
  const hostfile = args.hostfile === undefined ? undefined : last(args.hostfile);
  return { ranks, trainArgs, runDir, hostfile, sshConfig, script, maxRestarts, dryRun: last(args['dry-run']) };
}

async function main(): Promise<number> {
  let job: Command;
  let invocation: Invocation;
  try {
    invocation = parse();
    checkUlfm();
    job = trainCommand(invocation.ranks, invocation.trainArgs, invocation, invocation.script);
  } catch (error) {
    console.error(error instanceof UsageError ? error.message : `ft-run: ${(error as Error).message}`);
    return 2;
  }
  if (invocation.dryRun) {
    const settings = Object.entries(job.envSet).map(([name, value]) => `${name}=${shellQuote(value)}`);
    console.log([...settings, ...[job.command, ...job.args].map(shellQuote)].join(' '));
    return 0;
  }
  const { runDir, hostfile, sshConfig, script, maxRestarts, ranks } = invocation;
  let { trainArgs } = invocation;
  const checkpointDir = trainFlag(trainArgs, 'checkpoint-dir') ?? path.join(runDir, 'ckpt');
  let restartHosts: string | undefined;
  for (let restarts = 0; ; ++restarts) {
    const was = before(runDir);
    const { code, stopAsked, endedByMinority } = await runJob(
      job,
      runDir,
      was,
      endGrace(job, trainArgs),
      frozenRankMs(hangBounds(hangTimeoutOf(trainArgs))),
    ).finally(() => {
      if (restartHosts !== undefined) fs.rmSync(restartHosts, { force: true });
    });
    // ft-train's exit code for bad input, refused before the run started: its line says why, and
    // a restart would be refused alike
    const events = jobEvents(runDir, was);
    if (code === 2 && events.length === 0) {
      if (restarts > 0) console.error(`ft-run: restart ${restarts} of ${maxRestarts} was refused (its line is above)`);
      return code;
    }
    const ended = outcome(
      code,
      stopAsked,
      unfinished(runDir, was, events),
      summaryWritten(runDir, was),
      lastStop(events),
      events.some((record) => record.event === 'spawn'),
    );
    if (ended.unfinished === undefined) return ended.code;
    const resumed = resumedFrom(events);
    if (stopAsked || restarts === maxRestarts) {
      console.error(`ft-run: ${ended.unfinished}; ${newestCheckpoint(checkpointDir, resumed)}`);
      return ended.code;
    }
    // the other side of the cut may be a majority still training, unseen from here: no second job beside it
    if (endedByMinority) {
      console.error(
        `ft-run: ${ended.unfinished}; not restarting (the other side of the cut may still train); ${newestCheckpoint(checkpointDir, resumed)}`,
      );
      return ended.code;
    }
    let restart: Restart;
    try {
      restart = await planRestart({
        runDir,
        checkpointDir,
        resumedFrom: resumed,
        metricsFrom: was.metricsFrom,
        logsFrom: was.logsFrom,
        trainArgs,
        ranks,
        hostfile,
        sshConfig,
        number: restarts + 1,
      });
    } catch (error) {
      if (!(error instanceof NoRestart)) throw error;
      console.error(`ft-run: ${ended.unfinished}; cannot restart: ${error.message}`);
      return ended.code;
    }
    const where = restart.unreachable.length > 0 ? ` (without ${restart.unreachable.join(', ')}, which did not answer)` : '';
    console.error(
      `ft-run: ${ended.unfinished}; restart ${restarts + 1} of ${maxRestarts}: resuming from ${restart.checkpoint} (step ${restart.step}) on ${restart.ranks} rank(s)${where}`,
    );
    appendRunEvent(runDir, {
      event: 'restart',
      step: restart.step,
      restart: restarts + 1,
      max_restarts: maxRestarts,
      checkpoint: restart.checkpoint,
      ...(restart.lastStep !== undefined ? { last_step: restart.lastStep } : {}),
      world: restart.ranks,
      unreachable: restart.unreachable,
      exit: ended.code,
    });
    // the next restart is sized on the first job's ranks again: hosts left out now may answer then
    trainArgs = restart.trainArgs;
    restartHosts = restart.hostfile;
    job = trainCommand(restart.ranks, trainArgs, { hostfile: restart.hostfile, sshConfig }, script);
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(`ft-run: ${(error as Error).message}`);
    process.exitCode = 1;
  },
);
