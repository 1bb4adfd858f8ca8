// Every collective once, with inputs that depend on the rank; reports the raw outputs so the test
// can check them against exact expected values.
import { finalize, init } from '../../../src/comm';
import { report } from './report';

async function main(): Promise<void> {
  const { world } = await init();
  const { rank, size } = world;

  const sumF32 = Float32Array.from({ length: 5 }, (_, i) => rank + i * 0.5);
  await world.allreduce(sumF32);
  const sumF64 = Float64Array.from({ length: 3 }, (_, i) => (rank + 1) * 1e-3 + i);
  await world.allreduce(sumF64, 'sum');
  const maxI32 = Int32Array.from({ length: 4 }, (_, i) => rank * 10 - i);
  await world.allreduce(maxI32, 'max');
  const minI32 = Int32Array.from({ length: 4 }, (_, i) => rank * 10 - i);
  await world.allreduce(minI32, 'min');
  // Either side of where allreduce changes libnbc's algorithm (64 KiB: Rabenseifner's up to it, the
  // ring above). Integers, so every order of the sum gives the same floats; reported as a weighted
  // checksum (exact in doubles) rather than 130,000 numbers.
  const sumsAround = [16384, 16385, 100_000].map((n) => Float32Array.from({ length: n }, (_, i) => (i % 97) * (rank + 1)));
  for (const v of sumsAround) await world.allreduce(v);

  const root = size - 1;
  const bcast = new Float32Array(4).fill(rank === root ? 7.25 : -1);
  await world.bcast(bcast, root);

  const gathered = new Int32Array(2 * size);
  await world.allgather(Int32Array.of(rank, rank * rank), gathered);

  // Rank r contributes r + 1 copies of 100 + r.
  const counts = Array.from({ length: size }, (_, r) => r + 1);
  const gatheredV = new Float64Array(counts.reduce((a, b) => a + b, 0));
  await world.allgatherv(new Float64Array(rank + 1).fill(100 + rank), gatheredV, counts);

  // Rank r sends d + 1 copies of 1000 * r + d to rank d; receives rank + 1 from each.
  const sendCounts = Array.from({ length: size }, (_, d) => d + 1);
  const send = Float32Array.from(sendCounts.flatMap((n, d) => Array(n).fill(1000 * rank + d)));
  const recvCounts = Int32Array.from({ length: size }, () => rank + 1);
  const recv = new Float32Array(size * (rank + 1));
  await world.alltoallv(send, sendCounts, recv, recvCounts);

  // Placed blocks: one buffer [10 r, 10 r + 1] to every rank (send blocks overlap); the block from
  // rank s lands at offset 3 (size - 1 - s), the gaps untouched (-1).
  const placed = new Float32Array(3 * size).fill(-1);
  await world.alltoallv(
    Float32Array.of(10 * rank, 10 * rank + 1),
    Array(size).fill(2),
    placed,
    Array(size).fill(2),
    Array(size).fill(0),
    Array.from({ length: size }, (_, s) => 3 * (size - 1 - s)),
  );

  await world.barrier();
  // Every rank clears its own bit: the agreed AND has all rank bits cleared.
  const agreed = await world.agree(~(1 << rank));
  const revoked = await world.isRevoked();
  const failed = await world.getFailed();

  report({
    rank,
    size,
    worldRanks: world.worldRanks,
    sumF32: [...sumF32],
    sumF64: [...sumF64],
    maxI32: [...maxI32],
    minI32: [...minI32],
    sumsAround: sumsAround.map((v) => v.reduce((acc, x, i) => acc + x * ((i % 89) + 1), 0)),
    bcast: [...bcast],
    gathered: [...gathered],
    gatheredV: [...gatheredV],
    alltoallv: [...recv],
    alltoallvPlaced: [...placed],
    agreed,
    revoked,
    failed,
  });
  await world.free();
  await finalize();
}

void main();
