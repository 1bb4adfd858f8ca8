// Logical shards of a split: S shards, each a contiguous run of whole record batches, sizes as
// equal as the batches allow (they differ by at most one batch). Shard s covers rows
// [firstRow(s), firstRow(s) + rows(s)) of the split.
import { DatasetError } from './errors';

export class ShardLayout {
  /** firstBatch[s]..firstBatch[s+1]-1 are shard s's record batches (length S + 1) */
  private readonly firstBatch: number[];
  /** the same boundaries in rows (length S + 1) */
  private readonly firstRows: number[];
  /** where each record batch starts, in rows of the split (length batches + 1) */
  private readonly batchStarts: number[];

  /** `file` names the split in errors; `count` is S. */
  constructor(
    readonly batchRows: readonly number[],
    readonly count: number,
    file: string,
  ) {
    const batches = batchRows.length;
    if (!Number.isSafeInteger(count) || count < 1) throw new DatasetError(file, `shard count must be an integer >= 1, got ${count}`);
    if (count > batches) {
      throw new DatasetError(file, `${count} shards asked, but it has ${batches} record batches: at most ${batches} shards`);
    }
    this.firstBatch = Array.from({ length: count + 1 }, (_, s) => Math.floor((s * batches) / count));
    this.batchStarts = [0];
    for (const rows of batchRows) this.batchStarts.push(this.batchStarts[this.batchStarts.length - 1] + rows);
    this.firstRows = this.firstBatch.map((b) => this.batchStarts[b]);
  }

  /** The record batches of shard s: [first, end). */
  batches(shard: number): { first: number; end: number } {
    this.check(shard);
    return { first: this.firstBatch[shard], end: this.firstBatch[shard + 1] };
  }

  firstRow(shard: number): number {
    this.check(shard);
    return this.firstRows[shard];
  }

  rows(shard: number): number {
    this.check(shard);
    return this.firstRows[shard + 1] - this.firstRows[shard];
  }

  /** Where record batch b starts, in rows of shard s (s must hold b). */
  batchRow(shard: number, batch: number): number {
    const { first, end } = this.batches(shard);
    if (!(Number.isInteger(batch) && batch >= first && batch < end))
      throw new RangeError(`batchRow: shard ${shard} holds record batches [${first}, ${end}), not ${batch}`);
    return this.batchStarts[batch] - this.firstRows[shard];
  }

  /** The record batch holding row `row` (counted within shard s). */
  batchOf(shard: number, row: number): number {
    const rows = this.rows(shard);
    if (!(Number.isInteger(row) && row >= 0 && row < rows))
      throw new RangeError(`batchOf: expected a row in [0, ${rows}) of shard ${shard}, got ${row}`);
    const target = this.firstRows[shard] + row;
    // the last batch of the shard that starts at or before the row
    let [low, high] = [this.firstBatch[shard], this.firstBatch[shard + 1] - 1];
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (this.batchStarts[middle] <= target) low = middle;
      else high = middle - 1;
    }
    return low;
  }

  private check(shard: number): void {
    if (!Number.isInteger(shard) || shard < 0 || shard >= this.count) {
      throw new RangeError(`shard: expected an integer in [0, ${this.count}), got ${shard}`);
    }
  }
}
