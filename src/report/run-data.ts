// What ft-report reads from a run directory (DESIGN.md "Run directory"): summary.json,
// metrics.jsonl, events.jsonl and, after a drill, drill.json. Every file is checked, so that a
// missing, half-written or foreign one becomes one line naming the file and the problem.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { runFiles } from '../cli/run-dir';

export class RunDirError extends Error {}

/** One committed step (a line of metrics.jsonl). */
export interface StepRecord {
  step: number;
  loss: number;
  world: number;
  /** ms since the epoch, when the step was committed */
  time: number;
  test_accuracy?: number;
  test_loss?: number;
}

export interface Summary {
  steps: number;
  final_loss: number;
  test_accuracy: number | null;
  wall_s: number;
  failures: { step: number; lost: number[]; world: number }[];
  ranks_lost: number;
  bytes_read_back: number;
  world_initial: number;
  world_final: number;
  params_sha256: string;
  model: string;
  data: string;
  shards: number;
  on_failure: string;
  batch: number;
  seed: number;
}

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
  readbackBytes: number;
  checkpointMs: number;
  retryMs: number;
  /** from the drill's kill -9 to the next committed step (drills only) */
  killToCommitMs?: number;
}

export interface Run {
  dir: string;
  summary: Summary;
  steps: StepRecord[];
  /** ms since the epoch, when training started (the start event) */
  startTime: number;
  recoveries: Recovery[];
}

type Json = Record<string, unknown>;

export function readRun(dir: string): Run {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new RunDirError(`${dir}: no such run directory`);
  const steps = readLines(dir, runFiles.metrics).map((line, i) => checkStep(line, `${path.join(dir, runFiles.metrics)} line ${i + 1}`));
  const events = readLines(dir, runFiles.events);
  const summary = readSummary(dir, steps);
  checkSteps(dir, steps, summary);
  const start = events.find((e) => e.event === 'start');
  if (start === undefined || typeof start.time !== 'number') throw new RunDirError(`${path.join(dir, runFiles.events)}: no start event`);
  const recoveries = readRecoveries(dir, events, summary);
  addKillTimes(dir, recoveries, steps);
  return { dir, summary, steps, startTime: start.time, recoveries };
}

function readLines(dir: string, name: string): Json[] {
  const file = path.join(dir, name);
  if (!fs.existsSync(file)) throw new RunDirError(`${file}: missing`);
  const text = fs.readFileSync(file, 'utf8');
  if (text.length > 0 && !text.endsWith('\n')) throw new RunDirError(`${file}: half-written (its last line has no end)`);
  return text.split('\n').filter(Boolean).map((line, i) => {
    try {
      const value: unknown = JSON.parse(line);
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
      return value as Json;
    } catch {
      throw new RunDirError(`${file}: line ${i + 1} is not a JSON object`);
    }
  });
}

function checkStep(line: Json, where: string): StepRecord {
  for (const name of ['step', 'loss', 'world', 'time']) {
    if (typeof line[name] !== 'number') throw new RunDirError(`${where}: "${name}" is missing or not a number`);
  }
  return line as unknown as StepRecord;
}

function readSummary(dir: string, steps: StepRecord[]): Summary {
  const file = path.join(dir, runFiles.summary);
  if (!fs.existsSync(file)) {
    const last = steps.at(-1);
    throw new RunDirError(`${file}: missing: the run did not finish (${last ? `last committed step ${last.step}` : 'no step committed'})`);
  }
  let summary: Json;
  try {
    summary = JSON.parse(fs.readFileSync(file, 'utf8')) as Json;
  } catch {
    throw new RunDirError(`${file}: not JSON`);
  }
  if (summary.status !== 'complete') throw new RunDirError(`${file}: status is ${JSON.stringify(summary.status)}, not "complete"`);
  const numbers = ['steps', 'final_loss', 'wall_s', 'ranks_lost', 'bytes_read_back', 'world_initial', 'world_final', 'shards', 'batch', 'seed'];
  for (const name of numbers) if (typeof summary[name] !== 'number') throw new RunDirError(`${file}: "${name}" is missing or not a number`);
  for (const name of ['model', 'data', 'on_failure']) if (typeof summary[name] !== 'string') throw new RunDirError(`${file}: "${name}" is missing or not a string`);
  if (summary.test_accuracy !== null && typeof summary.test_accuracy !== 'number') throw new RunDirError(`${file}: "test_accuracy" is not a number`);
  if (typeof summary.params_sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(summary.params_sha256)) throw new RunDirError(`${file}: "params_sha256" is not a sha256`);
  const failures = summary.failures;
  if (!Array.isArray(failures) || !failures.every((f) => typeof f?.step === 'number' && Array.isArray(f.lost) && typeof f.world === 'number')) {
    throw new RunDirError(`${file}: "failures" is not a list of {step, lost, world}`);
  }
  return summary as unknown as Summary;
}

