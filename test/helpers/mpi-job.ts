// Runs a test program under mpirun with a hard timeout and collects what each rank reported.
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

/** Runs test/mpi/programs/<name>.js on `ranks` ranks; kills the job after `timeoutMs`. */
export function runProgram<T>(name: string, ranks: number, args: string[] = [],
  timeoutMs = 60_000): Promise<JobResult<T>> {
  const { command, args: argv, env } = mpirunCommand({
    ranks, program: [process.execPath, path.join(programsDir, `${name}.js`), ...args],
  });
  return new Promise((resolve, reject) => {
    const child = spawn(command, argv, { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => { stdout += chunk; });
    child.stderr.on('data', (chunk) => { stderr += chunk; });
    const timer = setTimeout(() => {
      process.kill(-child.pid!, 'SIGKILL');
      reject(new Error(`${name} on ${ranks} ranks timed out after ${timeoutMs} ms\n${stdout}\n${stderr}`));
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
