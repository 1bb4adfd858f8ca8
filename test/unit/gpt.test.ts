// The GPT-style language model's layers as a whole net: loss and every tensor's gradient against
// PyTorch's on the same weights and token windows (test/fixtures/gpt_pytorch.py wrote them), against
// central finite differences, the same bits run after run; the spec's checks; sampling; the
// training pieces it needs (warm-up, AdamW's decay of matrices only).
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { sampleTokens } from '../../src/nn/sample';
import { loadSpec, parseSpec } from '../../src/nn/spec';
import { learningRate, withWarmup } from '../../src/solver/lr-schedule';
import { matrixRanges, Optimizer } from '../../src/solver/optimizer';
import { checkGradient } from '../helpers/gradcheck';

const root = path.join(__dirname, '..', '..', '..');

interface Reference {
  spec: unknown;
  windows: number[];
  batch: number;
  weights: Record<string, number[]>;
  loss: number;
  gradients: Record<string, number[]>;
}

const reference = JSON.parse(fs.readFileSync(path.join(root, 'test', 'fixtures', 'gpt_pytorch.json'), 'utf8')) as Reference;
const key = { seed: 1, epoch: 0, step: 0, shard: 0 };

function referenceNet(): { net: Net; x: Float32Array } {
  const net = new Net(parseSpec('gpt-reference', JSON.stringify(reference.spec)), cpu);
  for (const view of net.params.views) net.params.param(view).set(reference.weights[view.name]);
  return { net, x: Float32Array.from(reference.windows) };
}

describe('GPT layers', function () {
  this.timeout(60_000);
  afterEach(() => cpu.setThreads(1));

  it("gives PyTorch's loss and gradients on the same weights and windows (within 2e-5, relative to each tensor's largest)", () => {
    const { net, x } = referenceNet();
    const { loss } = net.lossAndGradient(x, new Int32Array(reference.batch), reference.batch, key);
    assert.ok(Math.abs(loss - reference.loss) < 2e-6 * reference.loss, `loss ${loss} vs PyTorch's ${reference.loss}`);
    assert.equal(net.params.views.length, Object.keys(reference.gradients).length);
    for (const view of net.params.views) {
      const ours = net.params.grad(view);
      const theirs = reference.gradients[view.name];
      const scale = Math.max(...theirs.map(Math.abs));
      let worst = 0;
      for (let i = 0; i < ours.length; ++i) worst = Math.max(worst, Math.abs(ours[i] - theirs[i]));
      assert.ok(worst <= 2e-5 * scale, `${view.name}: gradient off by ${worst} (largest ${scale})`);
    }
  });

  it('matches central finite differences in every tensor', () => {
    const { net, x } = referenceNet();
    net.lossAndGradient(x, new Int32Array(reference.batch), reference.batch, key);
    const analytic = Float32Array.from(net.params.gradients);
    const loss = (): number => net.evaluate(x, new Int32Array(reference.batch), reference.batch).loss;
    for (const view of net.params.views) {
      const from = view.offset;
      checkGradient(view.name, net.params.param(view), analytic.subarray(from, from + view.length), loss, {
        eps: 1e-2,
        tolerance: 2e-3,
        samples: 6,
      });
    }
  });

  // oneDNN's matrix products split their sums by thread: --threads stays part of a run's identity
  it('gives the same bits run after run, at 1 thread and at 2', () => {
    const run = (threads: number): Float32Array => {
      cpu.setThreads(threads);
      const net = new Net(loadSpec(path.join(root, 'models', 'gpt-tiny.json')), cpu);
      net.init(3);
      const T = net.spec.language!.context;
      const x = Float32Array.from({ length: 2 * (T + 1) }, (_, i) => (i * 7919) % 113);
      net.lossAndGradient(x, new Int32Array(2), 2, key);
      return Float32Array.from(net.params.gradients);
    };
    for (const threads of [1, 2]) assert.deepEqual(Buffer.from(run(threads).buffer), Buffer.from(run(threads).buffer));
  });

  it('keys dropout by the shard, not by where it runs: another shard, other bits; the same shard, the same', () => {
    const net = new Net(loadSpec(path.join(root, 'models', 'gpt-tiny.json')), cpu);
    net.init(3);
    const x = Float32Array.from({ length: 257 }, (_, i) => (i * 31) % 113);
    const loss = (shard: number): number => net.lossAndGradient(x, new Int32Array(1), 1, { ...key, shard }).loss;
    assert.equal(loss(0), loss(0));
    assert.notEqual(loss(1), loss(0));
  });

  it('refuses a bad language-model spec in one line', () => {
    const spec =
      (fields: string, layers: string): (() => unknown) =>
      () =>
        new Net(parseSpec('m.json', `{${fields}, "layers": [${layers}]}`), cpu);
    const embed = '{"type": "embedding", "name": "e", "dim": 8}';
    assert.throws(spec('"context": 4, "vocab": 5, "input": [5]', embed), {
      message: 'm.json: a language model names "context" and "vocab" instead of "input" and "classes", not both',
    });
    assert.throws(spec('"context": 4, "vocab": 1', embed), {
      message: 'm.json: "vocab" must be an integer >= 2 (the token ids, 0 to vocab - 1)',
    });
    assert.throws(spec('"input": [5], "classes": 5', embed), {
      message: 'm.json: layer 1 (e): embedding belongs to a language model (a spec with "context" and "vocab")',
    });
    assert.throws(spec('"context": 4, "vocab": 5', `${embed}, {"type": "attention", "name": "a", "heads": 2}`), {
      message: 'm.json: layer 2 (a): expects queries, keys and values side by side ([T, 3C]), got 8 values per position',
    });
    assert.throws(
      spec(
        '"context": 4, "vocab": 5',
        `${embed}, {"type": "linear", "name": "q", "outputs": 24}, {"type": "attention", "name": "a", "heads": 3}`,
      ),
      { message: 'm.json: layer 3 (a): 3 heads do not divide the width 8' },
    );
    assert.throws(spec('"context": 4, "vocab": 5', `${embed}, {"type": "lmhead", "name": "h", "embedding": "x"}`), {
      message: 'm.json: layer 2 (h): "embedding": "x" is no earlier layer\'s name',
    });
    assert.throws(spec('"context": 4, "vocab": 5', `${embed}, {"type": "linear", "name": "o", "outputs": 6}`), {
      message: 'm.json: layer 2 (o): outputs [4, 6] but a language model outputs [context, vocab] = [4, 5]',
    });
  });

  it('samples the same tokens for a seed, others for another seed, and the most likely ones at temperature 0', () => {
    const net = new Net(loadSpec(path.join(root, 'models', 'gpt-tiny.json')), cpu);
    net.init(5);
    const settings = { prompt: [10, 20, 30], tokens: 12, temperature: 1, seed: 4, vocabulary: 113 };
    const first = sampleTokens(net, settings);
    assert.equal(first.length, 12);
    assert.ok(first.every((id) => id >= 0 && id < 113));
    assert.deepEqual(sampleTokens(net, settings), first);
    assert.notDeepEqual(sampleTokens(net, { ...settings, seed: 5 }), first);
    // greedy: each token is the argmax of the logits at the last position of what came before
    const greedy = sampleTokens(net, { ...settings, temperature: 0, tokens: 3 });
    const window = new Float32Array(257);
    window.set([10, 20, 30]);
    const logits = net.forward(window, 1, false, key).subarray(2 * 256, 2 * 256 + 113);
    assert.equal(greedy[0], logits.indexOf(Math.max(...logits)));
  });
});

