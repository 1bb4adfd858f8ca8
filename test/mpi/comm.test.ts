// The comm binding under mpirun: exact collectives at 1, 2, 3 and 4 ranks; kill -9 of one or two
// ranks followed by revoke/shrink/agree; a free event loop while MPI waits; argument errors.
import { strict as assert } from 'node:assert';
import { runProgram, type JobResult } from '../helpers/mpi-job';

interface Collectives {
  rank: number;
  size: number;
  worldRanks: number[];
  sumF32: number[];
  sumF64: number[];
  maxI32: number[];
  minI32: number[];
  sumsAround: number[];
  bcast: number[];
  gathered: number[];
  gatheredV: number[];
  alltoallv: number[];
  alltoallvPlaced: number[];
  agreed: number;
  revoked: boolean;
  failed: number[];
}

interface Survivor {
  worldRank: number;
  failure: { name: string; errorClass: number } | null;
  revoked: boolean;
  failed: number[];
  agreed: number;
  shrunk: { rank: number; size: number; worldRanks: number[] };
  sum: number[];
}

const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

function byRank<T extends { rank?: number; worldRank?: number }>(job: JobResult<T>): T[] {
  return [...job.results].sort((a, b) => (a.rank ?? a.worldRank!) - (b.rank ?? b.worldRank!));
}

function f32(x: number): number {
  return Math.fround(x);
}

describe('Communicator collectives', function () {
  this.timeout(90_000);

  for (const size of [1, 2, 3, 4]) {
    it(`returns exact values at ${size} rank${size > 1 ? 's' : ''}`, async () => {
      const job = await runProgram<Collectives>('collectives', size);
      assert.equal(job.code, 0, job.stderr);
      const results = byRank(job);
      assert.deepEqual(
        results.map((r) => r.rank),
        range(size),
      );
      const ranks = range(size);
      const sum = (f: (r: number) => number): number => ranks.reduce((acc, r) => acc + f(r), 0);
      for (const r of results) {
        assert.equal(r.size, size);
        assert.deepEqual(r.worldRanks, ranks);
        assert.deepEqual(
          r.sumF32,
          range(5).map((i) => f32(sum((k) => f32(k + i * 0.5)))),
        );
        // Doubles: the sum order may vary with the algorithm, so allow one ulp-scale difference.
        r.sumF64.forEach((v, i) => assert.ok(Math.abs(v - sum((k) => (k + 1) * 1e-3 + i)) < 1e-12));
        assert.deepEqual(
          r.maxI32,
          range(4).map((i) => (size - 1) * 10 - i),
        );
        assert.deepEqual(
          r.minI32,
          range(4).map((i) => 0 - i),
        );
        const weighted = (n: number): number => range(n).reduce((acc, i) => acc + (i % 97) * sum((k) => k + 1) * ((i % 89) + 1), 0);
        assert.deepEqual(r.sumsAround, [16384, 16385, 100_000].map(weighted), 'sums of 64 KiB, 64 KiB + 4 bytes and 400 KB');
        assert.deepEqual(r.bcast, [7.25, 7.25, 7.25, 7.25]);
        assert.deepEqual(
          r.gathered,
          ranks.flatMap((k) => [k, k * k]),
        );
        assert.deepEqual(
          r.gatheredV,
          ranks.flatMap((k) => Array(k + 1).fill(100 + k)),
        );
        assert.deepEqual(
          r.alltoallv,
          ranks.flatMap((s) => Array(r.rank + 1).fill(1000 * s + r.rank)),
        );
        assert.deepEqual(
          r.alltoallvPlaced,
          [...ranks].reverse().flatMap((s) => [10 * s, 10 * s + 1, -1]),
        );
        assert.equal(r.agreed, ~ranks.reduce((acc, k) => acc | (1 << k), 0));
        assert.equal(r.revoked, false);
        assert.deepEqual(r.failed, []);
      }
    });
  }
});

