// Child of test/unit/kernel-signals.test.ts: linearBackward at a shape that takes oneDNN's sgemm,
// `calls` times on `threads` threads, while a shell sends this process SIGUSR2 as fast as it can
// (process-directed: the kernel hands each one to any thread not holding it). Prints one JSON line:
// the signals this process handled and the last call's dx and dw.
import { spawn } from 'node:child_process';
import { cpu } from '../../src/nn/cpu';
import { randomTensor } from './gradcheck';

/** mlp's first layer at batch 64: its dx product (64 x 784 x 512) is above OpenBLAS's range. */
export function linearBackwardCase() {
  const [n, i, o] = [64, 784, 512];
  return {
    x: randomTensor(n * i, 1), w: randomTensor(o * i, 2), dy: randomTensor(n * o, 3),
    dx: new Float32Array(n * i), dw: new Float32Array(o * i), db: new Float32Array(o), shape: [n, i, o] as [number, number, number],
  };
}

async function main(): Promise<void> {
  const [threads, calls] = process.argv.slice(2).map(Number);
  cpu.setThreads(threads);
  let handled = 0;
  process.on('SIGUSR2', () => { handled += 1; });
  const sender = spawn('bash', ['-c', `while kill -USR2 ${process.pid} 2>/dev/null; do :; done`], { stdio: 'ignore' });
  const c = linearBackwardCase();
  for (let call = 0; call < calls; ++call) {
    cpu.linearBackward(c.x, c.w, c.dy, c.dx, c.dw, c.db, c.shape);
    if (call % 20 === 19) await new Promise((resolve) => setImmediate(resolve));  // lets the handler run
  }
  sender.kill('SIGKILL');
  console.log(JSON.stringify({ handled, dx: Array.from(c.dx), dw: Array.from(c.dw) }));
}

if (require.main === module) void main();
