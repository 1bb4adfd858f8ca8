// The sum of per-shard vectors over all S logical shards in shard order, whichever ranks hold which
// shards, at the cost of a ring allreduce: the vector is cut into one chunk per live rank; an
// exchange (alltoallv) sends every held shard's piece of chunk c to c's owner, which adds the S
// pieces in shard order ((g0 + g1) + g2) + ...; an allgatherv gives everyone the sum. Chunk bounds
// move with the world size, the order of additions per element never does, so the result has the
// same bits at any world size and under any shard map.
//
// The exchange goes in buckets, from the vector's end down (DDP's order and sizes: backward
// finishes the last layers' gradients first; a small first bucket, then large ones), so that it
// overlaps the backward pass: sendFrom(i) sends every bucket lying at or above element i as soon as
// the last held shard's vector is final there. How the vector is cut into buckets changes which
// messages carry an element, never the additions.
//
// Each held shard's vector is stored whole in a slot of its own (code computing it may write it
// there in place), tagged with its step, so that the sum a recovery builds for the smaller world
// takes over the slots holding what the survivors already computed for the step being retried, and
// the sum's output; its other buffers come from the job's SumMemory (sum-memory.ts), where the
// replaced sum's go.
//
// A sideband may follow each vector (the last chunk's, never a parameter's): values added like the
// rest, for what every rank must learn of every shard at each step without another collective
// (balance.ts: the time each shard took its owner). Code computing a vector never sees it.
import type { Communicator } from '../comm';
import { CommTimeoutError } from '../comm/errors';
import { chunkBounds } from '../base/chunks';
import type { ShardMap } from '../data/shard-map';
import { Stream, streamVector, streamVectorFloats } from '../nn/stream-memory';
import { SumMemory } from './sum-memory';

/** The exchange's cut of a vector of `length` + `sideband` over `size` ranks: chunk c is [cut[c], cut[c+1]), the last with the sideband. */
function exchangeCut(length: number, sideband: number, size: number): number[] {
  return [...chunkBounds(length, size).slice(0, size), length + sideband];
}

/** The lengths of the chunks between a cut's bounds. */
function chunkLengthsOf(cut: number[]): number[] {
  return cut.slice(1).map((end, c) => end - cut[c]);
}

/** Bucket sizes in floats, from the vector's end: the first one, then every other one. */
export interface BucketSizes {
  first: number;
  rest: number;
}

/**
 * DDP's: 1 MiB, then 25 MiB. Each bucket costs a round of calls through the comm thread: smaller
 * ones made lenet's exact step slower (at 2 ranks, 4 buckets of 0.21 MB took 191 us to exchange,
 * one of 0.86 MB 106 us).
 */
export const ddpBuckets: BucketSizes = { first: 1 << 18, rest: 25 * (1 << 18) };

/** The whole vector in one exchange: where nothing overlaps it, more buckets only cost more calls. */
export const oneBucket: BucketSizes = { first: Infinity, rest: Infinity };

/** One alltoallv of a bucket: the j-th held shard of every rank (if it has one). */
interface BucketCall {
  send: Float32Array;
  sendCounts: number[];
  receive: Float32Array;
  receiveCounts: number[];
}

/** Elements [from, to) of the vector, as exchanged and reduced. */
interface Bucket {
  from: number;
  calls: BucketCall[];
  /** the bucket's part of this rank's chunk, and shard s's piece of it (received), in shard order */
  chunkPart: Float32Array;
  pieces: Float32Array[];
}

export class ShardSum {
  /** chunk c = elements [bounds[c], bounds[c+1]), owned by comm rank c (the last one's sideband follows it) */
  readonly bounds: number[];
  /** the chunks' lengths as reduced, the last with the sideband, in rank order (the counts of an allgatherv of the chunks) */
  readonly chunkLengths: number[];
  /** this rank's shards, ascending */
  readonly held: number[];
  /** held shard h's vector in slots[h][0, length), its sideband after it */
  private readonly slots: Float32Array[];
  /** every shard's piece of this rank's chunk, by bucket */
  private readonly receiveBuffer: Float32Array;
  private readonly chunk: Float32Array;
  /** descending: bucket 0 ends the vector */
  private readonly buckets: Bucket[];
  /** buckets of the sum under way already sent, and their exchanges */
  private sent = 0;
  /** a call of this sum timed out and its request was left to MPI, which may still write into the buffers it receives into */
  private abandoned = false;
  private readonly inFlight: Promise<void>[] = [];
  /** the step whose vector held shard s's slot holds */
  private readonly stepOf = new Map<number, number>();
  /** [the sum (length) | the summed sideband] */
  private readonly full: Float32Array;
  /** the shard-ordered sum of the vectors, once sum() has run */
  readonly total: Float32Array;
  /** the summed sideband, once sum() (or, with sharded state, its update) has run */
  readonly sidebandTotal: Float32Array;

