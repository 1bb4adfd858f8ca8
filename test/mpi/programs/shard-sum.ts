// The shard-ordered sum on a real communicator: seven shards held unevenly (two, two, three), a
// vector cut into several buckets, some sent early as backward would (in a different pattern on
// each rank), two steps in a row; then with a sideband after each vector (shard s's value in its
// element s, as balance.ts sends each shard's time). Then, as a recovery does, a sum over the
// world without its last rank replaces the sum of step 1: the survivors keep their vectors of that
// step (the same slots) and the output, put only the shards handed to them from the lost rank, and
// get the same sum; every buffer it takes is one of the blocks ShardSum.blocks() had the memory
// make ready for that world (as a spare's are, for a sum of the whole world). Reports the digests of each rank's sums and of the reference: every shard's vector
// added in shard order, one float32 addition at a time, computed alone from the same seeded values.
import { createHash } from 'node:crypto';
import { finalize, init } from '../../../src/comm';
import { ShardMap } from '../../../src/data/shard-map';
import { ShardSum } from '../../../src/sharding/shard-sum';
import { SumMemory } from '../../../src/sharding/sum-memory';
import type { Communicator } from '../../../src/comm';
import { cpu } from '../../../src/nn/cpu';
import { stream } from '../../../src/base/random';
import { report } from './report';

const owners = [0, 0, 1, 2, 2, 2, 1];

/** Shard s's vector for `step`: values spread over several magnitudes, so the order of additions shows in the bits. */
function vector(shard: number, step: number, length: number): Float32Array {
  const next = stream(1000 * step + shard);
  return Float32Array.from({ length }, () => (next() - 0.5) * 10 ** Math.floor(next() * 6 - 3));
}

const sha256 = (values: Float32Array): string =>
  createHash('sha256')
    .update(Buffer.from(values.buffer, values.byteOffset, values.byteLength))
    .digest('hex');

/** A SumMemory that counts the vectors it had no free block for. */
class CountingMemory extends SumMemory {
  misses = 0;

  override take(floats: number): Float32Array {
    const free = this.freeBytes;
    const vector = super.take(floats);
    if (this.freeBytes === free) this.misses += 1;
    return vector;
  }
}

/** The most shards a rank holds under `map`. */
const most = (map: ShardMap): number => Math.max(...map.counts().values());

/**
 * As a recovery after `lost` died with the vectors of step 1 computed: the sum over `survivors`
 * replaces `previous`, and only the shards handed over are put. Its sum, against the reference.
 */
async function replace(
  survivors: Communicator,
  map: ShardMap,
  previous: ShardSum,
  length: number,
  sideband: number,
  add: (acc: Float32Array, x: Float32Array) => void,
  memory: CountingMemory,
  lost: number,
  side: (shard: number, step: number) => Float32Array,
): Promise<Replaced> {
  const step = 1;
  const next = map.without([lost], survivors.worldRanks);
  memory.reserve(ShardSum.blocks(length, sideband, survivors.size, map.shardCount, most(map), false));
  const misses = memory.misses;
  const slots = new Map(previous.held.map((shard) => [shard, previous.slot(shard)]));
  const output = previous.total;
  const sum = new ShardSum(survivors, next, length, add, { first: 400, rest: 17_000 }, sideband, memory, { sum: previous, step });
  const fromReserve = memory.misses === misses;
  let kept = sum.total.buffer === output.buffer && sum.total.byteOffset === output.byteOffset;
  for (const shard of sum.held) {
    if (slots.has(shard)) {
      kept &&= sum.holds(shard, step) && sum.slot(shard).buffer === slots.get(shard)!.buffer;
      continue;
    }
    kept &&= !sum.holds(shard, step);
    const values = vector(shard, step, length);
    sum.put(shard, step, [values]);
    if (sideband > 0) sum.setSideband(shard, side(shard, step));
  }
  const total = await sum.sum();
  const reference = vector(0, step, length);
  for (let s = 1; s < owners.length; ++s) {
    const values = vector(s, step, length);
    for (let i = 0; i < length; ++i) reference[i] = Math.fround(reference[i] + values[i]);
  }
  const expected = owners.map((_, s) => side(s, step)[s]);
  return {
    kept,
    fromReserve,
    sum: sha256(sideband > 0 ? Float32Array.from([...total, ...sum.sidebandTotal]) : total),
    reference: sha256(sideband > 0 ? Float32Array.from([...reference, ...expected]) : reference),
  };
}

