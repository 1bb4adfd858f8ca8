// The vectors an optimizer update streams together start at distinct skews into allocations of the
// same size: wherever the allocator puts two of them, they never start a multiple of a page apart
// (so never 256 MiB apart, which AMD's L1 cannot stream at once), and each starts on a cache line.
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec } from '../../src/nn/spec';
import { Stream, streamVector } from '../../src/nn/stream-memory';

describe('stream memory', () => {
  it('every kind of vector: zeroed, the same allocation size, a skew a page and a cache line from the others', () => {
    const vectors = [0, 1, 2, 3].map((kind) => streamVector(1000, kind));
    for (const [k, vector] of vectors.entries()) {
      assert.equal(vector.length, 1000);
      assert.ok(vector.every((x) => x === 0));
      assert.equal(vector.buffer.byteLength, vectors[0].buffer.byteLength);
      assert.equal(vector.byteOffset, k * (4096 + 64));
    }
    for (const a of vectors) for (const b of vectors) if (a !== b) assert.notEqual((a.byteOffset - b.byteOffset) % 4096, 0);
  });

  it('a length too large to allocate is refused naming that length', () => {
    assert.throws(() => streamVector(2 ** 40, 1), /^RangeError: Invalid typed array length: 1099511627776$/);
  });

  it('a bad kind is refused', () => {
    assert.throws(() => streamVector(10, 4), /^RangeError: streamVector: kind 4 is not one of 0\.\.3$/);
    assert.throws(() => streamVector(10, 1.5), /^RangeError: streamVector: kind 1\.5 is not one of 0\.\.3$/);
  });

  it("a net's parameters and gradients are the parameters' and the gradients' kinds", () => {
    const net = new Net(loadSpec('models/mlp.json'), cpu);
    assert.equal(net.params.data.byteOffset, Stream.parameters * (4096 + 64));
    assert.equal(net.params.gradients.byteOffset, Stream.gradients * (4096 + 64));
  });
});
