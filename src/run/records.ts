// The records of a run directory: a line of metrics.jsonl, a line of events.jsonl, summary.json,
// and the line a rank's log gets where it stops. The trainer and ft-train write them through RunLog
// and writeSummary; ft-report and ft-run read them back.
import type { KernelSettings } from '../nn/backend';
import type { RunSettings } from './settings';

/** One committed step, as metrics.jsonl holds it. */
export interface StepRecord {
  step: number;
  epoch: number;
  loss: number;
  lr: number;
  /** working ranks */
  world: number;
  /** live hot spares (runs started with --spares) */
  spares?: number;
  /** samples in this step's global batch */
  samples: number;
  step_ms: number;
  /** wall clock at commit, ms since the epoch */
  time: number;
  test_accuracy?: number;
  test_loss?: number;
}

/** What happened (start, failure, revoke+shrink, agree, readback, checkpoint, retry, resume, stop) and its own fields. */
export interface RunEvent {
  event: string;
  step?: number;
  duration_ms?: number;
  [field: string]: unknown;
}

/** One line of events.jsonl: an event and when it was recorded, ms since the epoch. */
export interface EventRecord extends RunEvent {
  time: number;
}

/** summary.json: the outcome of a run that completed, and every setting that changes the result. */
export interface Summary {
  status: 'complete';
  steps: number;
  final_loss: number;
  /** null where there was nothing to evaluate (JSON has no NaN) */
  test_accuracy: number | null;
  test_loss: number | null;
  /** the test samples scored (--eval-samples; null where nothing was evaluated); absent in summaries written before it */
  test_samples?: number | null;
  wall_s: number;
  failures: { step: number; lost: number[]; world: number }[];
  ranks_lost: number;
  /** silent data corruptions the checks found (--verify-every); absent in summaries written before it */
  corruptions?: number;
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
  optimizer: string;
  optimizer_state: 'replicated' | 'sharded';
  /** sharded state's redundancy (formatted as --redundancy takes it); null when replicated */
  redundancy: string | null;
  /** the leader's optimizer state (sharded: its chunk; P/N of the replicated state) */
  optimizer_state_bytes_per_rank: number;
  /** what the leader keeps for peers (replicas, parities, their previous generation and buffers) */
  redundancy_bytes_per_rank: number;
  /** sharded state: the leader's mean ms per committed step in each part of the sharded update (sharding/sharded-state.ts, updatePhases); absent otherwise */
  sharded_state_phase_ms?: Record<string, number>;
  /** every setting that changes the result (src/run/settings.ts); absent in summaries written before it */
  settings?: RunSettings;
  /** the CPU kernels' level (also in settings, as isa) and the libraries' versions and kernels at it; absent before */
  kernels?: KernelSettings;
}

/** The message a rank logs (logs/rank-R.log) as it stops for `reason` (a ProtocolStop's): this, then the stop's line. */
export const stopLogPrefix = (reason: string): string => `stop: ${reason}: `;
