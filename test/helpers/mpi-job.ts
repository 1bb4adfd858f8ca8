// Runs jobs under mpirun (test programs, ft-train, launch/drill) with a hard timeout.
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { mpirunCommand } from '../../src/cli/mpirun';

export interface JobResult<T> {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Every `@result` line the ranks printed, in order of arrival. */
  results: T[];
}

const programsDir = path.join(__dirname, '..', 'mpi', 'programs');
export const repoRoot = path.join(__dirname, '..', '..', '..');

/** Runs a command in its own process group; kills the whole group after `timeoutMs`. */
export function runCommand<T = never>(command: string, argv: string[], env: NodeJS.ProcessEnv, timeoutMs: number, label: string): Promise<JobResult<T>> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, argv, { env, cwd: repoRoot, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => { stdout += chunk; });
    child.stderr.on('data', (chunk) => { stderr += chunk; });
    const timer = setTimeout(() => {
      process.kill(-child.pid!, 'SIGKILL');
      reject(new Error(`${label} timed out after ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', (error) => { clearTimeout(timer); reject(error); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const results = stdout.split('\n').filter((line) => line.startsWith('@result '))
        .map((line) => JSON.parse(line.slice('@result '.length)) as T);
      resolve({ code, signal, stdout, stderr, results });
    });
  });
}

/** Runs test/mpi/programs/<name>.js on `ranks` ranks. */
export function runProgram<T>(name: string, ranks: number, args: string[] = [], timeoutMs = 60_000): Promise<JobResult<T>> {
  const { command, args: argv, env } = mpirunCommand({ ranks, program: [process.execPath, path.join(programsDir, `${name}.js`), ...args] });
  return runCommand<T>(command, argv, env, timeoutMs, `${name} on ${ranks} ranks`);
}

/** Runs launch/ft-train.js on `ranks` ranks. */
export function runTrain(ranks: number, args: string[], timeoutMs = 90_000): Promise<JobResult<never>> {
  const { command, args: argv, env } = mpirunCommand({ ranks, program: [process.execPath, path.join(repoRoot, 'launch', 'ft-train.js'), ...args] });
  return runCommand(command, argv, env, timeoutMs, `ft-train on ${ranks} ranks ${args.join(' ')}`);
}
