// The sum of per-shard vectors over all S logical shards in shard order, whichever ranks hold which
// shards, at the cost of a ring allreduce: the vector is cut into one chunk per live rank; an
// alltoallv sends every held shard's piece of chunk c to c's owner, which adds the S pieces in shard
// order ((g0 + g1) + g2) + ...; an allgatherv gives everyone the sum. Chunk bounds move with the
// world size, the order of additions per element never does, so the result has the same bits at
// any world size and under any shard map. Each held shard's vector is tagged with its step, so that
// the sum a recovery builds for the smaller world keeps the vectors the survivors already computed
// for the step being retried.
import type { Communicator } from '../comm';
import { chunkBounds } from '../chunks';
import type { ShardMap } from '../data/shard-map';

export class ShardSum {
  /** chunk c = elements [bounds[c], bounds[c+1]), owned by comm rank c */
  readonly bounds: number[];
  /** this rank's shards, ascending */
  readonly held: number[];
  private readonly sendBuffer: Float32Array;
  private readonly sendCounts: number[];
  private readonly receiveBuffer: Float32Array;
  private readonly receiveCounts: number[];
  /** where shard s's piece of my chunk starts in receiveBuffer */
  private readonly pieceAt: number[];
  private readonly chunk: Float32Array;
  /** the step whose vector held shard s's slot holds */
  private readonly stepOf = new Map<number, number>();
  readonly total: Float32Array;

  /** `add(acc, x)`: acc += x element-wise (the backend's addInPlace). */
  constructor(private readonly comm: Communicator, map: ShardMap, readonly length: number, private readonly add: (acc: Float32Array, x: Float32Array) => void) {
    const size = comm.size;
    this.bounds = chunkBounds(length, size);
    const chunkLength = (c: number) => this.bounds[c + 1] - this.bounds[c];
    const heldBy = comm.worldRanks.map((worldRank) => map.shardsOf(worldRank));
    if (heldBy.reduce((n, shards) => n + shards.length, 0) !== map.shardCount) {
      throw new Error(`ShardSum: the shard map's owners ${JSON.stringify(map.ranks)} are not the communicator's ranks ${JSON.stringify(comm.worldRanks)}`);
    }
    this.held = heldBy[comm.rank];
    this.sendCounts = this.bounds.slice(0, size).map((_, c) => this.held.length * chunkLength(c));
    this.sendBuffer = new Float32Array(this.held.length * length);
    const mine = chunkLength(comm.rank);
    this.receiveCounts = heldBy.map((shards) => shards.length * mine);
    this.receiveBuffer = new Float32Array(map.shardCount * mine);
    this.pieceAt = new Array<number>(map.shardCount);
    let offset = 0;
    heldBy.forEach((shards) => shards.forEach((s) => {
      this.pieceAt[s] = offset;
      offset += mine;
    }));
    this.chunk = new Float32Array(mine);
    // alone with one shard, the sum is that shard's vector as stored: no copy
    this.total = size === 1 && this.held.length === 1 ? this.sendBuffer : new Float32Array(length);
  }

  /**
   * Stores held shard s's vector for `step`, given as consecutive parts (e.g. its gradient, its
   * batchnorm statistics, [its loss]); copied, so the caller may reuse its buffers.
   */
  put(shard: number, step: number, parts: readonly (Float32Array | readonly number[])[]): void {
    const h = this.held.indexOf(shard);
    if (h < 0) throw new RangeError(`ShardSum.put: shard ${shard} is not held by this rank (holds ${this.held})`);
    const given = parts.reduce((n, part) => n + part.length, 0);
    if (given !== this.length) throw new RangeError(`ShardSum.put: expected ${this.length} elements, got ${parts.map((p) => p.length).join(' + ')}`);
    let offset = 0;
    for (const part of parts) {
      const [from, to] = [offset, offset + part.length];
      for (let c = 0; c + 1 < this.bounds.length; ++c) {
        const [start, end] = [Math.max(from, this.bounds[c]), Math.min(to, this.bounds[c + 1])];
        if (start >= end) continue;
        const piece = part instanceof Float32Array ? part.subarray(start - from, end - from) : part.slice(start - from, end - from);
        this.sendBuffer.set(piece, this.pieceStart(h, c) + start - this.bounds[c]);
      }
      offset = to;
    }
    this.stepOf.set(shard, step);
  }