  /**
   * `add(acc, x)`: acc += x element-wise (the backend's addInPlace); `sizes`: how the exchange is
   * cut (ddpBuckets, oneBucket); `sideband`: the elements that follow each vector. `replacing`: the
   * sum this one replaces after a repair (no longer used), whose vectors for `replacing.step` of
   * shards this rank still holds are kept, and whose buffers go to `memory`.
   */
  constructor(
    private readonly comm: Communicator,
    map: ShardMap,
    readonly length: number,
    private readonly add: (acc: Float32Array, x: Float32Array) => void,
    sizes: BucketSizes,
    readonly sideband = 0,
    memory = new SumMemory(),
    replacing?: { sum: ShardSum; step: number },
  ) {
    if (!(sizes.first >= 1 && sizes.rest >= 1))
      throw new RangeError(`ShardSum: bucket sizes must be positive, got ${JSON.stringify(sizes)}`);
    const size = comm.size;
    const stride = length + sideband;
    this.bounds = chunkBounds(length, size);
    const cut = exchangeCut(length, sideband, size);
    this.chunkLengths = chunkLengthsOf(cut);
    const heldBy = comm.worldRanks.map((worldRank) => map.shardsOf(worldRank));
    if (heldBy.reduce((n, shards) => n + shards.length, 0) !== map.shardCount) {
      throw new Error(
        `ShardSum: the shard map's owners ${JSON.stringify(map.ranks)} are not the communicator's ranks ${JSON.stringify(comm.worldRanks)}`,
      );
    }
    this.held = heldBy[comm.rank];
    const previous = replacing?.sum;
    if (previous && (previous.length !== length || previous.sideband !== sideband))
      throw new RangeError(
        `ShardSum: replaces a sum of ${previous.length} + ${previous.sideband} elements with one of ${length} + ${sideband}`,
      );
    const kept = previous ? previous.held.filter((shard) => this.held.includes(shard) && previous.holds(shard, replacing.step)) : [];
    // its output is never given: the committed step's summed gradient may still be read there
    if (previous)
      memory.give([
        previous.chunk,
        ...(previous.abandoned ? [] : [previous.receiveBuffer]),
        ...previous.slots.filter((slot, h) => !kept.includes(previous.held[h]) && slot !== previous.full),
      ]);
    const newVector = (): Float32Array => streamVector(stride, Stream.gradients, (floats) => memory.take(floats));
    this.slots = this.held.map((shard) => (kept.includes(shard) ? previous!.slots[previous!.held.indexOf(shard)] : newVector()));
    for (const shard of kept) this.stepOf.set(shard, replacing!.step);
    const [mineFrom, mineTo] = [cut[comm.rank], cut[comm.rank + 1]];
    this.chunk = memory.take(mineTo - mineFrom);
    this.receiveBuffer = memory.take(map.shardCount * this.chunk.length);
    const calls = Math.max(...heldBy.map((shards) => shards.length));
    const overlap = (from: number, to: number, c: number) => Math.max(0, Math.min(to, cut[c + 1]) - Math.max(from, cut[c]));
    this.buckets = [];
    let received = 0;
    for (let to = stride, from: number; to > 0; to = from) {
      from = Math.max(0, to - (to === stride ? sizes.first : sizes.rest));
      const mine = overlap(from, to, comm.rank);
      const partFrom = Math.max(from, mineFrom) - mineFrom;
      const pieces = new Array<Float32Array>(map.shardCount);
      const bucketCalls: BucketCall[] = [];
      for (let j = 0; j < calls; ++j) {
        // from every rank with a j-th shard, that shard's piece of my chunk here, in rank order
        const receiveCounts = heldBy.map((shards) => (j < shards.length ? mine : 0));
        const receive = this.receiveBuffer.subarray(received, received + receiveCounts.reduce((a, b) => a + b, 0));
        let at = 0;
        heldBy.forEach((shards) => {
          if (j >= shards.length) return;
          pieces[shards[j]] = receive.subarray(at, at + mine);
          at += mine;
        });
        received += receive.length;
        const sends = j < this.held.length;
        bucketCalls.push({
          send: sends ? this.slots[j].subarray(from, to) : new Float32Array(0),
          sendCounts: cut.slice(0, size).map((_, c) => (sends ? overlap(from, to, c) : 0)),
          receive,
          receiveCounts,
        });
      }
      this.buckets.push({ from, calls: bucketCalls, chunkPart: this.chunk.subarray(partFrom, partFrom + mine), pieces });
    }
    // alone with one shard, the sum is that shard's vector as stored: no copy; else the replaced
    // sum's output where it was one of its own (the same array: the summed gradient stays where it is read)
    const previousOwn = previous && !previous.abandoned && previous.full !== previous.slots[0] ? previous.full : undefined;
    if (size === 1 && this.held.length === 1) this.full = this.slots[0];
    else this.full = previousOwn ?? newVector();
    this.total = this.full.subarray(0, length);
    this.sidebandTotal = this.full.subarray(length);
  }

