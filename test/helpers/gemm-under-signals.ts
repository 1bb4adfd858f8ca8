// Child of test/unit/kernel-signals.test.ts (binding/src/cpu/signals_held.h).
//   quiet|signals THREADS CALLS: linearBackward at a shape that takes oneDNN's sgemm, CALLS times on
//     THREADS threads; with `signals`, while a shell sends this process SIGUSR2 as fast as it can
//     (process-directed: the kernel hands each one to any thread not holding it). Prints one JSON
//     line: the signals handled and the last call's dx and dw.
//   workers THREADS: resnet8 steps at batches 64, 1 and 64 on THREADS threads (OpenMP's teams shrink
//     and grow, and libgomp starts new workers), then prints the threads started meanwhile and those
//     of them that take SIGTERM or SIGUSR2.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec } from '../../src/nn/spec';
import { randomTensor } from './gradcheck';

/** mlp's first layer at batch 64: its dx product (64 x 784 x 512) is above OpenBLAS's range. */
function linearBackwardCase() {
  const [n, i, o] = [64, 784, 512];
  return {
    x: randomTensor(n * i, 1),
    w: randomTensor(o * i, 2),
    dy: randomTensor(n * o, 3),
    dx: new Float32Array(n * i),
    dw: new Float32Array(o * i),
    db: new Float32Array(o),
    shape: [n, i, o] as [number, number, number],
  };
}

async function products(threads: number, calls: number, signals: boolean): Promise<void> {
  cpu.setThreads(threads);
  let handled = 0;
  process.on('SIGUSR2', () => {
    handled += 1;
  });
  const sender = signals
    ? spawn('bash', ['-c', `while kill -USR2 ${process.pid} 2>/dev/null; do :; done`], { stdio: 'ignore' })
    : undefined;
  const c = linearBackwardCase();
  for (let call = 0; call < calls; ++call) {
    cpu.linearBackward(c.x, c.w, c.dy, c.dx, c.dw, c.db, c.shape);
    if (call % 20 === 19) await new Promise((resolve) => setImmediate(resolve)); // lets the handler run
  }
  sender?.kill('SIGKILL');
  console.log(JSON.stringify({ handled, dx: Array.from(c.dx), dw: Array.from(c.dw) }));
}

function threadIds(): string[] {
  return fs.readdirSync('/proc/self/task');
}

/** Whether thread `tid` blocks signal `signal` (its SigBlk mask in /proc). */
function blocks(tid: string, signal: number): boolean {
  const status = fs.readFileSync(`/proc/self/task/${tid}/status`, 'utf8');
  const mask = BigInt(`0x${/^SigBlk:\s*([0-9a-f]+)$/m.exec(status)![1]}`);
  return (mask & (1n << BigInt(signal - 1))) !== 0n;
}

function workers(threads: number): void {
  const before = new Set(threadIds());
  cpu.setThreads(threads);
  const net = new Net(loadSpec('models/resnet8.json'), cpu);
  net.init(1);
  for (const batch of [64, 1, 64]) {
    const x = randomTensor(batch * net.inputSize, batch);
    const labels = Int32Array.from({ length: batch }, (_, i) => i % net.spec.classes);
    net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step: 0, shard: 0 });
  }
  const started = threadIds().filter((tid) => !before.has(tid));
  const takingSignals = started.filter((tid) => !blocks(tid, 15) || !blocks(tid, 12));
  console.log(JSON.stringify({ started: started.length, takingSignals }));
}

const [mode, threads, calls] = process.argv.slice(2);
if (mode === 'workers') workers(Number(threads));
else void products(Number(threads), Number(calls), mode === 'signals');
