// Micro-batch iteration. Step t of an epoch takes one micro-batch from every shard; shard s's
// micro-batch is a slice of a permutation of its rows seeded by (seed, epoch, s), so which samples
// step t of shard s sees depends only on (seed, epoch, s, t), never on the rank reading it.
// The global batch B is split over S shards: shard s takes floor(B/S) samples, plus one if s < B mod S.
// An epoch lasts until the largest shard is used up; shards that run out earlier give empty
// micro-batches for the last steps, so one epoch visits every sample exactly once.
import { addonPart } from '../base/addon';
import { hashKeys, stream } from '../base/random';
import type { ShardLayout } from './shard-layout';
import type { ShardData } from './split';

const addon = addonPart<{
  /** x[i, :] = features[rows[i], :] / divisor for samples of `sampleSize` values (each quotient rounded to float32). */
  gatherRows(features: Uint8Array | Float32Array, sampleSize: number, rows: Int32Array, divisor: number, x: Float32Array): void;
}>();

export class MicroBatches {
  readonly stepsPerEpoch: number;
  private readonly permutations = new Map<number, { epoch: number; order: Int32Array }>();

  constructor(
    readonly layout: ShardLayout,
    readonly globalBatch: number,
    readonly seed: number,
  ) {
    if (!Number.isSafeInteger(globalBatch) || globalBatch < layout.count) {
      throw new RangeError(
        `global batch: expected an integer >= the shard count ${layout.count} (one sample per shard at least), got ${globalBatch}`,
      );
    }
    let steps = 0;
    for (let s = 0; s < layout.count; ++s) steps = Math.max(steps, Math.ceil(layout.rows(s) / this.size(s)));
    this.stepsPerEpoch = steps;
  }

  /** Samples shard s contributes to a full step. */
  size(shard: number): number {
    const S = this.layout.count;
    return Math.floor(this.globalBatch / S) + (shard < this.globalBatch % S ? 1 : 0);
  }

  /**
   * The most samples a step's buffers hold: the global batch (a shrink-mode rank may take up to
   * all of it), or the split's rows where they are fewer (a step draws a sample once at most).
   */
  get largestBatch(): number {
    let rows = 0;
    for (let s = 0; s < this.layout.count; ++s) rows += this.layout.rows(s);
    return Math.min(this.globalBatch, rows);
  }

  /** Samples shard s's fullest micro-batch holds: its share of a step, or all its rows where they are fewer. */
  fullest(shard: number): number {
    return Math.min(this.size(shard), this.layout.rows(shard));
  }

  /** Rows (indices within shard s) of step t's micro-batch in `epoch`; empty once s is used up. */
  rows(shard: number, epoch: number, step: number): Int32Array {
    const { start, end } = this.span('rows', shard, step);
    return this.order(shard, epoch).subarray(start, end);
  }

  /** Samples in step t of any epoch, over all shards (counted, not drawn: no permutation is touched). */
  samplesAt(step: number): number {
    let total = 0;
    for (let s = 0; s < this.layout.count; ++s) {
      const { start, end } = this.span('samplesAt', s, step);
      total += end - start;
    }
    return total;
  }

  /** Where step t's micro-batch lies in shard s's order, whatever the epoch: [start, end). */
  private span(method: string, shard: number, step: number): { start: number; end: number } {
    if (!(step >= 0 && step < this.stepsPerEpoch))
      throw new RangeError(`${method}: expected a step in [0, ${this.stepsPerEpoch}), got ${step}`);
    const rows = this.layout.rows(shard);
    const start = Math.min(step * this.size(shard), rows);
    return { start, end: Math.min(start + this.size(shard), rows) };
  }

  /**
   * Shard s's rows in the order `epoch` visits them (a seeded permutation). The first ask of an
   * epoch draws every shard's, not only the asker's: a recovery needs a lost shard's rows at once,
   * and drawing its permutation there, in code that had run only at the epoch's start, cost 5-12 ms
   * of a 25 ms readback (the whole of Fashion-MNIST's 60000 rows take under 1 ms warm).
   */
  order(shard: number, epoch: number): Int32Array {
    if (this.permutations.get(shard)?.epoch !== epoch)
      for (let s = 0; s < this.layout.count; ++s)
        if (this.permutations.get(s)?.epoch !== epoch) this.permutations.set(s, { epoch, order: this.draw(s, epoch) });
    return this.permutations.get(shard)!.order;
  }

  private draw(shard: number, epoch: number): Int32Array {
    const order = new Int32Array(this.layout.rows(shard));
    for (let i = 0; i < order.length; ++i) order[i] = i;
    const next = stream(hashKeys(this.seed, epoch, shard));
    for (let i = order.length - 1; i > 0; --i) {
      const j = Math.floor(next() * (i + 1));
      [order[i], order[j]] = [order[j], order[i]];
    }
    return order;
  }
}

/** Copies the given rows of a shard into a float batch x [rows, ...sampleShape] (stored values / the shard's divisor) and labels. */
export function gatherBatch(shard: ShardData, rows: Int32Array, x: Float32Array, labels: Int32Array): void {
  if (x.length < rows.length * shard.sampleSize || labels.length < rows.length) {
    throw new RangeError(`gatherBatch: expected room for ${rows.length} samples, got x ${x.length} floats, labels ${labels.length}`);
  }
  for (let i = 0; i < rows.length; ++i) {
    const row = rows[i];
    if (!(row >= 0 && row < shard.rows)) throw new RangeError(`gatherBatch: row ${row} outside shard ${shard.shard} (${shard.rows} rows)`);
    labels[i] = shard.labels[row];
  }
  // native: on the step's critical path, and the same floats as `v / divisor` stored into x
  addon.gatherRows(shard.features, shard.sampleSize, rows, shard.divisor, x);
}
