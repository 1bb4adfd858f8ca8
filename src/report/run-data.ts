// What ft-report reads from a run directory (docs/architecture.md, the run-directory contract): summary.json,
// metrics.jsonl, events.jsonl and, after a drill, drill.json. Every file is checked, so that a
// missing, half-written or foreign one becomes one line naming the file and the problem; a run
// without summary.json is unfinished (still running, or stopped) and is read up to its last
// committed step.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { runFiles } from '../run/files';
import { isObject, readLines, readObject, RunDirError, type Json } from '../run/reader';
import type { StepRecord, Summary } from '../run/records';

/** The recovery from the failures of one step, phase by phase (durations in ms). */
export interface Recovery {
  step: number;
  /** ms since the epoch, when the first survivor saw the failure */
  time: number;
  lost: number[];
  /** world size after it */
  world: number;
  /** where the survivors saw the failure first (compute, collective, agree, ...) */
  phase: string;
  detectMs: number;
  revokeShrinkMs: number;
  agreeMs: number;
  readbackMs: number;
  /** ranks that took the lost ranks' places (spares, spawned ranks), and the spawn and join's time */
  joined: number[];
  joinMs: number;
  /** what the survivors read back before retrying (the rest of the lost shards follows in the background) */
  readbackBytes: number;
  checkpointMs: number;
  retryMs: number;
  /** from the drill's kill -9 to the next committed step (drills only) */
  killToCommitMs?: number;
}

/** Silent data corruption a check found: the ranks named, what differed, and the step the survivors rolled back to. */
export interface Corruption {
  /** the step of the check that found it */
  step: number;
  /** ms since the epoch, when it was found */
  time: number;
  /** the ranks a check named; none where a join found the ranks' states differ */
  ranks: number[];
  differed: string[];
  /** evict or rollback (rolled back to `to`: a join found the ranks' states differ), or stop */
  action: string;
  to: number;
}

/** A change of the shard map for slow ranks (--rebalance auto): each rank's shard count before and after, from `step` on. */
export interface Rebalance {
  step: number;
  ranks: number[];
  before: number[];
  after: number[];
}

/** A checkpoint the run wrote: why (jit, periodic, sigterm, ...) and how long it took, ms. */
export interface CheckpointWrite {
  reason: string;
  durationMs: number;
}

/** A restart by launch/ft-run: the checkpoint's step it resumed from, and what it cost. */
export interface Restart {
  step: number;
  /** ms from the last step the ended job committed to the first new step after the restart, less that step's own time; undefined until one committed */
  costMs?: number;
}

export interface Run {
  dir: string;
  /** undefined: the run did not finish (no summary.json) */
  summary?: Summary;
  steps: StepRecord[];
  /** ms since the epoch, when training started (the start event) */
  startTime: number;
  recoveries: Recovery[];
  checkpoints: CheckpointWrite[];
  /** the steps where a run resumed into this directory continued it (--resume into the same --run-dir) */
  resumes: number[];
  /** launch/ft-run's restarts of the run after a job ended without finishing (--max-restarts), in order */
  restarts: Restart[];
  /** the corruptions its checks found (--verify-every), in order */
  corruptions: Corruption[];
  /** the shard map's changes for slow ranks, in order */
  rebalances: Rebalance[];
  /** a language model's text at the end of training (sample.txt), if it wrote one */
  sample?: string;
}