  /**
   * The blocks (in floats) that a sum of `length` + `sideband` elements over a world of `size`
   * takes from its memory on a rank given `newSlots` shards it has no vector of yet: their slots,
   * its chunk (at most the largest) and every shard's piece of it; the sum's output too where
   * `output` (no replaced sum's to keep).
   */
  static blocks(length: number, sideband: number, size: number, shards: number, newSlots: number, output: boolean): number[] {
    const chunk = Math.max(...chunkLengthsOf(exchangeCut(length, sideband, size)));
    const slot = streamVectorFloats(length + sideband);
    return [...new Array<number>(newSlots).fill(slot), chunk, shards * chunk, ...(output ? [slot] : [])];
  }

  /** Held shard s's vector: code computing it may write it here in place of put(), then call stored(). */
  slot(shard: number): Float32Array {
    const h = this.held.indexOf(shard);
    if (h < 0) throw new RangeError(`ShardSum.slot: shard ${shard} is not held by this rank (holds ${this.held})`);
    return this.slots[h].subarray(0, this.length);
  }

  /** Sets held shard s's sideband to `values` (the sideband's length); send it with its vector. */
  setSideband(shard: number, values: ArrayLike<number>): void {
    const h = this.held.indexOf(shard);
    if (h < 0 || values.length !== this.sideband)
      throw new RangeError(
        `ShardSum.setSideband: shard ${shard} held (${this.held}), ${values.length} values for a sideband of ${this.sideband}`,
      );
    this.slots[h].set(values, this.length);
  }

  /** Held shard s's slot holds its vector for `step`, all but the last element, which is `last` (its loss). */
  stored(shard: number, step: number, last: number): void {
    this.slot(shard)[this.length - 1] = last;
    this.stepOf.set(shard, step);
  }

  /**
   * Stores held shard s's vector for `step`, given as consecutive parts (e.g. its gradient, its
   * batchnorm statistics, [its loss]); copied, so the caller may reuse its buffers.
   */
  put(shard: number, step: number, parts: readonly (Float32Array | readonly number[])[]): void {
    const slot = this.slot(shard);
    const given = parts.reduce((n, part) => n + part.length, 0);
    if (given !== this.length)
      throw new RangeError(`ShardSum.put: expected ${this.length} elements, got ${parts.map((p) => p.length).join(' + ')}`);
    let offset = 0;
    for (const part of parts) {
      slot.set(part, offset);
      offset += part.length;
    }
    this.stepOf.set(shard, step);
  }

  /** Whether held shard s's vector for `step` is stored. */
  holds(shard: number, step: number): boolean {
    return this.stepOf.get(shard) === step;
  }

  /**
   * Sends every bucket of the vector lying at or above element `from`, not sent yet: call it once
   * every held shard's vector is final from `from` on (each rank calls it with its own progress;
   * every rank sends the same buckets in the same order). Failures surface in reduce().
   */
  sendFrom(from: number): void {
    if (this.comm.size === 1) return;
    while (this.sent < this.buckets.length && this.buckets[this.sent].from >= from) {
      for (const call of this.buckets[this.sent].calls) {
        const exchange = this.comm.alltoallv(call.send, call.sendCounts, call.receive, call.receiveCounts);
        exchange.catch((error: unknown) => this.noteAbandoned(error)); // awaited in reduce(), unless a failure ends the step first
        this.inFlight.push(exchange);
      }
      this.sent += 1;
    }
  }

  /** The shard-ordered sum of this rank's chunk (elements [bounds[rank], bounds[rank+1])): the reduce-scatter half. */
  async reduce(): Promise<Float32Array> {
    if (this.comm.size === 1) return this.addHeld(this.chunk);
    this.sendFrom(0);
    try {
      for (const exchange of this.inFlight) await exchange;
    } finally {
      this.inFlight.length = 0;
      this.sent = 0;
    }
    for (const { chunkPart, pieces } of this.buckets) {
      if (chunkPart.length === 0) continue;
      chunkPart.set(pieces[0]);
      for (let s = 1; s < pieces.length; ++s) this.add(chunkPart, pieces[s]);
    }
    return this.chunk;
  }

  /**
   * One rank holds every shard: the sum in shard order straight from the stored vectors into
   * `into`, with no MPI call (the same additions in the same order as reduce()'s).
   */
  private addHeld(into: Float32Array): Float32Array {
    if (into === this.slots[0]) return into;
    into.set(this.slots[0]);
    for (let h = 1; h < this.held.length; ++h) this.add(into, this.slots[h]);
    return into;
  }

  /** The shard-ordered sum of every shard's vector, on every rank (in `total`, the sideband's in `sidebandTotal`). */
  async sum(): Promise<Float32Array> {
    if (this.comm.size === 1) this.addHeld(this.full);
    else
      await this.comm.allgatherv(await this.reduce(), this.full, this.chunkLengths).catch((error: unknown) => {
        this.noteAbandoned(error);
        throw error;
      });
    return this.total;
  }

  private noteAbandoned(error: unknown): void {
    if (error instanceof CommTimeoutError) this.abandoned = true;
  }
}