/** The sum without the last rank: whether it kept the survivor's slots and output, took only reserved blocks, its digest and the reference's. */
interface Replaced {
  kept: boolean;
  fromReserve: boolean;
  sum: string;
  reference: string;
}

async function main(): Promise<void> {
  const { world } = await init();
  const map = ShardMap.fromOwners(owners.map((o) => o % world.size));
  const sums: Record<string, string[]> = {};
  const references: Record<string, string[]> = {};
  const replaced: Replaced[] = [];
  // a spare's blocks: whether a sum of the whole world, made anew, took only them
  const spareFromReserve: boolean[] = [];
  const memory = new CountingMemory();
  const survivors = world.size > 1 ? await world.split(world.rank < world.size - 1 ? 0 : -1, world.rank) : null;
  for (const [length, sideband] of [
    [1_001, 0],
    [70_001, 0],
    [1_001, owners.length],
  ]) {
    // small buckets, so that both vectors go in several: 1,001 floats in 2, 70,001 in 6
    const add = (acc: Float32Array, x: Float32Array): void => cpu.addInPlace(acc, x);
    const sum = new ShardSum(world, map, length, add, { first: 400, rest: 17_000 }, sideband, memory);
    const side = (shard: number, step: number): Float32Array => {
      const values = new Float32Array(sideband);
      values[shard] = 1000.25 + 10 * step + shard;
      return values;
    };
    for (const step of [0, 1]) {
      sum.held.forEach((shard, h) => {
        const values = vector(shard, step, length);
        // one shard written in place, as the trainer does, the others put
        if (h === 0) {
          sum.slot(shard).set(values);
          sum.stored(shard, step, values[length - 1]);
        } else {
          sum.put(shard, step, [values.subarray(0, length - 1), [values[length - 1]]]);
        }
        if (sideband > 0) sum.setSideband(shard, side(shard, step));
      });
      // ranks send their buckets at different points, the last rank only at the end
      if (world.rank === 0) for (const from of [length - 10, Math.floor(length / 2), 1]) sum.sendFrom(from);
      if (world.rank === 1) sum.sendFrom(Math.floor(length / 3));
      const total = await sum.sum();
      const reference = vector(0, step, length);
      for (let s = 1; s < owners.length; ++s) {
        const values = vector(s, step, length);
        for (let i = 0; i < length; ++i) reference[i] = Math.fround(reference[i] + values[i]);
      }
      const key = sideband > 0 ? `${length}+${sideband}` : `${length}`;
      // with a sideband: the sum, then every shard's value where its vector put it
      const expected = owners.map((_, s) => side(s, step)[s]);
      (sums[key] ??= []).push(sha256(sideband > 0 ? Float32Array.from([...total, ...sum.sidebandTotal]) : total));
      (references[key] ??= []).push(sha256(sideband > 0 ? Float32Array.from([...reference, ...expected]) : reference));
    }
    if (survivors) replaced.push(await replace(survivors, map, sum, length, sideband, add, memory, world.size - 1, side));
    memory.reserve(ShardSum.blocks(length, sideband, world.size, map.shardCount, most(map), true));
    const misses = memory.misses;
    new ShardSum(world, map, length, add, { first: 400, rest: 17_000 }, sideband, memory);
    spareFromReserve.push(memory.misses === misses);
  }
  report({ rank: world.rank, sums, references, replaced, spareFromReserve });
  await survivors?.free();
  await world.free();
  await finalize();
}

void main();
