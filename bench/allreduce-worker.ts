// The binding's side of bench/allreduce: the same method as bench/raw_allreduce.c, through the
// comm thread and Promises. Arguments: reps, then (bytes, iters) pairs.
import { finalize, init } from '../src/comm';

async function main(): Promise<void> {
  const [reps, ...pairs] = process.argv.slice(2).map(Number);
  const { world } = await init();
  for (let a = 0; a + 1 < pairs.length; a += 2) {
    const [bytes, iters] = [pairs[a], pairs[a + 1]];
    const buf = new Float32Array(bytes / 4);
    for (let i = 0; i < iters; ++i) await world.allreduce(buf);
    const us: number[] = [];
    for (let r = 0; r < reps; ++r) {
      await world.barrier();
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < iters; ++i) await world.allreduce(buf);
      us.push(Number(process.hrtime.bigint() - t0) / 1e3 / iters);
    }
    if (world.rank === 0) {
      console.log(JSON.stringify({ impl: 'binding', ranks: world.size, bytes, us: us.map((t) => +t.toFixed(3)) }));
    }
  }
  await world.free();
  await finalize();
}

void main();
