// Logical shards of a split: S shards, each a contiguous run of whole record batches, sizes as
// equal as the batches allow (they differ by at most one batch). Shard s covers rows
// [firstRow(s), firstRow(s) + rows(s)) of the split.
import { DatasetError } from './errors';

export class ShardLayout {
  /** firstBatch[s]..firstBatch[s+1]-1 are shard s's record batches (length S + 1) */
  private readonly firstBatch: number[];
  /** the same boundaries in rows (length S + 1) */
  private readonly firstRows: number[];

  /** `file` names the split in errors; `count` is S. */
  constructor(readonly batchRows: readonly number[], readonly count: number, file: string) {
    const batches = batchRows.length;
    if (!Number.isSafeInteger(count) || count < 1) throw new DatasetError(file, `shard count must be an integer >= 1, got ${count}`);
    if (count > batches) {
      throw new DatasetError(file, `${count} shards asked, but it has ${batches} record batches: at most ${batches} shards`);
    }
    this.firstBatch = Array.from({ length: count + 1 }, (_, s) => Math.floor((s * batches) / count));
    const rowStart = [0];
    for (const rows of batchRows) rowStart.push(rowStart[rowStart.length - 1] + rows);
    this.firstRows = this.firstBatch.map((b) => rowStart[b]);
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

  private check(shard: number): void {
    if (!Number.isInteger(shard) || shard < 0 || shard >= this.count) {
      throw new RangeError(`shard: expected an integer in [0, ${this.count}), got ${shard}`);
    }
  }
}
