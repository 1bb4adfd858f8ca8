// Rank 1 blocks its own JS thread for `holdMs` before joining an allreduce. Rank 0 counts timer
// ticks while it waits in that allreduce: they fire only if MPI runs off the event loop.
import { finalize, init } from '../../../src/comm';
import { report } from './report';

const holdMs = 600;

async function main(): Promise<void> {
  const { world } = await init();
  await world.barrier();
  if (world.rank === 1) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, holdMs);
  let ticks = 0;
  const timer = setInterval(() => {
    ticks += 1;
  }, 5);
  const start = process.hrtime.bigint();
  await world.allreduce(new Float32Array(16).fill(1));
  const waitedMs = Number(process.hrtime.bigint() - start) / 1e6;
  clearInterval(timer);
  report({ rank: world.rank, ticks, waitedMs });
  await finalize();
}

void main();
