// launch/ft-run: starts an ft-train job the safe way, in the spirit of torchrun. Finds the ULFM
// mpirun, builds its command (src/cli/mpirun.ts: --with-ft ulfm, the hang detector, oversubscription
// only past the slots, root's consent), turns Ctrl-C or SIGTERM into ft-train's clean stop, and
// judges the outcome by the run directory, since mpirun exits 0 even when every rank was killed.
// Exit codes: 0 the run completed (whatever mpirun says: it counts the death of a spawned rank against
// the job) or stopped cleanly, 1 it ended without finishing, 2 bad input or no ULFM, otherwise mpirun's own.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { commandLine, last, UsageError } from './command';
import { checkUlfm, defaultHangTimeoutS, forwardJobStderr, trainCommand, trainFlag, type Command } from './mpirun';
import { runFiles } from '../run/files';
import { rankList, signalRanks } from '../run/pids';
import { readObject } from '../run/reader';

/** How long the ranks get to checkpoint and stop after the first SIGINT/SIGTERM before mpirun is told to end the job. */
const stopGraceMs = 30_000;

const usage = `$0 -n N [--hostfile F [--ssh-config C]] [--dry-run] -- <ft-train flags>

Runs ft-train on N ranks under the ULFM Open MPI's mpirun ($FT_MPI_HOME, default /opt/ompi-ulfm;
launch/setup builds it) with --with-ft ulfm, --oversubscribe only when N exceeds the slots (this
machine's cores, or the sum of the hostfile's slots=K), and ULFM's hang detector set from ft-train's
--hang-timeout (default ${defaultHangTimeoutS} s). The first Ctrl-C or SIGTERM asks the ranks to checkpoint and stop;
${stopGraceMs / 1000} s later (or at a second one) mpirun ends the job. Exit code 0 only if the run directory
holds a complete summary.json or a clean stop, 1 if the job ended without finishing, 2 on bad input
or no ULFM, otherwise mpirun's own.`;

/** `word` as a POSIX shell reads it back. */
function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** Why the run in `runDir` did not finish, or undefined when it completed or stopped cleanly on SIGTERM. */
function unfinished(runDir: string): string | undefined {
  const summaryFile = path.join(runDir, runFiles.summary);
  if (fs.existsSync(summaryFile)) {
    let status: unknown;
    try {
      status = readObject(summaryFile).status;
    } catch (error) {
      return (error as Error).message;
    }
    return status === 'complete' ? undefined : `${summaryFile} says status ${JSON.stringify(status)}`;
  }
  // the events of a run that may have been killed mid-line: read leniently
  const eventsFile = path.join(runDir, runFiles.events);
  const stops = (fs.existsSync(eventsFile) ? fs.readFileSync(eventsFile, 'utf8').split('\n') : [])
    .map((line) => { try { return JSON.parse(line) as { event?: string; reason?: string }; } catch { return {}; } })
    .filter((record) => record.event === 'stop');
  return stops.at(-1)?.reason === 'sigterm' ? undefined : `no summary.json in ${runDir}`;
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

/** Runs the job with the terminal's stdout and stderr; resolves to mpirun's exit code. */
function runJob(job: Command, runDir: string): Promise<number> {
  const marker = `FT_RUN_JOB=${process.pid}`;
  // a process group of its own: Ctrl-C reaches ft-run alone, which asks for a clean stop (mpirun
  // would kill the ranks at once); stdin closed, since a background group reading the terminal stops
  const child = spawn(job.command, job.args, { env: { ...job.env, FT_RUN_JOB: String(process.pid) }, stdio: ['ignore', 'inherit', 'pipe'], detached: true });
  forwardJobStderr(child.stderr!);
  let stopTimer: NodeJS.Timeout | undefined;
  const endJob = () => child.kill('SIGTERM');
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopTimer !== undefined) {
      console.error(`ft-run: ${signal} again: ending the job`);
      endJob();
      return;
    }
    const signalled = stopRanks(runDir, marker);
    if (signalled === 0) {
      console.error(`ft-run: ${signal}: no rank has started training yet: ending the job`);
      stopTimer = setTimeout(endJob, 0);
    } else {
      console.error(`ft-run: ${signal}: asked ${signalled} rank(s) to checkpoint and stop; the job ends in ${stopGraceMs / 1000} s at the latest`);
      stopTimer = setTimeout(endJob, stopGraceMs);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return new Promise((resolve, reject) => {
    child.on('error', (error) => reject(new Error(`${job.command}: ${error.message}`)));
    child.on('exit', (code, signal) => {
      clearTimeout(stopTimer);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      resolve(code ?? 128 + (os.constants.signals[signal!] ?? 0));
    });
  });
}

async function main(): Promise<number> {
  let job: Command;
  let runDir: string;
  let dryRun: boolean;
  try {
    const args = commandLine('ft-run', usage)
      .option('n', { type: 'number', demandOption: true, describe: 'ranks to start' })
      .option('hostfile', { type: 'string', describe: 'Open MPI hostfile (HOST [slots=K] per line)' })
      .option('ssh-config', { type: 'string', describe: 'ssh client configuration for reaching the hosts (ssh -F FILE)' })
      .option('dry-run', { type: 'boolean', default: false, describe: 'print the mpirun command line and exit' })
      .parseSync();
    const ranks = last(args.n);
    if (!Number.isSafeInteger(ranks) || ranks < 1) throw new UsageError(`ft-run: -n expects an integer >= 1, got ${ranks}`);
    const trainArgs = args._.map(String);
    if (trainArgs.length === 0) throw new UsageError('ft-run: give the ft-train flags after -- (see --help)');
    runDir = trainFlag(trainArgs, 'run-dir') ?? '';
    if (runDir === '') throw new UsageError('ft-run: the ft-train flags need --run-dir DIR (its summary.json tells whether the run finished)');
    dryRun = last(args['dry-run']);
    checkUlfm();
    const sshConfig = args['ssh-config'] === undefined ? undefined : last(args['ssh-config']);
    if (sshConfig !== undefined && !fs.existsSync(sshConfig)) throw new UsageError(`ft-run: --ssh-config ${sshConfig}: no such file`);
    job = trainCommand(ranks, trainArgs, { hostfile: args.hostfile === undefined ? undefined : last(args.hostfile), sshConfig });
  } catch (error) {
    console.error(error instanceof UsageError ? error.message : `ft-run: ${(error as Error).message}`);
    return 2;
  }
  if (dryRun) {
    const settings = Object.entries(job.envSet).map(([name, value]) => `${name}=${shellQuote(value)}`);
    console.log([...settings, ...[job.command, ...job.args].map(shellQuote)].join(' '));
    return 0;
  }
  const code = await runJob(job, runDir);
  const complete = fs.existsSync(path.join(runDir, runFiles.summary)) && unfinished(runDir) === undefined;
  // PRRTE counts the death of a rank that the job spawned (--respawn) against the job, though the
  // survivors recovered and finished: the complete summary, written last and atomically, decides
  if (code !== 0 && complete) {
    console.error(`ft-run: mpirun exited ${code} (it counts a --respawn rank that died or could not start against the job), but the run completed: exit 0`);
    return 0;
  }
  if (code !== 0) return code;
  const why = unfinished(runDir);
  if (why === undefined) return 0;
  console.error(`ft-run: the job ended without finishing: ${why} (mpirun exit 0)`);
  return 1;
}

main().then(
  (code) => { process.exitCode = code; },
  (error: unknown) => {
    console.error(`ft-run: ${(error as Error).message}`);
    process.exitCode = 1;
  },
);