describe('Training pieces for transformers', () => {
  it('warms up linearly, then runs the schedule over the steps after the warm-up', () => {
    const schedule = withWarmup({ kind: 'cosine' }, 10);
    assert.deepEqual(
      [0, 4, 9].map((s) => learningRate(schedule, 1e-3, s, 110)),
      [1e-4, 5e-4, 1e-3],
    );
    assert.equal(learningRate(schedule, 1e-3, 10, 110), 1e-3);
    assert.equal(learningRate(schedule, 1e-3, 60, 110), 0.5 * 1e-3 * (1 + Math.cos(Math.PI * 0.5)));
    assert.deepEqual(withWarmup({ kind: 'constant' }, 0), { kind: 'constant' });
  });

  it("applies AdamW's weight decay to matrices only, the same bits over any split of the parameters", () => {
    const views = [
      { offset: 0, shape: [3, 4] },
      { offset: 12, shape: [4] },
      { offset: 16, shape: [2, 2] },
      { offset: 20, shape: [5] },
    ];
    assert.deepEqual(matrixRanges(views), [
      [0, 12],
      [16, 20],
    ]);
    const settings = { name: 'adamw' as const, momentum: 0, weightDecay: 0.5, beta1: 0.9, beta2: 0.999, eps: 1e-8 };
    const optimizer = new Optimizer(settings, cpu, matrixRanges(views));
    const run = (cuts: number[]): Float32Array => {
      const p = Float32Array.from({ length: 25 }, () => 1);
      const g = new Float32Array(25); // no gradient: only the decay moves a parameter
      const [m, v] = [new Float32Array(25), new Float32Array(25)];
      const bounds = [0, ...cuts, 25];
      for (let k = 0; k + 1 < bounds.length; ++k) {
        const [a, b] = [bounds[k], bounds[k + 1]];
        optimizer.update(p.subarray(a, b), g.subarray(a, b), [m.subarray(a, b), v.subarray(a, b)], 0.1, 0, a);
      }
      return p;
    };
    const whole = run([]);
    const decayed = Math.fround(1 - 0.1 * 0.5);
    assert.deepEqual(Array.from(whole), [...Array(12).fill(decayed), 1, 1, 1, 1, ...Array(4).fill(decayed), 1, 1, 1, 1, 1]);
    assert.deepEqual(run([5, 13, 17, 21]), whole);
  });
});