export function readRun(dir: string): Run {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new RunDirError(`${dir}: no such run directory`);
  const metricsFile = path.join(dir, runFiles.metrics);
  const events = readLines(path.join(dir, runFiles.events)).map(({ value }) => value);
  const corruptions = events.filter((e) => e.event === 'corruption').map((e) => corruptionOf(e, path.join(dir, runFiles.events)));
  // an eviction rolls back, and so does a join that found the ranks' states differ; a stop does not
  const rollbacks = corruptions.filter((c) => c.action !== 'stop').map((c) => c.to);
  const records = readLines(metricsFile).map(({ value, line }) => checkStep(value, `${metricsFile} line ${line}`));
  const joined = joinResumed(records, rollbacks);
  const steps = joined.steps;
  const restarts = events.filter((e) => e.event === 'restart').map((e) => restartOf(e, records, path.join(dir, runFiles.events)));
  // a restart from a checkpoint of the step after the last one committed redoes no step: the metrics alone do not show it
  const resumes = [...new Set([...joined.resumes, ...restarts.map((r) => r.step)])].sort((a, b) => a - b);
  const summary = readSummary(dir);
  const start = events.find((e) => e.event === 'start');
  if (start === undefined || typeof start.time !== 'number') throw new RunDirError(`${path.join(dir, runFiles.events)}: no start event`);
  // the run directory's own first run may have resumed from elsewhere: a resume event before the second start
  const secondStart = events.findIndex((e, i) => i > events.indexOf(start) && e.event === 'start');
  const resume = events.slice(0, secondStart < 0 ? events.length : secondStart).find((e) => e.event === 'resume');
  checkSteps(metricsFile, steps, summary, typeof resume?.step === 'number' ? resume.step : 0);
  const recoveries = readRecoveries(dir, events, summary);
  addKillTimes(dir, recoveries, steps);
  const checkpoints = events
    .filter((e) => e.event === 'checkpoint' && typeof e.duration_ms === 'number')
    .map((e) => ({ reason: String(e.reason), durationMs: e.duration_ms as number }));
  const sampleFile = path.join(dir, runFiles.sample);
  const sample = fs.existsSync(sampleFile) ? fs.readFileSync(sampleFile, 'utf8') : undefined;
  const rebalances = events.filter((e) => e.event === 'rebalance').map((e) => rebalanceOf(e, path.join(dir, runFiles.events)));
  return { dir, summary, steps, startTime: start.time, recoveries, checkpoints, resumes, restarts, corruptions, rebalances, sample };
}

/** A restart event, and its cost from `records` (metrics.jsonl's every line, in file order). */
function restartOf(e: Json, records: StepRecord[], file: string): Restart {
  const { step, time } = e;
  if (typeof step !== 'number' || typeof time !== 'number') throw new RunDirError(`${file}: a restart event without a step or time`);
  const before = records.filter((r) => r.time <= time).at(-1);
  const next = before && records.find((r) => r.time > time && r.step > before.step);
  return next ? { step, costMs: next.time - before.time - next.step_ms } : { step };
}

function rebalanceOf(e: Json, file: string): Rebalance {
  const { step, ranks, before, after } = e;
  const counts = (value: unknown): value is number[] => isRanks(value) && value.length === (ranks as number[]).length;
  if (typeof step !== 'number' || !isRanks(ranks) || !counts(before) || !counts(after))
    throw new RunDirError(`${file}: a rebalance event without a step, or with ranks, before and after of different lengths`);
  return { step, ranks, before, after };
}

function corruptionOf(e: Json, file: string): Corruption {
  const { step, time, rolled_back: back } = e;
  if (typeof step !== 'number' || typeof time !== 'number' || typeof back !== 'number' || !isRanks(e.ranks))
    throw new RunDirError(`${file}: a corruption event without a step, time, rolled_back or ranks`);
  // null for a rank named where nobody could be told apart
  const differed = Array.isArray(e.differed) ? e.differed.filter((d) => d !== null).map(String) : [];
  return { step, time, ranks: e.ranks, differed, action: String(e.action), to: step - back };
}

/**
 * A run directory that later runs resumed into holds each run's steps in turn, each from its resume
 * step on (a step numbered no higher than the one before starts the next run): the latest record
 * of each step is the run's, the earlier ones past a resume its history. A corruption's rollback
 * (`rollbacks`: the steps rolled back to, in order) replays steps the same way, without a resume.
 */
function joinResumed(records: StepRecord[], rollbacks: readonly number[]): { steps: StepRecord[]; resumes: number[] } {
  let steps: StepRecord[] = [];
  const resumes: number[] = [];
  let replays = 0;
  records.forEach((record, i) => {
    if (i > 0 && record.step <= records[i - 1].step) {
      if (rollbacks[replays] === record.step) replays++;
      else resumes.push(record.step);
      steps = steps.filter((s) => s.step < record.step);
    }
    steps.push(record);
  });
  return { steps, resumes };
}

