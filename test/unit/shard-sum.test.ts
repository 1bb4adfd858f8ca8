// The shard-ordered sum's buffers across a repair, on the scripted MPI world (test/helpers): a sum
// whose exchange timed out had its request left to MPI, which may still write into what it
// receives into, so the sum replacing it takes over neither its pieces' buffer nor its output;
// after a plain failure (revoked) both go on. Either way the kept vectors sum as before.
import { strict as assert } from 'node:assert';
import { ShardMap } from '../../src/data/shard-map';
import { oneBucket, ShardSum } from '../../src/sharding/shard-sum';
import { SumMemory } from '../../src/sharding/sum-memory';
import { ScriptedWorld } from '../helpers/scripted-comm';
import { CommTimeoutError, RevokedError } from '../../src/comm/errors';

/** A SumMemory that records the lengths of the vectors given to it. */
class RecordingMemory extends SumMemory {
  readonly given: number[] = [];

  override give(vectors: Float32Array[]): void {
    this.given.push(...vectors.map((v) => v.length));
    super.give(vectors);
  }
}

const add = (acc: Float32Array, x: Float32Array): void => {
  for (let i = 0; i < acc.length; ++i) acc[i] = Math.fround(acc[i] + x[i]);
};
const length = 8;
const vector = (shard: number): Float32Array => Float32Array.from({ length }, (_, i) => 0.1 * (shard + 1) + i / 3);

describe('ShardSum across a repair (scripted world)', () => {
  it("a sum whose exchange timed out leaves its pieces' buffer and its output to MPI; one that was revoked gives them on", async () => {
    const world = new ScriptedWorld(2);
    const map = ShardMap.fromOwners([0, 1]);
    const memories = [new RecordingMemory(), new RecordingMemory()];
    const sums = world.comms.map((comm, r) => new ShardSum(comm, map, length, add, oneBucket, 0, memories[r]));
    sums.forEach((sum, r) => sum.put(r, 0, [vector(r)]));
    world.at(0, 'alltoallv', 'timeout');
    const outcomes = await Promise.allSettled(sums.map((sum) => sum.sum()));
    assert.ok(outcomes[0].status === 'rejected' && outcomes[0].reason instanceof CommTimeoutError);
    assert.ok(outcomes[1].status === 'rejected' && outcomes[1].reason instanceof RevokedError);

    const repaired = await Promise.all(world.comms.map((comm) => comm.shrink()));
    const outputs = sums.map((sum) => sum.total);
    const replacing = repaired.map((comm, r) => new ShardSum(comm, map, length, add, oneBucket, 0, memories[r], { sum: sums[r], step: 0 }));
    // each rank's chunk is 4 floats, the pieces of it 2 x 4; the slots are kept, the output never given
    assert.deepEqual(memories[0].given, [4]);
    assert.deepEqual(memories[1].given, [4, 8]);
    assert.notEqual(replacing[0].total.buffer, outputs[0].buffer);
    assert.equal(replacing[1].total.buffer, outputs[1].buffer);

    replacing.forEach((sum, r) => assert.ok(sum.holds(r, 0)));
    const totals = await Promise.all(replacing.map((sum) => sum.sum()));
    const expected = vector(0);
    add(expected, vector(1));
    for (const total of totals) assert.deepEqual(total, expected);
  });
});
