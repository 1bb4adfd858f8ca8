// One training job under mpirun with real faults from outside: follows the run's metrics and,
// when they reach step K, sends the process of world rank R (its pid from the run directory)
// SIGKILL (a crash) or SIGSTOP (a hang, which the survivors detect, declare dead and kill).
// Used by launch/drill, launch/compare and bench/recovery.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeAtomically } from '../base/atomic-write';
import { runFiles } from '../run/files';
import { readPidFile } from '../run/pids';
import { JsonlFollower } from '../run/follower';
import { readObject } from '../run/reader';
import type { StepRecord, Summary } from '../run/records';
import { forwardJobStderr, trainCommand, trainFlag } from './mpirun';

export type DrillSignal = 'SIGKILL' | 'SIGSTOP';

export interface Kill {
  rank: number;
  step: number;
  /** SIGKILL (--kill) or SIGSTOP (--stop) */
  signal: DrillSignal;
  pid?: number;
  /** when the signal was sent */
  time?: number;
  /** why it could not be sent (the process was gone, no pid file) */
  error?: string;
}

export interface DrillOutcome {
  runDir: string;
  /** mpirun's exit code */
  code: number;
  /** the kills sent (pid and time set) */
  sent: Kill[];
  summary: Pick<Summary, 'steps' | 'world_final' | 'ranks_lost' | 'params_sha256' | 'failures'> | null;
  /** the job finished, every kill was sent, and each killed rank is among the summary's lost ranks */
  passed: boolean;
}

/** "R@K", as --kill (SIGKILL) or --stop (SIGSTOP) take it. */
export function parseKill(text: string, signal: DrillSignal = 'SIGKILL'): Kill {
  const match = /^(\d+)@(\d+)$/.exec(text);
  if (!match) throw new Error(`--${signal === 'SIGKILL' ? 'kill' : 'stop'} expects RANK@STEP (e.g. 2@30), got "${text}"`);
  return { rank: Number(match[1]), step: Number(match[2]), signal };
}

/** The run directory named in ft-train's arguments. */
function runDirOf(trainArgs: string[]): string {
  const runDir = trainFlag(trainArgs, 'run-dir');
  if (runDir === undefined) throw new Error('the ft-train arguments need --run-dir DIR (the drill follows its metrics)');
  return runDir;
}

/** Runs ft-train on `ranks` ranks with `trainArgs`, sending `kills`; writes drill.json when there are any. */
export async function runDrill(ranks: number, kills: Kill[], trainArgs: string[]): Promise<DrillOutcome> {
  const runDir = runDirOf(trainArgs);
  const plan = kills.map((k) => ({ rank: k.rank, step: k.step, signal: k.signal }) as Kill);
  const { command, args, env } = trainCommand(ranks, trainArgs);
  const job = spawn(command, args, { env, stdio: ['inherit', 'inherit', 'pipe'] });
  forwardJobStderr(job.stderr!);
  const exited = new Promise<number>((resolve, reject) => {
    job.on('error', (error) => reject(new Error(`${command}: ${error.message}`)));
    job.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });

  // the metrics from where the last look left off; no more looking once every kill is sent or failed
  const metrics = new JsonlFollower<StepRecord>(path.join(runDir, runFiles.metrics));
  let step = -1;
  const follow = setInterval(() => {
    for (const record of metrics.read()) step = record.step;
    for (const kill of plan) {
      if (kill.time !== undefined || kill.error !== undefined || step < kill.step) continue;
      const what = kill.signal === 'SIGSTOP' ? 'kill -STOP' : 'kill -9';
      try {
        const file = readPidFile(path.join(runDir, runFiles.pids), kill.rank);
        if (file === null) throw new Error(`no pid file for world rank ${kill.rank}`);
        if (file.host !== os.hostname())
          throw new Error(`world rank ${kill.rank} runs on ${file.host}, not on this host (${os.hostname()})`);
        kill.pid = file.pid;
        process.kill(kill.pid, kill.signal);
        kill.time = Date.now();
        console.log(`[drill] ${what} ${kill.pid} (world rank ${kill.rank}) after step ${step}`);
      } catch (error) {
        kill.error = (error as Error).message;
        console.log(`[drill] ${what} of world rank ${kill.rank} failed: ${kill.error}`);
      }
    }
    if (plan.every((kill) => kill.time !== undefined || kill.error !== undefined)) stopFollowing();
  }, 5);
  const stopFollowing = (): void => {
    clearInterval(follow);
    metrics.close();
  };
  let code: number;
  try {
    code = await exited;
  } finally {
    stopFollowing();
  }

  const summaryFile = path.join(runDir, runFiles.summary);
  const summary = fs.existsSync(summaryFile) ? (readObject(summaryFile) as DrillOutcome['summary']) : null;
  // ft-train refuses bad input before it creates the run directory: then there is no run to record kills in
  if (plan.length > 0 && fs.existsSync(runDir))
    writeAtomically(path.join(runDir, runFiles.drill), JSON.stringify({ ranks, kills: plan, mpirun_exit: code }, null, 2) + '\n');
  const sent = plan.filter((k) => k.time !== undefined);
  const lost = new Set(summary?.failures.flatMap((f) => f.lost));
  const passed = code === 0 && summary !== null && sent.length === plan.length && sent.every((k) => lost.has(k.rank));
  return { runDir, code, sent, summary, passed };
}