function checkStep(line: Json, where: string): StepRecord {
  for (const name of ['step', 'epoch', 'loss', 'lr', 'world', 'samples', 'step_ms', 'time']) {
    if (typeof line[name] !== 'number') throw new RunDirError(`${where}: "${name}" is missing or not a number`);
  }
  return line as unknown as StepRecord;
}

/** summary.json, checked; undefined when the run has not written it (it did not finish). */
function readSummary(dir: string): Summary | undefined {
  const file = path.join(dir, runFiles.summary);
  if (!fs.existsSync(file)) return undefined;
  const summary = readObject(file);
  if (summary.status !== 'complete') throw new RunDirError(`${file}: status is ${JSON.stringify(summary.status)}, not "complete"`);
  const numbers = [
    'steps',
    'final_loss',
    'wall_s',
    'ranks_lost',
    'bytes_read_back',
    'world_initial',
    'world_final',
    'shards',
    'batch',
    'seed',
  ];
  for (const name of numbers) if (typeof summary[name] !== 'number') throw new RunDirError(`${file}: "${name}" is missing or not a number`);
  for (const name of ['model', 'data', 'on_failure'])
    if (typeof summary[name] !== 'string') throw new RunDirError(`${file}: "${name}" is missing or not a string`);
  for (const name of ['test_accuracy', 'test_loss'])
    if (summary[name] !== null && typeof summary[name] !== 'number') throw new RunDirError(`${file}: "${name}" is not a number`);
  if (
    summary.settings !== undefined &&
    !(
      isObject(summary.settings) &&
      Object.values(summary.settings).every((v) => v === null || ['string', 'number', 'boolean'].includes(typeof v))
    )
  ) {
    throw new RunDirError(`${file}: "settings" is not an object of plain values`);
  }
  if (typeof summary.params_sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(summary.params_sha256))
    throw new RunDirError(`${file}: "params_sha256" is not a sha256`);
  const failures = summary.failures;
  if (
    !Array.isArray(failures) ||
    !failures.every((f) => isObject(f) && typeof f.step === 'number' && isRanks(f.lost) && typeof f.world === 'number')
  ) {
    throw new RunDirError(`${file}: "failures" is not a list of {step, lost, world}`);
  }
  return summary as unknown as Summary;
}

function isRanks(value: unknown): value is number[] {
  return Array.isArray(value) && value.every((rank) => Number.isSafeInteger(rank) && rank >= 0);
}

/** metrics.jsonl must hold every committed step once, in order, from the first (0, or where the run resumed) to the last (summary.json's, when the run finished). */
function checkSteps(file: string, steps: StepRecord[], summary: Summary | undefined, first: number): void {
  if (steps.length === 0) throw new RunDirError(`${file}: no step`);
  if (steps[0].step !== first) throw new RunDirError(`${file}: starts at step ${steps[0].step}, not ${first}`);
  steps.forEach((record, i) => {
    if (i > 0 && record.step !== steps[i - 1].step + 1)
      throw new RunDirError(`${file}: step ${record.step} follows step ${steps[i - 1].step}`);
  });
  const last = steps[steps.length - 1].step;
  if (summary !== undefined && last !== summary.steps - 1)
    throw new RunDirError(`${file}: ends at step ${last}, but ${runFiles.summary} says ${summary.steps} steps`);
}

/**
 * One recovery per step that had failures: its phases' events carry that step, except the JIT
 * checkpoint, which carries the step it saves (one later when the failure surfaced in the vote
 * of a step that committed), so it joins the recovery under way.
 */