describe('Communicator after kill -9', function () {
  this.timeout(120_000);

  const cases: Array<{ title: string; victims: number[] }> = [
    { title: 'rank 2 of 4', victims: [2] },
    { title: 'rank 0 of 4', victims: [0] },
    { title: 'ranks 1 and 3 of 4 at once', victims: [1, 3] },
  ];
  for (const { title, victims } of cases) {
    it(`survivors repair after ${title}`, async () => {
      const job = await runProgram<Survivor>('kill', 4, [victims.join(',')]);
      const survivorRanks = range(4).filter((r) => !victims.includes(r));
      const survivors = byRank(job);
      assert.deepEqual(
        survivors.map((s) => s.worldRank),
        survivorRanks,
        job.stdout + job.stderr,
      );
      assert.equal(job.code, 0, job.stderr); // the survivors finalized and mpirun let the job end
      const expectedAnd = ~survivorRanks.reduce((acc, r) => acc | (1 << r), 0);
      for (const s of survivors) {
        assert.ok(s.failure, `world rank ${s.worldRank}: the allreduce did not fail`);
        assert.ok(['ProcFailedError', 'RevokedError'].includes(s.failure.name), s.failure.name);
        assert.equal(s.failure.errorClass, s.failure.name === 'ProcFailedError' ? 75 : 77);
        assert.equal(s.revoked, true);
        assert.deepEqual([...s.failed].sort(), victims); // in the order they were detected
        assert.equal(s.agreed, expectedAnd);
        assert.equal(s.shrunk.size, survivorRanks.length);
        assert.deepEqual(s.shrunk.worldRanks, survivorRanks);
        assert.equal(s.shrunk.worldRanks[s.shrunk.rank], s.worldRank);
        assert.deepEqual(s.sum, Array(8).fill(survivorRanks.reduce((acc, r) => acc + r + 1, 0)));
      }
    });
  }
});

describe('Comm thread', function () {
  this.timeout(60_000);

  it('keeps the event loop free while an allreduce waits on a busy peer', async () => {
    const job = await runProgram<{ rank: number; ticks: number; waitedMs: number }>('loop-free', 2);
    assert.equal(job.code, 0, job.stderr);
    const waiter = job.results.find((r) => r.rank === 0)!;
    // The peer held its thread for 600 ms: rank 0 waited most of it, and its 5 ms timer kept firing.
    assert.ok(waiter.waitedMs > 400, `waited only ${waiter.waitedMs} ms`);
    assert.ok(waiter.ticks >= waiter.waitedMs / 5 / 3, `${waiter.ticks} ticks in ${waiter.waitedMs} ms`);
  });

  it('bounds every wait: past the deadline the thread revokes (CommTimeoutError); a revoke never queues behind a waiting call', async () => {
    interface Deadline {
      rank: number;
      timedOut: { name: string; ms: number } | null;
      revoked: { name: string; ms: number } | null;
      sizes: number[];
    }
    const job = await runProgram<Deadline>('deadline', 2, ['500']);
    assert.equal(job.code, 0, job.stderr);
    const waiter = job.results.find((r) => r.rank === 0)!;
    assert.equal(waiter.timedOut!.name, 'CommTimeoutError');
    // the deadline, then at most the grace a revoked request gets to complete
    assert.ok(waiter.timedOut!.ms >= 500 && waiter.timedOut!.ms < 1500 + 500, `timed out after ${waiter.timedOut!.ms} ms`);
    // with a 60 s deadline, the revoke issued during the wait ends it at once
    assert.equal(waiter.revoked!.name, 'RevokedError');
    assert.ok(waiter.revoked!.ms < 5000, `the revoke took ${waiter.revoked!.ms} ms`);
    assert.deepEqual(
      job.results.map((r) => r.sizes),
      [
        [2, 2],
        [2, 2],
      ],
    );
  });

  it('rejects bad arguments with errors naming the argument', async () => {
    const job = await runProgram<Record<string, string>>('bad-args', 1);
    assert.equal(job.code, 0, job.stderr);
    const buffers = 'a Float32Array, Float64Array, Int32Array or Uint8Array';
    assert.deepEqual(job.results[0], {
      'string buffer': `TypeError: allreduce: expected buffer to be ${buffers}, got string`,
      'Uint16Array buffer': `TypeError: allreduce: expected buffer to be ${buffers}, got Uint16Array`,
      'bad op': "TypeError: allreduce: expected op to be 'sum', 'max' or 'min', got string",
      'root out of range': 'TypeError: bcast: expected root to be an integer from 0 to 0, got number 1',
      'fractional root': 'TypeError: bcast: expected root to be an integer from 0 to 0, got number 0.5',
      'mixed types': 'TypeError: allgather: expected recvbuf to be the same kind of typed array as sendbuf, got Float64Array',
      'short recvbuf': 'RangeError: allgather: recvbuf has 1 elements; expected size * sendbuf.length = 2',
      'counts length':
        'TypeError: allgatherv: expected counts to be an Array or Int32Array of 1 non-negative integers (one per rank), got Array of 2',
      'counts vs sendbuf': 'RangeError: allgatherv: sendbuf has 2 elements but counts[0] is 3',
      'negative count':
        'TypeError: alltoallv: expected sendCounts to be an Array or Int32Array of 1 non-negative integers (one per rank), got number -1',
      'counts sum': 'RangeError: alltoallv: sendCounts add up to 1 elements but sendbuf has 2',
      'block past the end': 'RangeError: alltoallv: recvDispls[0] + its count is 3 elements but recvbuf has 2',
      'agree flag': 'TypeError: agree: expected flag to be an integer from -2147483648 to 2147483647, got number 1.5',
      'spawn args': 'TypeError: spawn: expected args to be an Array of strings, got number 1',
      'spawn count': 'TypeError: spawn: expected count to be an integer from 1 to 4096, got number 0',
      'accept port': 'TypeError: accept: expected port to be a string, got number 7',
      'spawnedUp count': 'TypeError: spawnedUp: expected count to be an integer from 1 to 4096, got number 1.5',
      'init twice': 'Error: init: MPI was already initialized',
      construct: 'TypeError: Communicator: not constructible; use init(), shrink(), split() or accept()',
      'after free': 'Error: barrier: the communicator was freed',
      'after finalize': 'Error: barrier: MPI has been finalized',
      'finalize twice': 'Error: finalize: MPI was already finalized',
    });
  });
});

