// Runs jobs under mpirun (test programs, ft-train, launch/drill) with a hard timeout.
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { jobProcesses, killJobProcesses } from '../../src/cli/job-processes';
import { mpirunCommand, trainCommand } from '../../src/cli/mpirun';

export interface JobResult<T> {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Every `@result` line the ranks printed, in order of arrival. */
  results: T[];
  /** processes of the job still alive when its command ended (then killed) */
  stragglers: number;
}

const programsDir = path.join(__dirname, '..', 'mpi', 'programs');
export const repoRoot = path.join(__dirname, '..', '..', '..');

/** The MPI tests' usual job: lenet on Fashion-MNIST (ft-train's flags). */
export const lenetOnFashion = ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist'];
/** For the tests that do not measure accuracy: the test split's first 500 samples scored (scoring all 10,000 took a 4-rank job about 0.6 s). */
export const fewTestSamples = ['--eval-samples', '500'];

let jobs = 0;

/** Waits up to `graceMs` for the job's processes to end, then kills what is left. */
async function reap(marker: string, graceMs: number): Promise<void> {
  const deadline = Date.now() + graceMs;
  while (jobProcesses(marker).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  killJobProcesses(marker);
}

/** Runs a command and every process it starts; kills them all after `timeoutMs`. `watch` sees the stderr so far as it grows. */
export function runCommand<T = never>(
  command: string,
  argv: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
  label: string,
  watch?: (stderr: string) => void,
): Promise<JobResult<T>> {
  const job = `${process.pid}-${++jobs}`;
  const marker = `FT_TEST_JOB=${job}`;
  return new Promise((resolve, reject) => {
    const child = spawn(command, argv, {
      env: { ...env, FT_TEST_JOB: job },
      cwd: repoRoot,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      watch?.(stderr);
    });
    const timer = setTimeout(() => {
      process.kill(-child.pid!, 'SIGKILL');
      void reap(marker, 0).then(() => reject(new Error(`${label} timed out after ${timeoutMs} ms\n${stdout}\n${stderr}`)));
    }, timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const results = stdout
        .split('\n')
        .filter((line) => line.startsWith('@result '))
        .map((line) => JSON.parse(line.slice('@result '.length)) as T);
      const stragglers = jobProcesses(marker).length;
      void reap(marker, 10_000).then(() => resolve({ code, signal, stdout, stderr, results, stragglers }));
    });
  });
}

/** Runs test/mpi/programs/<name>.js on `ranks` ranks. */
export function runProgram<T>(name: string, ranks: number, args: string[] = [], timeoutMs = 60_000): Promise<JobResult<T>> {
  const { command, args: argv, env } = mpirunCommand({ ranks, program: [process.execPath, path.join(programsDir, `${name}.js`), ...args] });
  return runCommand<T>(command, argv, env, timeoutMs, `${name} on ${ranks} ranks`);
}

/** Runs launch/ft-train.js on `ranks` ranks (`watch`: see runCommand). */
export function runTrain(ranks: number, args: string[], timeoutMs = 90_000, watch?: (stderr: string) => void): Promise<JobResult<never>> {
  const { command, args: argv, env } = trainCommand(ranks, args);
  return runCommand(command, argv, env, timeoutMs, `ft-train on ${ranks} ranks ${args.join(' ')}`, watch);
}

/** Runs launch/drill with `args` (its flags, `--`, ft-train's). */
export function runLaunchDrill(args: string[], timeoutMs = 90_000): Promise<JobResult<never>> {
  return runCommand(
    process.execPath,
    [path.join(repoRoot, 'launch', 'drill'), ...args],
    process.env,
    timeoutMs,
    `launch/drill ${args.join(' ')}`,
  );
}
