// The CPU kernels' instruction-set level: what the ranks agree on (chooseLevel), and what pinning
// does in a process (children, kernel-bits.ts: a process pins one level for its life). Pinned, the
// environment variables that steer oneDNN and OpenBLAS change no bit, and a rank limited to a lower
// level computes what an unlimited one computes at that level; another level gives other bits.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { cpuLevels, type CpuLevel } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import { chooseLevel, KernelLevelRefusal, levelAsked } from '../../src/rank/kernel-level';
import { kernelBits } from '../helpers/kernel-bits';

/** What makes the libraries pick other kernels when they choose for themselves. */
const steering = {
  OPENBLAS_CORETYPE: 'Prescott',
  OPENBLAS_L2_SIZE: '65536',
  ONEDNN_MAX_CPU_ISA: 'SSE41',
  DNNL_MAX_CPU_ISA: 'SSE41',
  ONEDNN_CPU_ISA_HINTS: 'PREFER_YMM',
  ONEDNN_DEFAULT_FPMATH_MODE: 'BF16',
};

describe("the kernels' instruction-set level", function () {
  this.timeout(180_000);

  describe('chooseLevel: the level the ranks agree on', () => {
    const ids = [0, 1, 2, 3];
    const refusal = (fn: () => unknown): KernelLevelRefusal => {
      try {
        fn();
      } catch (error) {
        assert.ok(error instanceof KernelLevelRefusal, String(error));
        return error;
      }
      assert.fail('no refusal');
    };

    it('auto: the best level every rank runs; native: nothing pinned', () => {
      assert.equal(chooseLevel(levelAsked('auto'), ['x86-64-v4', 'x86-64-v3', 'x86-64-v4', 'x86-64-v2'], ids), 'x86-64-v2');
      assert.equal(chooseLevel(levelAsked('auto'), ['x86-64-v4', 'x86-64-v4'], [0, 1]), 'x86-64-v4');
      assert.equal(chooseLevel(levelAsked('native'), ['x86-64-v4', 'x86-64-v2'], [0, 1]), 'native');
      assert.equal(chooseLevel(levelAsked('x86-64-v2'), ['x86-64-v4', 'x86-64-v3'], [0, 1]), 'x86-64-v2');
    });

    it('a level some rank cannot run: one line naming the ranks, printed by the lowest', () => {
      const r = refusal(() => chooseLevel(levelAsked('x86-64-v4'), ['x86-64-v4', 'x86-64-v3', 'x86-64-v4', 'x86-64-v2'], [3, 5, 6, 8]));
      assert.equal(
        r.message,
        '--isa x86-64-v4 needs x86-64-v4, but the hosts of ranks 5, 8 run up to x86-64-v3 or x86-64-v2: ' +
          'run on hosts that have x86-64-v4, or pass --isa x86-64-v2 (or auto)',
      );
      assert.equal(r.printer, 3);
    });

    it("a resume at the checkpoint's level, which a rank cannot run", () => {
      const asked = levelAsked('auto', { dir: 'runs/a/ckpt/step-00000010', level: 'x86-64-v3' });
      assert.deepEqual(asked.level, 'x86-64-v3');
      const r = refusal(() => chooseLevel(asked, ['x86-64-v3', 'x86-64-v2'], [0, 1]));
      assert.equal(
        r.message,
        'runs/a/ckpt/step-00000010, computed at x86-64-v3, needs x86-64-v3, but the host of rank 1 runs up to x86-64-v2: ' +
          'run on hosts that have x86-64-v3',
      );
      // an explicit --isa on a resume is checked against the checkpoint before (checkConfig)
      assert.equal(levelAsked('x86-64-v2', { dir: 'd', level: 'x86-64-v3' }).level, 'x86-64-v2');
    });

    it('a rank that could not tell its level prints its own error', () => {
      const r = refusal(() => chooseLevel(levelAsked('auto'), ['x86-64-v3', null, null], [0, 1, 2]));
      assert.deepEqual([r.message, r.printer], ['', 1]);
    });
  });

  describe('pinned in a process', () => {
    const host = cpu.hostLevel() as CpuLevel;
    const lowest = cpuLevels[0];

    it('the environment that steers oneDNN and OpenBLAS changes no bit, nor the kernels they run', () => {
      const plain = kernelBits(host, Object.fromEntries(Object.keys(steering).map((name) => [name, undefined])));
      const steered = kernelBits(host, steering);
      assert.deepEqual(steered, plain);
      const expected = { 'x86-64-v2': ['sse41', 'Nehalem'], 'x86-64-v3': ['avx2', 'Haswell'], 'x86-64-v4': ['avx512_core', 'SkylakeX'] }[
        host as Exclude<CpuLevel, 'native'>
      ];
      assert.deepEqual([plain.kernels.level, plain.kernels.onednnIsa, plain.kernels.openblasCore], [host, ...expected]);
    });

    it(`a process limited to ${lowest} (FT_CPU_LEVEL_MAX) computes what an unlimited one computes there; the levels differ`, function () {
      if (host === lowest) this.skip();
      const limited = kernelBits('-', { FT_CPU_LEVEL_MAX: lowest, ...steering });
      assert.equal(limited.kernels.level, lowest);
      assert.deepEqual(kernelBits(lowest), limited);
      // another level, other bits: the checks above could fail
      const best = kernelBits(host);
      assert.notDeepEqual(best.chain, limited.chain);
      assert.notDeepEqual(best.norm, limited.norm);
    });

    it('refuses a level the host does not run, a second level, and a bad limit, in one line each', () => {
      const run = (code: string, env: Record<string, string> = {}): string => {
        const child = spawnSync(
          process.execPath,
          ['-e', `const { cpu } = require('./dist/src/nn/cpu'); try { ${code} } catch (e) { console.log(e.message); }`],
          { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 30_000 },
        );
        assert.equal(child.status, 0, child.stderr);
        return child.stdout.trim();
      };
      assert.equal(run("cpu.pinLevel('x86-64-v3')", { FT_CPU_LEVEL_MAX: 'x86-64-v2' }), 'this host runs up to x86-64-v2, not x86-64-v3');
      assert.equal(
        run(`cpu.pinLevel('${lowest}'); cpu.pinLevel('native')`),
        `the CPU kernels run at ${lowest} already: a process cannot change to native`,
      );
      // a kernel run first pins the host's level
      assert.equal(
        run("cpu.reluForward(new Float32Array(1), new Float32Array(1)); cpu.pinLevel('x86-64-v2'); console.log('same')", {
          FT_CPU_LEVEL_MAX: 'x86-64-v2',
        }),
        'same',
      );
      assert.equal(
        run('cpu.hostLevel()', { FT_CPU_LEVEL_MAX: 'v3' }),
        "FT_CPU_LEVEL_MAX must be one of x86-64-v2, x86-64-v3, x86-64-v4, got 'v3'",
      );
      assert.equal(run('cpu.pinLevel(3)'), 'pinLevel: expected level to be one of x86-64-v2, x86-64-v3, x86-64-v4 or native, got number 3');
    });
  });
});