/** metrics.jsonl must hold every committed step once, in order, up to the summary's last. */
function checkSteps(dir: string, steps: StepRecord[], summary: Summary): void {
  const file = path.join(dir, runFiles.metrics);
  if (steps.length === 0) throw new RunDirError(`${file}: no step`);
  steps.forEach((record, i) => {
    if (i > 0 && record.step !== steps[i - 1].step + 1) throw new RunDirError(`${file}: step ${record.step} follows step ${steps[i - 1].step}`);
  });
  const last = steps[steps.length - 1].step;
  if (last !== summary.steps - 1) throw new RunDirError(`${file}: ends at step ${last}, but ${runFiles.summary} says ${summary.steps} steps`);
}

/** Events grouped by the step they interrupted; one recovery per step with failures. */
function readRecoveries(dir: string, events: Json[], summary: Summary): Recovery[] {
  const byStep = new Map<number, Recovery>();
  const total = (e: Json) => (typeof e.duration_ms === 'number' ? e.duration_ms : 0);
  for (const e of events) {
    if (typeof e.step !== 'number') continue;
    let recovery = byStep.get(e.step);
    if (e.event === 'failure' && recovery === undefined) {
      recovery = { step: e.step, time: typeof e.time === 'number' ? e.time : NaN, lost: [], world: 0, phase: String(e.phase), detectMs: 0, revokeShrinkMs: 0, agreeMs: 0, readbackMs: 0, readbackBytes: 0, checkpointMs: 0, retryMs: 0 };
      byStep.set(e.step, recovery);
    }
    if (recovery === undefined) continue;
    switch (e.event) {
      case 'failure': recovery.detectMs += typeof e.detect_ms === 'number' ? e.detect_ms : 0; break;
      case 'revoke+shrink':
        recovery.revokeShrinkMs += total(e);
        recovery.lost.push(...(Array.isArray(e.lost) ? (e.lost as number[]) : []));
        if (typeof e.world === 'number') recovery.world = e.world;
        break;
      case 'agree': recovery.agreeMs += total(e); break;
      case 'readback':
        recovery.readbackMs += total(e);
        recovery.readbackBytes += typeof e.bytes === 'number' ? e.bytes : 0;
        break;
      case 'checkpoint': recovery.checkpointMs += total(e); break;
      case 'retry': recovery.retryMs += total(e); break;
    }
  }
  const recoveries = [...byStep.values()].filter((r) => r.lost.length > 0);
  const eventsFile = path.join(dir, runFiles.events);
  for (const failure of summary.failures) {
    const recovery = recoveries.find((r) => r.step === failure.step);
    if (recovery === undefined) throw new RunDirError(`${eventsFile}: no recovery at step ${failure.step}, where ${runFiles.summary} has a failure`);
  }
  if (recoveries.length > new Set(summary.failures.map((f) => f.step)).size) {
    throw new RunDirError(`${eventsFile}: has ${recoveries.length} recoveries, ${runFiles.summary} has failures at ${summary.failures.length} steps`);
  }
  return recoveries.map((r) => ({ ...r, lost: [...new Set(r.lost)].sort((a, b) => a - b) }));
}

/** After launch/drill: the time from each kill -9 to the next committed step. */
function addKillTimes(dir: string, recoveries: Recovery[], steps: StepRecord[]): void {
  const file = path.join(dir, runFiles.drill);
  if (!fs.existsSync(file)) return;
  let drill: { kills?: { rank?: unknown; time?: unknown }[] };
  try {
    drill = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch {
    throw new RunDirError(`${file}: not JSON`);
  }
  if (!Array.isArray(drill.kills)) throw new RunDirError(`${file}: "kills" is not a list`);
  for (const kill of drill.kills) {
    if (typeof kill.time !== 'number' || typeof kill.rank !== 'number') continue; // the run ended before that kill
    const recovery = recoveries.find((r) => r.lost.includes(kill.rank as number));
    // the first commit after the kill (a kill during an evaluation breaks no step)
    const committed = recovery && steps.find((s) => s.step >= recovery.step && s.time >= (kill.time as number));
    if (recovery && committed && recovery.killToCommitMs === undefined) recovery.killToCommitMs = committed.time - kill.time;
  }
}
