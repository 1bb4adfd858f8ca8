// Nets built from model specs: parameter counts, gradients of every layer type against finite
// differences, the same bits from the same seed, and one-line errors for bad specs.
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec, parseSpec } from '../../src/nn/spec';
import { checkGradient, randomTensor } from '../helpers/gradcheck';

const key = { seed: 7, epoch: 1, step: 3, shard: 2 };

function batchFor(net: Net, batch: number, seed: number): { x: Float32Array; labels: Int32Array } {
  const labels = Int32Array.from({ length: batch }, (_, i) => (i * 7 + seed) % net.spec.classes);
  return { x: randomTensor(batch * net.inputSize, seed), labels };
}

describe('Net', function () {
  this.timeout(60_000);

  it('builds the models with their known parameter counts', () => {
    const counts = Object.fromEntries(
      ['mlp', 'lenet', 'lenet5', 'cifarnet'].map((name) => [name, new Net(loadSpec(`models/${name}.json`), cpu).params.data.length]),
    );
    assert.deepEqual(counts, {
      mlp: 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10, // 669,706
      lenet: 520 + 25050 + 400500 + 5010, // 431,080 (Caffe's LeNet)
      lenet5: 156 + 2416 + 400 * 120 + 120 + 120 * 84 + 84 + 850, // 61,706
      cifarnet: 2432 + 25632 + 51264 + 1024 * 64 + 64 + 650, // 145,578 (cifar10_quick)
    });
  });

  it('gradients of every layer type match finite differences', () => {
    const spec = parseSpec(
      'tiny.json',
      JSON.stringify({
        input: [2, 8, 8],
        classes: 3,
        layers: [
          { type: 'conv', filters: 3, kernel: 3, pad: 1 },
          { type: 'relu' },
          { type: 'maxpool', kernel: 2 },
          { type: 'conv', filters: 4, kernel: 3, stride: 2, pad: 1 },
          { type: 'avgpool', kernel: 2 },
          { type: 'flatten' },
          { type: 'dropout', p: 0.25 },
          { type: 'linear', outputs: 5 },
          { type: 'relu' },
          { type: 'linear', outputs: 3 },
        ],
      }),
    );
    const net = new Net(spec, cpu);
    net.init(3);
    const { x, labels } = batchFor(net, 4, 11);
    net.lossAndGradient(x, labels, 4, key);
    const analytic = Float32Array.from(net.params.gradients);
    const loss = (): number => net.lossAndGradient(x, labels, 4, key).loss;
    for (const view of net.params.views) {
      checkGradient(view.name, net.params.param(view), analytic.subarray(view.offset, view.offset + view.length), loss, {
        eps: 1e-3,
        tolerance: 2e-3,
        samples: 12,
      });
    }
  });

  for (const name of ['mlp', 'lenet', 'lenet5', 'cifarnet']) {
    it(`${name}: the same seed gives the same bits, another seed others`, () => {
      const run = (seed: number): Buffer[] => {
        const net = new Net(loadSpec(`models/${name}.json`), cpu);
        net.init(seed);
        const { x, labels } = batchFor(net, 8, 5);
        const { loss } = net.lossAndGradient(x, labels, 8, key);
        const bytes = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
        return [bytes(net.params.data), bytes(net.params.gradients), Buffer.from(Float64Array.of(loss).buffer)];
      };
      const [a, b, c] = [run(1), run(1), run(2)];
      a.forEach((buffer, i) => assert.ok(buffer.equals(b[i]), `part ${i} differs between identical runs`));
      assert.ok(!a[0].equals(c[0]), 'seed 2 gave the same parameters as seed 1');
    });
  }

  it('dropout masks depend on the batch key, not on call order', () => {
    const spec = parseSpec(
      'd.json',
      JSON.stringify({
        input: [1, 4, 4],
        classes: 16,
        layers: [{ type: 'flatten' }, { type: 'dropout', p: 0.5 }],
      }),
    );
    const net = new Net(spec, cpu);
    const x = new Float32Array(16).fill(1);
    const maskFor = (k: typeof key): number[] => [...net.forward(x, 1, true, k)];
    const first = maskFor(key);
    maskFor({ ...key, step: 4 });
    assert.deepEqual(maskFor(key), first);
    assert.notDeepEqual(maskFor({ ...key, shard: 3 }), first);
    assert.ok(first.every((v) => v === 0 || v === 2));
    assert.deepEqual([...net.forward(x, 1, false, key)], [...x]);
  });

  it('rejects bad specs with one line naming the file, the layer and the problem', () => {
    const build = (spec: object): unknown => new Net(parseSpec('m.json', JSON.stringify(spec)), cpu);
    const base = { input: [1, 28, 28], classes: 10 };
    const cases: Array<[object | string, string]> = [
      [
        { ...base, layers: [{ type: 'convolution', filters: 2, kernel: 3 }] },
        'm.json: layer 1 (convolution1): unknown type "convolution"; expected one of conv, maxpool, avgpool, linear, relu, flatten, dropout, batchnorm, layernorm, embedding, attention, gelu, lmhead, globalavgpool, add, concat',
      ],
      [{ ...base, layers: [{ type: 'conv', name: 'c1', kernel: 3 }] }, 'm.json: layer 1 (c1): missing field "filters"'],
      [
        { ...base, layers: [{ type: 'conv', filters: 2, kernel: 0 }] },
        'm.json: layer 1 (conv1): "kernel" must be a positive integer, got 0',
      ],
      [{ ...base, layers: [{ type: 'linear', outputs: 10, bias: false }] }, 'm.json: layer 1 (linear1): unknown field "bias" for linear'],
      [
        { ...base, layers: [{ type: 'flatten' }, { type: 'conv', filters: 2, kernel: 3 }] },
        'm.json: layer 2 (conv2): expects a [C, H, W] input, got [784]',
      ],
      [
        { ...base, layers: [{ type: 'conv', name: 'big', filters: 2, kernel: 29 }] },
        'm.json: layer 1 (big): kernel 29 does not fit the 28x28 input (pad 0)',
      ],
      [
        { ...base, layers: [{ type: 'linear', name: 'out', outputs: 12 }] },
        'm.json: layer 1 (out): outputs 12 values but the model has 10 classes',
      ],
      [
        { ...base, input: [28, 28], layers: [] },
        'm.json: "input" must be [F] or [C, H, W], positive integers (or a language model\'s "context" and "vocab")',
      ],
    ];
    for (const [spec, message] of cases) assert.throws(() => build(spec as object), { name: 'SpecError', message });
    assert.throws(() => parseSpec('m.json', '{"input": [1,'), { name: 'SpecError', message: /^m\.json: not valid JSON/ });
    assert.throws(() => loadSpec('models/nope.json'), {
      name: 'SpecError',
      message: 'models/nope.json: cannot read the model spec (ENOENT)',
    });
  });
});
