// The shards this rank holds, and the readback of those it takes over from lost ranks: only the
// lost shards are re-read, the retried step's rows first (the recovery awaits only the record
// batches they live in), the rest in the background once the retried step has committed. It
// counts the bytes read from disk, so that the job's total can be summed at each recovery and at
// the end. Memory for the shards a recovery would hand this rank is kept, made at a step's end and
// its pages mapped beside training, so that they are not faulted in on the recovery's path.
import type { Dataset } from '../data/dataset';
import { LazyShard, Readback } from '../data/readback';
import type { ShardLayout } from '../data/shard-layout';
import type { ShardData } from '../data/split';

/** From this size up, the shards' memory is not kept ready: it would cost more memory than the milliseconds it saves are worth. */
export const roomBelowBytes = 64 << 20;

export class HeldShards {
  private readonly held = new Map<number, ShardData>();
  private readonly readbacks: Readback[] = [];
  /** another rank's shard, read for a check */
  private checked?: Readback;
  /** readbacks whose background pass starts once the retried step has committed */
  private readonly awaitingCommit: Readback[] = [];
  /** of this rank's readback bytes, those already summed into bytesReadBack */
  private readBackReported = 0;
  /** bytes read back from disk by every rank, as of the last sum of them */
  private bytesReadBackEverywhere = 0;
  /** memory mapped ahead, each block for one shard that a recovery hands this rank (keepRoom) */
  private readonly rooms: ArrayBuffer[] = [];
  /** a kept block's size: the largest shard's features */
  private readonly roomBytes: number;

  constructor(
    private readonly dataset: Dataset,
    private readonly layout: ShardLayout,
    /** this rank's id in the job, for the error of a shard it does not hold (read only then: it is off the step's path) */
    private readonly worldRank: () => number,
  ) {
    this.roomBytes = dataset.train.featureBytes(Math.max(...Array.from({ length: layout.count }, (_, s) => layout.rows(s))));
  }

  /** Shard s, which this rank holds. */
  shard(s: number): ShardData {
    const data = this.held.get(s);
    if (!data) throw new Error(`shard ${s} is not held by rank ${this.worldRank()}`);
    return data;
  }

  /** Whether shard s's data is here (held now, or before a rebalance took it away: it comes back without a read). */
  has(s: number): boolean {
    return this.held.has(s);
  }

  /**
   * Resolves once `rows` of shard s are in memory: a shard being read back reads their record
   * batches ahead of the rest. Rejects when a read failed (bad data: the caller's error path).
   */
  ready(s: number, rows: Int32Array): Promise<void> {
    const data = this.shard(s);
    return data instanceof LazyShard ? data.ready(rows) : Promise.resolve();
  }

  /**
   * Shard s with `rows` in memory: this rank's, or another rank's read from disk for a check (kept
   * until a check needs another shard; its bytes are not readback's).
   */
  async anyShard(s: number, rows: Int32Array): Promise<ShardData> {
    if (this.held.has(s)) {
      await this.ready(s, rows);
      return this.held.get(s)!;
    }
    if (this.checked?.shards[0].shard !== s) this.checked = new Readback(this.dataset.train, this.layout, [s]);
    await this.checked.ready(s, rows);
    return this.checked.shards[0];
  }

  /** Reads `shards` into memory, whole. */
  async load(shards: number[]): Promise<void> {
    for (const [s, data] of await this.dataset.train.readShards(this.layout, shards)) this.held.set(s, data);
  }

  /**
   * Takes over `shards` as shards that load on demand and reads the record batches of `rows` (what
   * the retried step needs of them); the rest follows in the background once a collective has
   * committed. The bytes read from disk before returning.
   */
  async readBackFirst(shards: number[], rows: Map<number, Int32Array>): Promise<number> {
    if (shards.length === 0) return 0;
    const readback = new Readback(this.dataset.train, this.layout, shards, (bytes) => this.takeRoom(bytes));
    for (const shard of readback.shards) this.held.set(shard.shard, shard);
    this.readbacks.push(readback);
    await Promise.all([...rows].map(([s, r]) => this.ready(s, r)));
    const bytes = readback.bytesRead;
    this.awaitingCommit.push(readback);
    return bytes;
  }

  /**
   * At a step's end, beside training: `count` blocks of memory, each as large as the largest shard,
   * its pages mapped now (mappedMemory), for the shards a recovery from the world as it stands would hand this
   * rank (blocks left over are let go). None where they would come to roomBelowBytes or more.
   */
  keepRoom(count: number): void {
    if (count * this.roomBytes >= roomBelowBytes) count = 0;
    this.rooms.length = Math.min(this.rooms.length, count);
    while (this.rooms.length < count) this.rooms.push(this.dataset.train.mappedRoom(this.roomBytes));
  }

  /** A kept block for a shard of `bytes`, no longer kept. */
  private takeRoom(bytes: number): ArrayBuffer | undefined {
    return bytes <= this.roomBytes ? this.rooms.pop() : undefined;
  }

  /** A collective committed: the readbacks waiting for it read the rest of their shards in the background. */
  committed(): void {
    for (const readback of this.awaitingCommit.splice(0)) readback.startBackground();
  }

  /** The end of training: background reads stop. */
  async stop(): Promise<void> {
    await Promise.all(this.readbacks.map((readback) => readback.stop()));
  }

  /** This rank's readback bytes not yet summed into bytesReadBack (background reads go on between sums). */
  unreported(): number {
    return this.readbacks.reduce((sum, readback) => sum + readback.bytesRead, 0) - this.readBackReported;
  }

  /** A vote succeeded on the sum of every rank's unreported bytes, `sum`: this rank's `mine` are reported. */
  reported(sum: number, mine: number): void {
    this.bytesReadBackEverywhere += sum;
    this.readBackReported += mine;
  }

  /** Bytes read back from disk by every rank, as of the last recovery or the final write. */
  get bytesReadBack(): number {
    return this.bytesReadBackEverywhere;
  }

  /** A joining rank takes up the job's count so far. */
  set bytesReadBack(bytes: number) {
    this.bytesReadBackEverywhere = bytes;
  }
}
