// NCCL communicators as the GPU backend uses them: made, used and aborted in a loop at 1 rank with
// no device memory left behind, and a communicator whose peer never joins aborted at its deadline
// rather than waiting forever.
import { strict as assert } from 'node:assert';
import { requireGpu } from '../helpers/gpu';
import { cudaAddon } from '../../src/nn/cuda';

describe('GPU backend: NCCL communicators', function () {
  this.timeout(120_000);
  before(function () {
    requireGpu(this);
  });

  it('made, summed over and aborted 30 times at 1 rank: the sum is the input, no device memory grows', () => {
    const nccl = cudaAddon();
    const values = Float32Array.from({ length: 1 << 20 }, (_, i) => (i % 1000) / 7);
    const round = (): void => {
      const comm = nccl.ncclInit(nccl.ncclUniqueId(), 1, 0, 10_000);
      nccl.upload(values, values);
      nccl.ncclAllReduce(comm, values, 10_000);
      const back = new Float32Array(values.length);
      nccl.download(values, back);
      assert.ok(Buffer.from(back.buffer).equals(Buffer.from(values.buffer)), 'a sum over one rank changed the values');
      nccl.ncclAbort(comm);
      nccl.ncclAbort(comm); // a second abort does nothing
      assert.throws(() => nccl.ncclAllReduce(comm, values, 1000), /ncclAllReduce: the NCCL communicator was aborted/);
    };
    round();
    round();
    const before = nccl.gpu().freeBytes;
    for (let i = 0; i < 28; ++i) round();
    const grown = before - nccl.gpu().freeBytes;
    assert.ok(grown <= 64 << 20, `device memory in use grew by ${(grown / 2 ** 20).toFixed(1)} MiB over 28 rounds`);
  });

  it('a peer that never joins: ncclInit gives up at its deadline, aborted, and a new communicator still works', () => {
    const nccl = cudaAddon();
    const start = Date.now();
    assert.throws(
      () => nccl.ncclInit(nccl.ncclUniqueId(), 2, 0, 1500),
      /ncclInit: timed out after 1500 ms; the NCCL communicator was aborted/,
    );
    const waited = Date.now() - start;
    assert.ok(waited >= 1500 && waited < 15_000, `waited ${waited} ms`);
    nccl.ncclAbort(nccl.ncclInit(nccl.ncclUniqueId(), 1, 0, 10_000));
  });
});
