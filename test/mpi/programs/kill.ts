// The ranks named in argv[2] (comma-separated) SIGKILL themselves right before an allreduce; the
// survivors see the failure, revoke, shrink, agree and reduce again on the shrunk communicator.
import { finalize, init } from '../../../src/comm';
import { report } from './report';

async function main(): Promise<void> {
  const victims = process.argv[2].split(',').map(Number);
  const { world } = await init();
  await world.barrier(); // everybody is alive and in MPI here
  if (victims.includes(world.rank)) process.kill(process.pid, 'SIGKILL');

  let failure: { name: string; errorClass: number } | null = null;
  try {
    await world.allreduce(new Float64Array(1 << 16).fill(1));
  } catch (error) {
    const { name, errorClass } = error as { name: string; errorClass: number };
    failure = { name, errorClass };
  }
  await world.revoke();
  const revoked = await world.isRevoked();
  const shrunk = await world.shrink();
  const failed = await world.getFailed();
  // Each survivor clears the bit of its world rank: every one must see the same AND.
  const agreed = await shrunk.agree(~(1 << world.rank));
  const check = new Float64Array(8).fill(world.rank + 1);
  await shrunk.allreduce(check);
  report({
    worldRank: world.rank,
    failure,
    revoked,
    failed,
    agreed,
    shrunk: { rank: shrunk.rank, size: shrunk.size, worldRanks: shrunk.worldRanks },
    sum: [...check],
  });
  await shrunk.free();
  await finalize();
}

void main();
