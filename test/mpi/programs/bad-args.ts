// Misuse of the binding on one rank: each attempt's error name and message, in order.
import { finalize, init, type Communicator } from '../../../src/comm';
import { addonPart } from '../../../src/base/addon';
import { report } from './report';

type Attempt = [label: string, call: () => unknown];

async function outcome(call: () => unknown): Promise<string> {
  try {
    await call();
    return 'ok';
  } catch (error) {
    return `${(error as Error).name}: ${(error as Error).message}`;
  }
}

async function main(): Promise<void> {
  const { world } = await init();
  const comm = world as unknown as Record<string, (...args: unknown[]) => unknown>;
  const f32 = new Float32Array(2);
  const attempts: Attempt[] = [
    ['string buffer', () => comm.allreduce('x')],
    ['Uint16Array buffer', () => comm.allreduce(new Uint16Array(2))],
    ['bad op', () => comm.allreduce(f32, 'prod')],
    ['root out of range', () => comm.bcast(f32, 1)],
    ['fractional root', () => comm.bcast(f32, 0.5)],
    ['mixed types', () => comm.allgather(f32, new Float64Array(2))],
    ['short recvbuf', () => comm.allgather(f32, new Float32Array(1))],
    ['counts length', () => comm.allgatherv(f32, new Float32Array(2), [2, 0])],
    ['counts vs sendbuf', () => comm.allgatherv(f32, new Float32Array(3), [3])],
    ['negative count', () => comm.alltoallv(f32, [-1], f32, [2])],
    ['counts sum', () => comm.alltoallv(f32, [1], f32, [2])],
    ['block past the end', () => comm.alltoallv(f32, [2], f32, [2], [0], [1])],
    ['agree flag', () => comm.agree(1.5)],
    ['spawn args', () => comm.spawn('node', ['a', 1], 1)],
    ['spawn count', () => comm.spawn('node', [], 0)],
    ['accept port', () => comm.accept(7, 1, 4)],
    ['spawnedUp count', () => comm.spawnedUp('port', 1.5)],
    ['init twice', () => init()],
    ['construct', () => new (addonPart<{ Communicator: new () => Communicator }>().Communicator)()],
  ];
  const errors: Record<string, string> = {};
  for (const [label, call] of attempts) errors[label] = await outcome(call);

  const dup = await world.shrink();
  await dup.free();
  errors['after free'] = await outcome(() => dup.barrier());
  await finalize();
  errors['after finalize'] = await outcome(() => world.barrier());
  errors['finalize twice'] = await outcome(() => finalize());
  report(errors);
}

void main();
