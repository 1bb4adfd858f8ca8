// Bounded waits on the comm thread, at 2 ranks. Rank 0 starts an allreduce that rank 1 never joins
// (rank 1 goes straight to shrink): past the deadline the comm thread revokes the communicator
// itself and the call fails with CommTimeoutError. Then, on the shrunk communicator with a long
// deadline, rank 0 starts another allreduce nobody joins and revokes while it waits: the revoke
// does not queue behind it, and the allreduce fails with RevokedError long before the deadline.
import { finalize, init } from '../../../src/comm';
import { addonPart } from '../../../src/base/addon';
import { report } from './report';

const addon = addonPart<{ setCommTimeout(ms: number): void }>();

async function failureOf(call: Promise<void>): Promise<{ name: string; ms: number }> {
  const started = performance.now();
  try {
    await call;
    return { name: 'none', ms: performance.now() - started };
  } catch (error) {
    return { name: (error as Error).name, ms: performance.now() - started };
  }
}

async function main(): Promise<void> {
  const { world } = await init();
  await world.barrier();
  addon.setCommTimeout(Number(process.argv[2]));
  let timedOut = null;
  if (world.rank === 0) timedOut = await failureOf(world.allreduce(new Float64Array(8)));
  const shrunk = await world.shrink();
  addon.setCommTimeout(60_000);
  let revoked = null;
  if (shrunk.rank === 0) {
    const pending = failureOf(shrunk.allreduce(new Float64Array(8)));
    await shrunk.revoke();
    revoked = await pending;
  }
  const again = await shrunk.shrink();
  report({ rank: world.rank, timedOut, revoked, sizes: [shrunk.size, again.size] });
  await again.free();
  await shrunk.free();
  await world.free();
  await finalize();
}

void main();
