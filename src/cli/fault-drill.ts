// One training job under mpirun with real faults from outside: follows the run's metrics and,
// when they reach step K, sends the process of world rank R (its pid from the run directory)
// SIGKILL (a crash) or SIGSTOP (a hang, which the survivors detect, declare dead and kill), or
// slows it from then on by SIGSTOP/SIGCONT duty cycling (a real slow process: it runs 1/F of each
// period), or kills a random working rank every period (a chaos drill, chaos.ts). Used by
// launch/drill, launch/compare, bench/recovery, bench/straggler and bench/chaos.
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
import { forwardJobStderr, hangTimeoutOf, trainCommand, trainFlag } from './mpirun';
import { FrozenRanks } from './frozen-ranks';
import { frozenRankMs, hangBounds } from '../liveness/hang-bounds';
import { ChaosKills, type ChaosPlan } from './chaos';

export type DrillSignal = 'SIGKILL' | 'SIGSTOP';

export interface Kill {
  rank: number;
  step: number;
  /** SIGKILL (--kill) or SIGSTOP (--stop) */
  signal: DrillSignal;
  pid?: number;
  /** when the signal was sent */
  time?: number;
  /** the process's private memory then (kB, RssAnon): the kernel frees it before the death can be seen */
  rss_anon_kb?: number;
  /** why it could not be sent (the process was gone, no pid file) */
  error?: string;
}

/** A rank slowed from outside from step K on: it runs 1/factor of each period (factor 1: at full speed again). */
export interface Slowdown {
  rank: number;
  step: number;
  factor: number;
  pid?: number;
  /** when the slowing began */
  time?: number;
  error?: string;
}

export interface DrillOutcome {
  runDir: string;
  /** mpirun's exit code */
  code: number;
  /** the kills sent (pid and time set) */
  sent: Kill[];
  /** the chaos drill's kills (pid and time set, or the error) */
  chaos: Kill[];
  /** the slowdowns begun (pid and time set) */
  slowed: Slowdown[];
  summary: Pick<Summary, 'steps' | 'world_final' | 'ranks_lost' | 'params_sha256' | 'failures'> | null;
  /** the job finished (its summary written), every kill was sent, and each killed rank is among the summary's lost ranks */
  passed: boolean;
}

/** "R@K", as --kill (SIGKILL) or --stop (SIGSTOP) take it. */
export function parseKill(text: string, signal: DrillSignal = 'SIGKILL'): Kill {
  const match = /^(\d+)@(\d+)$/.exec(text);
  if (!match) throw new Error(`--${signal === 'SIGKILL' ? 'kill' : 'stop'} expects RANK@STEP (e.g. 2@30), got "${text}"`);
  return { rank: Number(match[1]), step: Number(match[2]), signal };
}

/** "R@K:F", as --slow takes it. */
export function parseSlow(text: string): Slowdown {
  const match = /^(\d+)@(\d+):(\d+(?:\.\d+)?)$/.exec(text);
  const factor = Number(match?.[3]);
  if (!match || !(factor >= 1 && factor <= 100))
    throw new Error(`--slow expects RANK@STEP:FACTOR with FACTOR in [1, 100] (e.g. 1@20:2), got "${text}"`);
  return { rank: Number(match[1]), step: Number(match[2]), factor };
}

/** SIGSTOP and SIGCONT a process in turn so that it runs 1/factor of every period; ends with it running. */
class DutyCycle {
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly pid: number,
    private readonly factor: number,
    private readonly periodMs: number,
  ) {
    this.run();
  }

  private signal(name: NodeJS.Signals): boolean {
    try {
      process.kill(this.pid, name);
      return true;
    } catch {
      return false; // gone: nothing left to slow
    }
  }

  private readonly run = (): void => {
    if (!this.signal('SIGCONT')) return;
    const running = this.periodMs / this.factor;
    this.timer = setTimeout(() => {
      if (this.signal('SIGSTOP')) this.timer = setTimeout(this.run, this.periodMs - running);
    }, running);
  };

  end(): void {
    clearTimeout(this.timer);
    this.signal('SIGCONT');
  }
}

/**
 * Sends `kill`'s signal to its world rank's process (the pid from the run directory, on this host),
 * recording the pid and the time, or why it could not; one `[drill] <label>...` line either way.
 * `step`: the last committed step.
 */
export function sendKill(runDir: string, kill: Kill, step: number, label = ''): void {
  const what = `${label}${kill.signal === 'SIGSTOP' ? 'kill -STOP' : 'kill -9'}`;
  try {
    const file = readPidFile(path.join(runDir, runFiles.pids), kill.rank);
    if (file === null) throw new Error(`no pid file for world rank ${kill.rank}`);
    if (file.host !== os.hostname()) throw new Error(`world rank ${kill.rank} runs on ${file.host}, not on this host (${os.hostname()})`);
    kill.pid = file.pid;
    kill.rss_anon_kb = rssAnonKb(kill.pid);
    process.kill(kill.pid, kill.signal);
    kill.time = Date.now();
    console.log(`[drill] ${what} ${kill.pid} (world rank ${kill.rank}) after step ${step}`);
  } catch (error) {
    kill.error = (error as Error).message;
    console.log(`[drill] ${what} of world rank ${kill.rank} failed: ${kill.error}`);
  }
}

