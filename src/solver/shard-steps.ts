// The two parts of a step that any exact-mode loop shares, whoever computes the gradients (the
// Trainer with its Net, or user code through the custom loop): each held shard's micro-batch
// gradient put into the shard-ordered sum (only those not there yet, so a retried step computes
// just the shards taken over from lost ranks), and a test-split evaluation divided over the live
// ranks and redone after a recovery.
import { whileComputing } from '../comm';
import type { Manager } from '../protocol/manager';
import type { BatchKey } from '../nn/layer';
import type { GradientProgress } from '../nn/net';
import { gatherBatch, type MicroBatches } from '../data/micro-batches';
import type { ShardData, Split } from '../data/split';
import { applyFlip } from '../liveness/drills';

/** One shard's micro-batch of a step, as the code computing its gradient sees it. */
export interface MicroBatch {
  /** [rows, ...sample shape] features, as floats */
  x: Float32Array;
  /** [rows] */
  labels: Int32Array;
  /** samples in this micro-batch */
  rows: number;
  /** samples in the whole step (all shards): the gradient is the sum of per-sample gradients / samples */
  samples: number;
  /** the keys of this micro-batch's randomness (never the rank computing it) */
  key: BatchKey;
  /**
   * Set on the last micro-batch this rank computes in a step: told of the loss and of gradients as
   * they become final, the sum sends them while the rest is computed. Optional to call.
   */
  progress?: GradientProgress;
}

/** Computes a micro-batch's gradient into the loop's gradient buffer (overwriting it); returns its mean loss. */
export type GradientFn = (batch: MicroBatch) => number;

/** Scores a batch x[rows, ...] without training behaviour: its mean loss and how many it classified right. */
export type ScoreFn = (x: Float32Array, labels: Int32Array, rows: number) => Score;

/** A batch's mean loss and correct count. */
export interface Score {
  loss: number;
  correct: number;
}

/** Accuracy and mean loss over the samples of a split that were scored. */
export interface Evaluation {
  accuracy: number;
  loss: number;
  /** the samples scored */
  samples: number;
}

/** Input and label buffers for the largest batch, allocated once. */
export class BatchBuffers {
  private readonly x: Float32Array;
  private readonly labels: Int32Array;

  /** `allocate` makes the input buffer (e.g. Net.inputBuffer: page-locked memory where the net computes on a GPU). */
  constructor(
    largest: number,
    readonly sampleSize: number,
    allocate: (length: number) => Float32Array = (length) => new Float32Array(length),
  ) {
    this.x = allocate(largest * sampleSize);
    this.labels = new Int32Array(largest);
  }

  /** The most samples a view holds. */
  get capacity(): number {
    return this.labels.length;
  }

  /** Views sized for `count` samples. */
  view(count: number): [Float32Array, Int32Array] {
    return [this.x.subarray(0, count * this.sampleSize), this.labels.subarray(0, count)];
  }
}

/**
 * Where a micro-batch's gradient goes. `gradient` and `statistics` are read after each placement.
 * With `place`, compute writes straight into the shard-ordered sum's slot of the shard (no copy
 * follows) and may report its progress, so that the sum is sent while backward runs.
 */
export interface GradientTarget {
  readonly gradient: Float32Array;
  /** what compute leaves of batchnorm's statistics, already weighted (empty without batchnorm) */
  readonly statistics: Float32Array;
  /** [gradient | statistics] of `vector` from now on */
  place?(vector: Float32Array): void;
}

/** What computing a shard's gradient at a step takes: the step's data plan and seed, the loop's buffers, target and compute. */
export interface ShardWork {
  manager: Manager;
  plan: MicroBatches;
  step: number;
  seed: number;
  buffers: BatchBuffers;
  target: GradientTarget;
  compute: GradientFn;
}

/**
 * Exact mode: one gradient per held shard, each into the shard-ordered sum with its loss weighted
 * by its share of the step's samples; shards already in the sum for the step are skipped. What
 * `compute` leaves in the statistics goes into the sum between the gradient and the loss. Where
 * the sum overlaps backward (the Manager's overlap), its exchange starts during the last computed
 * micro-batch's backward if the target is placed in the sum; else once all are computed.
 */