describe('The shard-ordered sum (ft/shard-sum.ts) on a real communicator', function () {
  this.timeout(90_000);

  for (const size of [1, 2, 3]) {
    it(`has the bits of one float32 addition after another in shard order at ${size} rank${size > 1 ? 's' : ''}, buckets sent early or late, a sideband summed with it, a spare's sum in memory made ready${size > 1 ? "; replaced without the last rank, it keeps the survivors' vectors and output, takes only memory made ready for it, and sums the same" : ''}`, async () => {
      const job = await runProgram<{
        rank: number;
        sums: Record<string, string[]>;
        references: Record<string, string[]>;
        replaced: { kept: boolean; fromReserve: boolean; sum: string; reference: string }[];
        spareFromReserve: boolean[];
      }>('shard-sum', size);
      assert.equal(job.code, 0, job.stderr);
      assert.equal(job.results.length, size);
      for (const r of job.results) {
        assert.deepEqual(Object.keys(r.sums), ['1001', '70001', '1001+7']);
        for (const length of Object.keys(r.sums)) {
          assert.equal(r.sums[length].length, 2);
          r.sums[length].forEach((sum, step) =>
            assert.ok(
              sum === r.references[length][step],
              `rank ${r.rank}, length ${length}, step ${step}: the sum's bits differ from the shard-order reference`,
            ),
          );
        }
        assert.deepEqual(r.spareFromReserve, [true, true, true], `rank ${r.rank}: a spare's sum took memory not made ready for it`);
        // the last rank is the lost one: it takes no part
        assert.equal(r.replaced.length, size > 1 && r.rank < size - 1 ? 3 : 0);
        r.replaced.forEach(({ kept, fromReserve, sum, reference }, i) => {
          assert.ok(kept, `rank ${r.rank}, sum ${i}: the replacing sum did not keep the survivor's vectors and output`);
          assert.ok(fromReserve, `rank ${r.rank}, sum ${i}: the replacing sum took memory that was not made ready for it`);
          assert.ok(sum === reference, `rank ${r.rank}, sum ${i}: the replacing sum's bits differ from the shard-order reference`);
        });
      }
    });
  }
});
