// What failures would cost at scale, from one run's own measurements: the share of a job's time
// wasted under periodic checkpointing at its optimal interval (the model of Gupta et al.,
// "Just-In-Time Checkpointing", EuroSys 2024, §3) and under ft-train's recovery (no steady-state
// cost; per failure, one step redone and the recovery itself).
//
// Units: N ranks (GPUs in the paper); f failures per rank per second (a rate per day divided by
// 86,400); t the mean step time, o a checkpoint's cost and r a recovery's, in seconds; c checkpoints
// per second. Over one step the job spends N·t rank-seconds and wastes
//   W = N t (c o + N f r + N f / (2c))
// rank-seconds: checkpoints (c o per second), restarts (N f failures per second, r each) and the
// work lost since the last checkpoint (half an interval, 1/(2c), per failure). W is smallest at
//   c* = sqrt(N f / (2 o)),
// where the wasted share W / (N t) is sqrt(2 N f o) + N f r. ft-train wastes N f (t + r).
import type { Run } from './run-data';

export const secondsPerDay = 86_400;

/** The wasted share of a job's time, split into its terms. */
export interface Waste {
  /** c o + N f / (2c): writing checkpoints and redoing the work since the last one */
  checkpointing: number;
  /** N f r: recovering (restarting) */
  recovery: number;
  total: number;
}

/** c*, checkpoints per second, for N ranks failing f times per second each and checkpoints costing o seconds. */
export function optimalCheckpointRate(n: number, f: number, o: number): number {
  return Math.sqrt((n * f) / (2 * o));
}

/** W / (N t) under periodic checkpointing at c checkpoints per second (default c*). */
export function periodicWaste(n: number, f: number, o: number, r: number, c = optimalCheckpointRate(n, f, o)): Waste {
  const checkpointing = c * o + (n * f) / (2 * c);
  const recovery = n * f * r;
  return { checkpointing, recovery, total: checkpointing + recovery };
}

/** W / (N t) under ft-train's recovery: per failure, one step of t seconds redone and r seconds recovering. */
export function ftTrainWaste(n: number, f: number, t: number, r: number): Waste {
  const checkpointing = n * f * t;
  const recovery = n * f * r;
  return { checkpointing, recovery, total: checkpointing + recovery };
}

/** What a run measured, in seconds; undefined where it measured nothing. */
export interface CostMeasurements {
  /** mean time of the steps that were not retried */
  step: number;
  /** mean checkpoint write: periodic ones where the run wrote any, else the just-in-time ones */
  checkpoint?: number;
  checkpointReason?: string;
  /** mean recovery: kill -9 to the next commit where a drill measured it, else detect to retry */
  recovery?: number;
  recoveryFrom?: 'kill → commit' | 'detect → retry';
  /** launch/ft-run's restarts (--max-restarts): how many, and their mean cost where measured */
  restarts: number;
  restart?: number;
}

const mean = (values: number[]): number | undefined =>
  values.length === 0 ? undefined : values.reduce((a, b) => a + b, 0) / values.length;

export function costMeasurements(run: Run): CostMeasurements {
  const retried = new Set(run.recoveries.map((r) => r.step));
  const step = mean(run.steps.filter((s) => !retried.has(s.step)).map((s) => s.step_ms))! / 1000;
  const periodic = run.checkpoints.filter((c) => c.reason === 'periodic');
  const writes = periodic.length > 0 ? periodic : run.checkpoints.filter((c) => c.reason === 'jit');
  const checkpoint = mean(writes.map((c) => c.durationMs));
  const killed = run.recoveries.flatMap((r) => (r.killToCommitMs === undefined ? [] : [r.killToCommitMs]));
  const phases = run.recoveries.map(
    (r) => r.detectMs + r.revokeShrinkMs + r.agreeMs + r.joinMs + r.readbackMs + r.checkpointMs + r.retryMs,
  );
  const recovery = mean(killed.length > 0 ? killed : phases);
  const restart = mean(run.restarts.flatMap((r) => (r.costMs === undefined ? [] : [r.costMs])));
  return {
    step,
    restarts: run.restarts.length,
    ...(restart === undefined ? {} : { restart: restart / 1000 }),
    ...(checkpoint === undefined ? {} : { checkpoint: checkpoint / 1000, checkpointReason: writes[0].reason }),
    ...(recovery === undefined
      ? {}
      : { recovery: recovery / 1000, recoveryFrom: killed.length > 0 ? ('kill → commit' as const) : ('detect → retry' as const) }),
  };
}

/** The paper's BERT-L rows (Table 2): o = 5 s, r = 9.9 s, 2e-3 failures per GPU per day; periodic checkpointing's wasted share. */
export const paperBertLarge = {
  checkpoint: 5,
  recovery: 9.9,
  failuresPerDay: 2e-3,
  periodic: [
    { n: 4, wasted: 0.00096 },
    { n: 1024, wasted: 0.0154 },
  ],
} as const;
