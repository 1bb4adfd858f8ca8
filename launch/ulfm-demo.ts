// The ULFM demo (run by launch/quickstart under mpirun): every rank allreduces 1 MiB per
// iteration; one rank SIGKILLs itself at a chosen iteration; the survivors detect the failure,
// agree that the step failed, revoke, shrink, and retry the same iteration on the repaired
// communicator. The leader (lowest live rank) narrates.
//   mpirun --with-ft ulfm -n 4 node dist/launch/ulfm-demo.js [victim=2] [killAt=5] [iterations=10]
import { finalize, init, isFailure, type Communicator } from '../src/comm';

const [victim = 2, killAt = 5, iterations = 10] = process.argv.slice(2).map(Number);
const elements = (1 << 20) / 4;

function ms(since: bigint): string {
  return (Number(process.hrtime.bigint() - since) / 1e6).toFixed(2);
}

async function main(): Promise<void> {
  const session = await init();
  let comm: Communicator = session.world;
  const worldRank = comm.rank;
  const say = (line: string): void => {
    if (comm.rank === 0) console.log(`[rank ${worldRank}] ${line}`);
  };
  say(`${comm.size} ranks on ${session.library.split('\n')[0].trim()}`);
  const buffer = new Float32Array(elements);
  for (let step = 0; step < iterations;) {
    buffer.fill(1);
    if (step === killAt && worldRank === victim) process.kill(process.pid, 'SIGKILL');
    const start = process.hrtime.bigint();
    let failure: Error | null = null;
    try {
      await comm.allreduce(buffer);
    } catch (error) {
      if (!isFailure(error)) throw error;
      failure = error;
    }
    // A failure does not show up alike on every rank: agree on the outcome before acting on it.
    // agree() itself rejects on every survivor while a failure is unacknowledged.
    const ok = await comm.agree(failure ? 0 : 1).catch((error: unknown) => {
      if (!isFailure(error)) throw error;
      failure ??= error;
      return 0;
    });
    if (ok === 1) {
      say(`step ${step}: allreduce of 1 MiB over ${comm.size} ranks = ${buffer[0]} (${ms(start)} ms)`);
      step += 1;
      continue;
    }
    const detected = process.hrtime.bigint();
    await comm.revoke();
    const shrunk = await comm.shrink();
    const failed = await comm.getFailed();
    await comm.free();
    comm = shrunk;
    say(
      `step ${step}: ${failure?.name} after ${ms(start)} ms; revoke + shrink in ${ms(detected)} ms; ` +
        `lost world rank(s) ${failed.join(', ')}; ${comm.size} survivors [${comm.worldRanks.join(', ')}]; ` +
        `retrying step ${step}`,
    );
  }
  say(`done: ${iterations} steps, finished on ${comm.size} ranks`);
  await comm.free();
  await finalize();
}

void main();