/** Process `pid`'s resident private memory (kB), undefined where /proc does not say. */
function rssAnonKb(pid: number): number | undefined {
  try {
    const line = /^RssAnon:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return line ? Number(line[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The run directory named in ft-train's arguments. */
function runDirOf(trainArgs: string[]): string {
  const runDir = trainFlag(trainArgs, 'run-dir');
  if (runDir === undefined) throw new Error('the ft-train arguments need --run-dir DIR (the drill follows its metrics)');
  return runDir;
}

/**
 * Runs ft-train on `ranks` ranks with `trainArgs`, sending `kills`, `slows` (duty cycles of
 * `periodMs`) and `chaos`'s kills; writes drill.json when there are any.
 */
export async function runDrill(
  ranks: number,
  kills: Kill[],
  trainArgs: string[],
  slows: Slowdown[] = [],
  periodMs = 20,
  chaos?: ChaosPlan,
): Promise<DrillOutcome> {
  const runDir = runDirOf(trainArgs);
  const chaosKills = chaos ? new ChaosKills(chaos, runDir, (kill) => sendKill(runDir, kill, kill.step, 'chaos: ')) : undefined;
  const plan = kills.map((k) => ({ rank: k.rank, step: k.step, signal: k.signal }) as Kill);
  const slowPlan = slows.map((s) => ({ rank: s.rank, step: s.step, factor: s.factor }) as Slowdown).sort((a, b) => a.step - b.step);
  const cycles = new Map<number, DutyCycle>();
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
  let last: StepRecord | undefined;
  const follow = setInterval(() => {
    for (const record of metrics.read()) [last, step] = [record, record.step];
    chaosKills?.poll(last);
    for (const kill of plan) {
      if (kill.time === undefined && kill.error === undefined && step >= kill.step) sendKill(runDir, kill, step);
    }
    for (const slow of slowPlan) {
      if (slow.time !== undefined || slow.error !== undefined || step < slow.step) continue;
      const file = readPidFile(path.join(runDir, runFiles.pids), slow.rank);
      if (file === null || file.host !== os.hostname()) {
        slow.error =
          file === null ? `no pid file for world rank ${slow.rank}` : `world rank ${slow.rank} runs on ${file.host}, not on this host`;
        console.log(`[drill] slowing world rank ${slow.rank} failed: ${slow.error}`);
        continue;
      }
      cycles.get(slow.rank)?.end();
      cycles.delete(slow.rank);
      [slow.pid, slow.time] = [file.pid, Date.now()];
      if (slow.factor > 1) cycles.set(slow.rank, new DutyCycle(file.pid, slow.factor, periodMs));
      console.log(
        slow.factor > 1
          ? `[drill] slowing ${file.pid} (world rank ${slow.rank}) ${slow.factor}x after step ${step}: SIGSTOP/SIGCONT, running ${(100 / slow.factor).toFixed(0)}% of every ${periodMs} ms`
          : `[drill] world rank ${slow.rank} (${file.pid}) at full speed again after step ${step}`,
      );
    }
    const pending = [...plan, ...slowPlan].some((fault) => fault.time === undefined && fault.error === undefined);
    if (!pending && !chaosKills) stopFollowing();
  }, 5);
  // no rank left to kill a stopped one (every rank stopped): the drill does, as ft-run does
  const frozen = new FrozenRanks(path.join(runDir, runFiles.pids), [], frozenRankMs(hangBounds(hangTimeoutOf(trainArgs))));
  const watch = setInterval(() => {
    const hung = frozen.killHung(Date.now());
    if (hung !== null) console.log(`[drill] ${hung}`);
  }, 200);
  const stopFollowing = (): void => {
    clearInterval(follow);
    metrics.close();
    chaosKills?.close();
  };
  let code: number;
  try {
    code = await exited;
  } finally {
    clearInterval(watch);
    stopFollowing();
    for (const cycle of cycles.values()) cycle.end();
  }

  const summaryFile = path.join(runDir, runFiles.summary);
  const summary = fs.existsSync(summaryFile) ? (readObject(summaryFile) as DrillOutcome['summary']) : null;
  // ft-train refuses bad input before it creates the run directory: then there is no run to record kills in
  const chaosSent = chaosKills?.sent ?? [];
  if (plan.length + slowPlan.length + chaosSent.length > 0 && fs.existsSync(runDir))
    writeAtomically(
      path.join(runDir, runFiles.drill),
      JSON.stringify(
        {
          ranks,
          kills: plan,
          ...(slowPlan.length > 0 ? { slows: slowPlan, period_ms: periodMs } : {}),
          ...(chaos ? { chaos: chaosSent, chaos_every_ms: chaos.everyMs, chaos_seed: chaos.seed } : {}),
          mpirun_exit: code,
        },
        null,
        2,
      ) + '\n',
    );
  const sent = plan.filter((k) => k.time !== undefined);
  const slowed = slowPlan.filter((s) => s.time !== undefined);
  const lost = new Set(summary?.failures.flatMap((f) => f.lost));
  // PRRTE counts the death of a rank the job spawned (--respawn) against it: the complete summary decides, as in launch/ft-run
  const passed =
    summary !== null &&
    sent.length === plan.length &&
    [...sent, ...chaosSent].every((k) => k.error === undefined && lost.has(k.rank)) &&
    slowPlan.every((s) => s.error === undefined);
  return { runDir, code, sent, chaos: chaosSent, slowed, summary, passed };
}