  /**
   * Held shard s's whole vector in the storage, where it is one piece (one rank in the communicator,
   * or one shard held): code computing the vector may write it there in place of put(), then call
   * stored(). Undefined where the storage interleaves shards' chunks.
   */
  slot(shard: number): Float32Array | undefined {
    const h = this.held.indexOf(shard);
    if (h < 0) throw new RangeError(`ShardSum.slot: shard ${shard} is not held by this rank (holds ${this.held})`);
    if (this.comm.size > 1 && this.held.length > 1) return undefined;
    return this.sendBuffer.subarray(h * this.length, (h + 1) * this.length);
  }

  /** Held shard s's slot holds its vector for `step`, all but the last element, which is `last` (its loss). */
  stored(shard: number, step: number, last: number): void {
    const slot = this.slot(shard);
    if (!slot) throw new Error(`ShardSum.stored: shard ${shard}'s vector is not one piece here; put() it`);
    slot[this.length - 1] = last;
    this.stepOf.set(shard, step);
  }

  /** Whether held shard s's vector for `step` is stored. */
  holds(shard: number, step: number): boolean {
    return this.stepOf.get(shard) === step;
  }

  /** Stores the vectors for `step` that `previous` (this rank's sum before a repair) holds of shards this sum holds too. */
  carryFrom(previous: ShardSum, step: number): void {
    if (previous.length !== this.length) throw new RangeError(`ShardSum.carryFrom: vectors of ${previous.length} elements, this sum's have ${this.length}`);
    for (const shard of previous.held) {
      const h = this.held.indexOf(shard);
      if (h < 0 || !previous.holds(shard, step)) continue;
      for (let c = 0; c + 1 < this.bounds.length; ++c) previous.copyOut(shard, this.bounds[c], this.bounds[c + 1], this.sendBuffer, this.pieceStart(h, c));
      this.stepOf.set(shard, step);
    }
  }

  /** Copies elements [from, to) of held shard s's vector into `target` at `at`. */
  private copyOut(shard: number, from: number, to: number, target: Float32Array, at: number): void {
    const h = this.held.indexOf(shard);
    for (let c = 0; c + 1 < this.bounds.length; ++c) {
      const [start, end] = [Math.max(from, this.bounds[c]), Math.min(to, this.bounds[c + 1])];
      if (start >= end) continue;
      const source = this.pieceStart(h, c) + start - this.bounds[c];
      target.set(this.sendBuffer.subarray(source, source + end - start), at + start - from);
    }
  }

  /** Where the piece of chunk c of the held shard at index h starts in sendBuffer (chunk by chunk, shard by shard within one). */
  private pieceStart(h: number, c: number): number {
    return this.held.length * this.bounds[c] + h * (this.bounds[c + 1] - this.bounds[c]);
  }

  /** The shard-ordered sum of this rank's chunk (elements [bounds[rank], bounds[rank+1])): the reduce-scatter half. */
  async reduce(): Promise<Float32Array> {
    if (this.comm.size === 1) return this.addHeld(this.chunk);
    await this.comm.alltoallv(this.sendBuffer, this.sendCounts, this.receiveBuffer, this.receiveCounts);
    const { chunk, receiveBuffer, pieceAt } = this;
    chunk.set(receiveBuffer.subarray(pieceAt[0], pieceAt[0] + chunk.length));
    for (let s = 1; s < pieceAt.length; ++s) this.add(chunk, receiveBuffer.subarray(pieceAt[s], pieceAt[s] + chunk.length));
    return chunk;
  }

  /**
   * One rank holds every shard: the sum in shard order straight from the stored vectors into
   * `into`, with no MPI call (the same additions in the same order as reduce()'s).
   */
  private addHeld(into: Float32Array): Float32Array {
    if (into === this.sendBuffer) return into;
    into.set(this.sendBuffer.subarray(0, this.length));
    for (let h = 1; h < this.held.length; ++h) this.add(into, this.sendBuffer.subarray(h * this.length, (h + 1) * this.length));
    return into;
  }

  /** The chunks' lengths, in rank order (the counts of an allgatherv of the chunks). */
  get chunkLengths(): number[] {
    return this.bounds.slice(1).map((end, c) => end - this.bounds[c]);
  }

  /** The shard-ordered sum of every shard's vector, on every rank (in `total`). */
  async sum(): Promise<Float32Array> {
    if (this.comm.size === 1) return this.addHeld(this.total);
    await this.comm.allgatherv(await this.reduce(), this.total, this.chunkLengths);
    return this.total;
  }
}