function readRecoveries(dir: string, events: Json[], summary: Summary | undefined): Recovery[] {
  const eventsFile = path.join(dir, runFiles.events);
  const byStep = new Map<number, Recovery>();
  let current: Recovery | undefined;
  const total = (e: Json) => (typeof e.duration_ms === 'number' ? e.duration_ms : 0);
  // summary.json counts the failures of the directory's last run only (a resumed one appends its own)
  const lastStart = events.map((e) => e.event).lastIndexOf('start');
  const lastRunSteps = new Set<number>();
  for (const [index, e] of events.entries()) {
    if (typeof e.step !== 'number') continue;
    if (e.event === 'failure' && index > lastStart) lastRunSteps.add(e.step);
    if (e.event === 'failure' && !byStep.has(e.step)) {
      byStep.set(e.step, {
        step: e.step,
        time: typeof e.time === 'number' ? e.time : NaN,
        lost: [],
        world: 0,
        phase: String(e.phase),
        detectMs: 0,
        revokeShrinkMs: 0,
        agreeMs: 0,
        readbackMs: 0,
        joined: [],
        joinMs: 0,
        readbackBytes: 0,
        checkpointMs: 0,
        retryMs: 0,
      });
    }
    const recovery = e.event === 'checkpoint' && e.reason === 'jit' ? current : byStep.get(e.step);
    if (recovery === undefined) continue;
    current = recovery;
    switch (e.event) {
      case 'failure':
        recovery.detectMs += typeof e.detect_ms === 'number' ? e.detect_ms : 0;
        break;
      case 'revoke+shrink':
        if (!isRanks(e.lost))
          throw new RunDirError(`${eventsFile}: a revoke+shrink event at step ${e.step} whose "lost" is not a list of ranks`);
        recovery.revokeShrinkMs += total(e);
        recovery.lost.push(...e.lost);
        if (typeof e.world === 'number') recovery.world = e.world;
        break;
      case 'agree':
        recovery.agreeMs += total(e);
        break;
      case 'spawn':
        recovery.joinMs += total(e);
        break;
      case 'join':
        recovery.joinMs += total(e);
        if (isRanks(e.ranks)) recovery.joined.push(...e.ranks);
        break;
      case 'readback':
        recovery.readbackMs += total(e);
        recovery.readbackBytes += typeof e.bytes_before_retry === 'number' ? e.bytes_before_retry : 0;
        break;
      case 'checkpoint':
        recovery.checkpointMs += total(e);
        break;
      case 'retry':
        recovery.retryMs += total(e);
        break;
    }
  }
  const recoveries = [...byStep.values()].filter((r) => r.lost.length > 0);
  if (summary === undefined) return sortedLost(recoveries);
  for (const failure of summary.failures) {
    if (!recoveries.some((r) => r.step === failure.step))
      throw new RunDirError(`${eventsFile}: no recovery at step ${failure.step}, where ${runFiles.summary} has a failure`);
  }
  const failedSteps = new Set(summary.failures.map((f) => f.step)).size;
  if (recoveries.filter((r) => lastRunSteps.has(r.step)).length > failedSteps)
    throw new RunDirError(
      `${eventsFile}: has recoveries at ${recoveries.length} steps, ${runFiles.summary} has failures at ${failedSteps}`,
    );
  return sortedLost(recoveries);
}

function sortedLost(recoveries: Recovery[]): Recovery[] {
  return recoveries.map((r) => ({ ...r, lost: [...new Set(r.lost)].sort((a, b) => a - b) }));
}

/** After launch/drill: the time from each kill -9 to the next committed step. */
function addKillTimes(dir: string, recoveries: Recovery[], steps: StepRecord[]): void {
  const file = path.join(dir, runFiles.drill);
  if (!fs.existsSync(file)) return;
  const drill = readObject(file);
  if (!Array.isArray(drill.kills) || !drill.kills.every(isObject)) throw new RunDirError(`${file}: "kills" is not a list of objects`);
  for (const kill of drill.kills as Json[]) {
    if (typeof kill.time !== 'number' || typeof kill.rank !== 'number') continue; // not sent: the run ended first, or the process was gone
    const [rank, time] = [kill.rank, kill.time];
    const recovery = recoveries.find((r) => r.lost.includes(rank));
    // the first commit after the kill (a kill during an evaluation breaks no step)
    const committed = recovery && steps.find((s) => s.step >= recovery.step && s.time >= time);
    if (recovery && committed && recovery.killToCommitMs === undefined) recovery.killToCommitMs = committed.time - time;
  }
}
