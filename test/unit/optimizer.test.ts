// The optimizers' kernels: AdamW against a float32 transcription of PyTorch's formula (bit for bit)
// and a double-precision reference (to float accuracy), its first step's known size, and the
// replay kernels that sharded state rebuilds a lost chunk with: update() and stateInput() +
// replay() must leave the state with the same bits, for SGD and AdamW.
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Optimizer, type OptimizerSettings } from '../../src/solver/optimizer';
import { randomTensor } from '../helpers/gradcheck';

const f = Math.fround;
const adamw: OptimizerSettings = { name: 'adamw', momentum: 0, weightDecay: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8 };
const sgd: OptimizerSettings = { name: 'sgd', momentum: 0.9, weightDecay: 5e-4, beta1: 0, beta2: 0, eps: 0 };

/** PyTorch's single-tensor AdamW in float32 ops (scalars worked out in double, then rounded). */
function adamwFloat32(
  p: Float32Array,
  g: Float32Array,
  m: Float32Array,
  v: Float32Array,
  lr: number,
  s: OptimizerSettings,
  t: number,
): void {
  const keep = f(1 - lr * s.weightDecay);
  const stepSize = f(-(lr / (1 - s.beta1 ** t)));
  const c2 = f(Math.sqrt(1 - s.beta2 ** t));
  const [b1, ob1, b2, ob2, eps] = [f(s.beta1), f(1 - s.beta1), f(s.beta2), f(1 - s.beta2), f(s.eps)];
  for (let i = 0; i < p.length; ++i) {
    p[i] = f(p[i] * keep);
    m[i] = f(f(b1 * m[i]) + f(ob1 * g[i]));
    v[i] = f(f(b2 * v[i]) + f(f(ob2 * g[i]) * g[i]));
    const denom = f(f(f(Math.sqrt(v[i])) / c2) + eps);
    p[i] = f(p[i] + f(stepSize * f(m[i] / denom)));
  }
}

describe('optimizers', () => {
  const n = 1000;

  it("AdamW matches PyTorch's formula in float32 bit for bit over 5 steps, and a double reference to 1e-5", () => {
    const p = randomTensor(n, 1);
    const [m, v] = [new Float32Array(n), new Float32Array(n)];
    const [pr, mr, vr] = [p.slice(), m.slice(), v.slice()];
    const pd = Float64Array.from(p);
    const [md, vd] = [new Float64Array(n), new Float64Array(n)];
    const opt = new Optimizer(adamw, cpu);
    for (let step = 0; step < 5; ++step) {
      const g = randomTensor(n, 10 + step);
      const lr = 0.001 * (step + 1);
      opt.update(p, g, [m, v], lr, step);
      adamwFloat32(pr, g, mr, vr, lr, adamw, step + 1);
      const t = step + 1;
      for (let i = 0; i < n; ++i) {
        pd[i] *= 1 - lr * adamw.weightDecay;
        md[i] = 0.9 * md[i] + 0.1 * g[i];
        vd[i] = 0.999 * vd[i] + 0.001 * g[i] * g[i];
        pd[i] -= ((lr / (1 - 0.9 ** t)) * md[i]) / (Math.sqrt(vd[i]) / Math.sqrt(1 - 0.999 ** t) + 1e-8);
      }
      assert.deepEqual([p, m, v], [pr, mr, vr], `step ${step}`);
    }
    let worst = 0;
    for (let i = 0; i < n; ++i) worst = Math.max(worst, Math.abs(p[i] - pd[i]) / Math.max(1e-3, Math.abs(pd[i])));
    assert.ok(worst < 1e-5, `relative error ${worst}`);
  });

  it("AdamW's first step moves each parameter by lr against its gradient's sign (bias correction), after the decoupled decay", () => {
    const p = randomTensor(n, 2);
    const before = p.slice();
    const g = randomTensor(n, 3);
    new Optimizer(adamw, cpu).update(p, g, [new Float32Array(n), new Float32Array(n)], 0.01, 0);
    for (let i = 0; i < n; ++i) {
      if (Math.abs(g[i]) < 1e-3) continue;
      const moved = p[i] - before[i] * (1 - 0.01 * adamw.weightDecay);
      assert.ok(Math.abs(moved + 0.01 * Math.sign(g[i])) < 1e-6, `element ${i}: moved ${moved} for g ${g[i]}`);
    }
  });

  for (const settings of [sgd, adamw]) {
    it(`${settings.name}: stateInput then replay leaves the state with update()'s bits`, () => {
      const opt = new Optimizer(settings, cpu);
      const p = randomTensor(n, 4);
      const state = opt.slots.map((_, k) => randomTensor(n, 20 + k).map(Math.abs));
      const replayed = state.map((s) => s.slice());
      const g = randomTensor(n, 5);
      const input = opt.stateInput(p, g, new Float32Array(n)).slice();
      opt.update(p, g, state, 0.05, 3);
      opt.replay(replayed, input);
      assert.deepEqual(replayed, state);
    });

    it(`${settings.name}: the update out of place gives the in-place bits and leaves its inputs as they were`, () => {
      // decayed ranges too: AdamW's update goes piece by piece there
      const opt = new Optimizer(settings, cpu, [[100, 700]]);
      const p = randomTensor(n, 6);
      const g = randomTensor(n, 7);
      const state = opt.slots.map((_, k) => randomTensor(n, 30 + k).map(Math.abs));
      const [pBefore, stateBefore] = [p.slice(), state.map((s) => s.slice())];
      const out = { params: new Float32Array(n), state: opt.slots.map(() => new Float32Array(n)) };
      opt.update(p, g, state, 0.05, 3, 0, out);
      assert.deepEqual([p, state], [pBefore, stateBefore]);
      opt.update(p, g, state, 0.05, 3);
      assert.deepEqual([out.params, out.state], [p, state]);
      assert.notDeepEqual(p, pBefore);
    });
  }

  it('an out-of-place update takes all its outputs or none', () => {
    const a = new Float32Array(4);
    assert.throws(() => cpu.sgdUpdate(a, a, a, 0.1, 0.9, 0, a), { message: 'sgdUpdate: expected all 2 output arrays or none, got 1' });
    assert.throws(() => cpu.adamwUpdate(a, a, a, a, 0.1, 0.9, 0.999, 1e-8, 0, 1, a, new Float32Array(3), a), {
      message: 'adamwUpdate: expected mOut to be a Float32Array of 4 elements, got Float32Array of 3',
    });
  });

  it('AdamW refuses a step below 1 and betas outside [0, 1)', () => {
    const a = new Float32Array(4);
    assert.throws(() => cpu.adamwUpdate(a, a, a, a, 0.1, 0.9, 0.999, 1e-8, 0, 0), {
      message: 'adamwUpdate: expected step to be an integer >= 1, got 0.000000',
    });
    assert.throws(() => cpu.adamwUpdate(a, a, a, a, 0.1, 1, 0.999, 1e-8, 0, 1), {
      message: 'adamwUpdate: expected beta1 in [0, 1), got 1.000000',
    });
  });
});
