// Signals during the CPU kernels (binding/src/cpu/signals_held.h): a rank is sent signals while it
// computes (a SIGTERM to checkpoint and stop, a profiler's SIGPROF), and oneDNN 2.6's GEMM points
// the stack pointer into the heap while it runs, so a handler on its thread corrupted the heap.
// Each case runs in a child process (its thread count and pinning stay there).
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';

const child = path.join(__dirname, '..', 'helpers', 'gemm-under-signals.js');
const root = path.join(__dirname, '..', '..', '..');

function run(...args: string[]): Record<string, unknown> {
  const result = spawnSync(process.execPath, [child, ...args], { cwd: root, encoding: 'utf8', timeout: 100_000, maxBuffer: 1 << 30 });
  assert.equal(result.status, 0, `the child (${args.join(' ')}) ended with ${result.status ?? result.signal}: ${result.stderr}`);
  return JSON.parse(result.stdout) as Record<string, unknown>;
}

describe('CPU kernels under signals', function () {
  this.timeout(120_000);
  for (const threads of ['1', '2']) {
    it(`${threads} thread(s): 1500 sgemm products under a stream of SIGUSR2 end with the quiet run's bits`, () => {
      const quiet = run('quiet', threads, '1');
      const loud = run('signals', threads, '1500');
      assert.ok((loud.handled as number) >= 20, `only ${loud.handled} signals handled`);
      assert.deepEqual(loud.dx, quiet.dx);
      assert.deepEqual(loud.dw, quiet.dw);
    });
  }

  it("OpenMP's workers, whenever libgomp starts them (teams shrinking and growing), never take SIGTERM or SIGUSR2", () => {
    const result = run('workers', '4');
    assert.ok((result.started as number) >= 3, `only ${result.started} threads started: no OpenMP workers to check`);
    assert.deepEqual(result.takingSignals, []);
  });
});
