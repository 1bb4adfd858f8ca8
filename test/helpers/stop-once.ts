// Stops a launch/ft-run job at a point it reaches in its own time (a newcomer joined, a step done),
// not after a sleep: once its run directory shows it, ft-run gets a SIGTERM (or, as a scheduler's
// stop sends it, every process of the job: ft-run, mpirun and the ranks) and the ranks checkpoint
// and stop.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { killJobProcesses } from '../../src/cli/job-processes';
import { readPid } from '../../src/run/pids';
import type { JobResult } from './mpi-job';

/** Who gets the SIGTERM: ft-run alone, or (as a scheduler's stop sends it) every process of the job at once. */
export type StopTarget = 'ft-run' | 'every process';

/**
 * Once `reached()` (a look at the run directory), ft-run (its pid is in the ranks' environment,
 * FT_RUN_JOB), or as `to` says every process of its job, gets a SIGTERM; the job's result. Fails,
 * saying it did not reach `what`, when the job ends before.
 */
export async function stopOnce(
  running: Promise<JobResult<never>>,
  runDir: string,
  reached: () => boolean,
  what: string,
  to: StopTarget = 'ft-run',
): Promise<JobResult<never>> {
  let ended = false;
  const settled = () => {
    ended = true;
  };
  running.then(settled, settled);
  while (!ended && !reached()) await new Promise((r) => setTimeout(r, 50));
  if (ended) {
    const early = await running;
    assert.fail(`the job ended before ${what} (exit ${early.code})\n${early.stdout}\n${early.stderr}`);
  }
  const rankPid = readPid(path.join(runDir, 'pids'), 0);
  const launcher = fs
    .readFileSync(`/proc/${rankPid}/environ`, 'latin1')
    .split('\0')
    .find((v) => v.startsWith('FT_RUN_JOB='))!;
  process.kill(Number(launcher.slice('FT_RUN_JOB='.length)), 'SIGTERM');
  // mpirun and the ranks carry ft-run's mark in their environment
  if (to === 'every process') killJobProcesses(launcher, false, 'SIGTERM');
  return running;
}

/** stopOnce, once `file` in `runDir` holds `text`. */
export function stopOnceWritten(
  running: Promise<JobResult<never>>,
  runDir: string,
  file: string,
  text: string,
  to: StopTarget = 'ft-run',
): Promise<JobResult<never>> {
  const watched = path.join(runDir, file);
  return stopOnce(
    running,
    runDir,
    () => fs.existsSync(watched) && fs.readFileSync(watched, 'utf8').includes(text),
    `${file} held ${text}`,
    to,
  );
}