export async function computeShards(work: ShardWork): Promise<void> {
  const { manager, step, target } = work;
  const sum = manager.shardSum;
  const missing = sum.held.filter((shard) => !sum.holds(shard, step));
  const times = manager.shardTimes;
  // --rebalance auto: each shard's time at the step before rides with it in the sum (balance.ts)
  if (times) for (const shard of sum.held) sum.setSideband(shard, times.sideband(shard));
  await whileComputing(async () => {
    for (const shard of missing) {
      const slot = target.place ? sum.slot(shard) : undefined;
      const last = manager.overlap && slot !== undefined && shard === missing[missing.length - 1];
      const started = performance.now();
      const loss = await computeShard(work, shard, slot, last);
      await slowDrill(manager, started);
      times?.record(shard, performance.now() - started);
      if (slot) sum.stored(shard, step, loss);
      else sum.put(shard, step, [target.gradient, target.statistics, [loss]]);
    }
  });
  sum.sendFrom(0);
}

/** A slow drill (action=slow, factor F): this rank sleeps F - 1 times what its work begun at `started` took, awake for the watchdog. */
export async function slowDrill(manager: Manager, started: number): Promise<void> {
  const factor = manager.slowFactor();
  if (factor > 1) await new Promise((wake) => setTimeout(wake, (factor - 1) * (performance.now() - started)));
}

/**
 * A check's recomputation of shard s's vector at the step (another rank's shard, read from disk,
 * or a third opinion), into `into` ([gradient | statistics | weighted loss], the sum's vector length).
 */
export async function recomputeShard(work: ShardWork, shard: number, into: Float32Array): Promise<void> {
  const { target } = work;
  await whileComputing(async () => {
    const placed = target.place ? into : undefined;
    const loss = await computeShard(work, shard, placed, false);
    if (!placed) {
      into.set(target.gradient);
      into.set(target.statistics, target.gradient.length);
    }
    into[into.length - 1] = loss;
  });
}

/**
 * Shard s's micro-batch gradient at the step (into `slot` where given, placed there), with a
 * compute drill's bit flip put in before any of it is sent; the loss weighted by the shard's share
 * of the step's samples. `last`: the shard's gradients go into the sum as they become final.
 */
async function computeShard(work: ShardWork, shard: number, slot: Float32Array | undefined, last: boolean): Promise<number> {
  const { manager, plan, step, seed, buffers, target, compute } = work;
  const t = step % plan.stepsPerEpoch;
  const epoch = Math.floor(step / plan.stepsPerEpoch);
  const samples = plan.samplesAt(t);
  const rows = plan.rows(shard, epoch, t);
  const weight = rows.length / samples;
  if (slot) target.place!(slot);
  if (rows.length === 0) {
    target.gradient.fill(0);
    target.statistics.fill(0);
    return 0;
  }
  const [x, labels] = buffers.view(rows.length);
  gatherBatch(await manager.checkedShard(shard, rows), rows, x, labels);
  let flip = manager.flipAt('compute', target.gradient.length, shard);
  const flipFrom = (from: number): void => {
    if (flip && flip.index >= from) {
      applyFlip(target.gradient, flip);
      flip = undefined;
    }
  };
  const sum = manager.shardSum;
  const progress: GradientProgress | undefined = last
    ? {
        lossKnown: (mean) => {
          slot![slot!.length - 1] = mean * weight;
        },
        gradientsFrom: (from) => {
          flipFrom(from);
          sum.sendFrom(from);
        },
      }
    : undefined;
  const loss = compute({ x, labels, rows: rows.length, samples, key: { seed, epoch, step: t, shard }, progress }) * weight;
  flipFrom(0);
  return loss;
}

/** What evaluations score, read once: the test split's first `evalSamples` samples (--eval-samples; undefined: all of them). */
export function readScoredSplit(test: Split, evalSamples: number | undefined): Promise<ShardData> {
  return test.readFirst(evalSamples ?? test.rows);
}

/** Test accuracy and loss, the split divided over the live ranks; redone after a recovery. */
export async function evaluateSplit(manager: Manager, test: ShardData, buffers: BatchBuffers, score: ScoreFn): Promise<Evaluation> {
  const { world } = manager;
  for (;;) {
    const working = world.working;
    const from = working ? Math.floor((world.rank * test.rows) / world.size) : 0;
    const to = working ? Math.floor(((world.rank + 1) * test.rows) / world.size) : 0;
    const totals = new Float64Array(2); // correct, summed loss
    for (let first = from; first < to; first += buffers.capacity) {
      manager.enter('evaluation');
      const rows = Int32Array.from({ length: Math.min(buffers.capacity, to - first) }, (_, i) => first + i);
      const [x, labels] = buffers.view(rows.length);
      gatherBatch(test, rows, x, labels);
      const { loss, correct } = score(x, labels, rows.length);
      totals[0] += correct;
      totals[1] += loss * rows.length;
    }
    const agreed = await manager.agreeOn('evaluation', async () => {
      if (working) await world.allreduce(totals);
    });
    if (agreed) return { accuracy: totals[0] / test.rows, loss: totals[1] / test.rows, samples: test.rows };
  }
}
