// Signals during oneDNN's sgemm (see binding/src/cpu/signals_held.h): a rank is sent signals while
// it computes (a SIGTERM to checkpoint and stop, a profiler's SIGPROF), and oneDNN 2.6's sgemm kept
// data where a handler on its thread overwrote it. Thousands of signals during products on one and
// two threads: the process lives and its gradients are the bits of a quiet run.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { cpu } from '../../src/nn/cpu';
import { linearBackwardCase } from '../helpers/gemm-under-signals';

const child = path.join(__dirname, '..', 'helpers', 'gemm-under-signals.js');

describe('oneDNN sgemm under signals', function () {
  this.timeout(120_000);
  for (const threads of [1, 2]) {
    it(`${threads} thread(s): 1500 products under a stream of SIGUSR2 end with the quiet run's bits`, () => {
      cpu.setThreads(threads);
      const quiet = linearBackwardCase();
      cpu.linearBackward(quiet.x, quiet.w, quiet.dy, quiet.dx, quiet.dw, quiet.db, quiet.shape);
      cpu.setThreads(1);
      const run = spawnSync(process.execPath, [child, String(threads), '1500'], { encoding: 'utf8', timeout: 100_000, maxBuffer: 1 << 30 });
      assert.equal(run.status, 0, `the child ended with ${run.status ?? run.signal}: ${run.stderr}`);
      const result = JSON.parse(run.stdout) as { handled: number; dx: number[]; dw: number[] };
      assert.ok(result.handled >= 20, `only ${result.handled} signals handled`);
      assert.deepEqual(Float32Array.from(result.dx), quiet.dx);
      assert.deepEqual(Float32Array.from(result.dw), quiet.dw);
    });
  }
});
