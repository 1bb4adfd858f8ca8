// Graph specs and the layers that come with them (batchnorm, layernorm, globalavgpool, add, concat):
// gradients against finite differences, the same bits from the same seed, one-line errors for bad
// graphs, and chain specs giving the same bits as before graphs existed.
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec, parseSpec } from '../../src/nn/spec';
import { checkGradient, randomTensor } from '../helpers/gradcheck';

const key = { seed: 7, epoch: 1, step: 3, shard: 2 };

function netOf(spec: object): Net {
  return new Net(parseSpec('g.json', JSON.stringify(spec)), cpu);
}

function batchFor(net: Net, batch: number, seed: number): { x: Float32Array; labels: Int32Array } {
  const labels = Int32Array.from({ length: batch }, (_, i) => (i * 7 + seed) % net.spec.classes);
  return { x: randomTensor(batch * net.inputSize, seed), labels };
}

// Each spec puts the layer under test between layers with parameters, so that its input gradient is checked too.
const specs: Record<string, object> = {
  'batchnorm [C, H, W]': { input: [2, 5, 5], classes: 3, layers: [
    { type: 'conv', filters: 3, kernel: 3, pad: 1 }, { type: 'batchnorm' }, { type: 'relu' },
    { type: 'flatten' }, { type: 'linear', outputs: 3 }] },
  'batchnorm [F]': { input: [6], classes: 3, layers: [
    { type: 'linear', outputs: 5 }, { type: 'batchnorm', momentum: 0.2, eps: 1e-3 }, { type: 'relu' },
    { type: 'linear', outputs: 3 }] },
  'layernorm [C, H, W]': { input: [2, 4, 4], classes: 3, layers: [
    { type: 'conv', filters: 3, kernel: 3, pad: 1 }, { type: 'layernorm' }, { type: 'relu' },
    { type: 'flatten' }, { type: 'linear', outputs: 3 }] },
  'layernorm [F]': { input: [6], classes: 3, layers: [
    { type: 'linear', outputs: 5 }, { type: 'layernorm' }, { type: 'relu' }, { type: 'linear', outputs: 3 }] },
  globalavgpool: { input: [2, 6, 6], classes: 3, layers: [
    { type: 'conv', filters: 4, kernel: 3 }, { type: 'globalavgpool' }, { type: 'linear', outputs: 3 }] },
  'concat [F]': { input: [4], classes: 3, layers: [
    { type: 'linear', name: 'a', outputs: 3 },
    { type: 'linear', name: 'b', outputs: 2, inputs: ['input'] },
    { type: 'concat', name: 'ab', inputs: ['a', 'b', 'input'] },
    { type: 'relu' }, { type: 'linear', outputs: 3 }] },
  // r1 is read three times (two convs and the add), the model input twice (c1 and the concat)
  'residual graph with add and concat': { input: [2, 6, 6], classes: 3, layers: [
    { type: 'conv', name: 'c1', filters: 3, kernel: 3, pad: 1 },
    { type: 'relu', name: 'r1' },
    { type: 'conv', name: 'c2', filters: 3, kernel: 3, pad: 1 },
    { type: 'conv', name: 'c3', filters: 3, kernel: 1, inputs: ['r1'] },
    { type: 'add', name: 'sum', inputs: ['c2', 'c3', 'r1'] },
    { type: 'concat', name: 'cat', inputs: ['sum', 'c1', 'input'] },
    { type: 'batchnorm', name: 'bn' },
    { type: 'globalavgpool', name: 'gap' },
    { type: 'linear', name: 'fc', outputs: 3 }] },
};

describe('Graph specs and their layers', function () {
  this.timeout(60_000);

  for (const [name, spec] of Object.entries(specs)) {
    it(`${name}: gradients match finite differences`, () => {
      const net = netOf(spec);
      net.init(3);
      // non-trivial affine parameters, so that their gradients reach the layers below
      for (const view of net.params.views) {
        if (/(norm|bn).*\.(weight|bias)$/.test(view.name)) net.params.param(view).set(randomTensor(view.length, view.offset + 1));
      }
      const { x, labels } = batchFor(net, 4, 11);
      net.lossAndGradient(x, labels, 4, key);
      const analytic = Float32Array.from(net.params.gradients);
      const loss = (): number => net.lossAndGradient(x, labels, 4, key).loss;
      for (const view of net.params.views) {
        checkGradient(view.name, net.params.param(view), analytic.subarray(view.offset, view.offset + view.length),
          loss, { eps: 1e-3, tolerance: 2e-3, samples: 12 });
      }
    });

    it(`${name}: the same seed gives the same bits, another seed others`, () => {
      const run = (seed: number): Buffer[] => {
        const net = netOf(spec);
        net.init(seed);
        const { x, labels } = batchFor(net, 5, 5);
        const { loss } = net.lossAndGradient(x, labels, 5, key, 20);
        const evaluation = net.evaluate(x, labels, 5).loss;
        return [net.params.data, net.params.gradients, net.statistics, Float64Array.of(loss, evaluation)]
          .map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength));
      };
      const [a, b, c] = [run(1), run(1), run(2)];
      a.forEach((buffer, i) => assert.ok(buffer.equals(b[i]), `part ${i} differs between identical runs`));
      assert.ok(!a[0].equals(c[0]), 'seed 2 gave the same parameters as seed 1');
    });
  }

  it('normalisation, pooling and merge layers give the bits of their TypeScript loops (resnet8, odd sizes)', () => {
    // sha256 computed with these layers as TypeScript loops (commit 55f54e1), before their native kernels
    const expected: Record<string, string> = {
      resnet8: '8c84cf84e807df4f2fb9a74c32675a4bd19775ec3c4817a2d4b45da6a5a77294',
      'norm mix': '66404e0f0eb7c1fedb24d9698d131dda79c8521585efb968a432753fa3a04115',
    };
    // channel, sample and feature counts that are not multiples of any vector width or block size
    const normMix = { input: [3, 9, 9], classes: 5, layers: [
      { type: 'conv', name: 'c1', filters: 11, kernel: 3, pad: 1 }, { type: 'batchnorm', name: 'bn1' }, { type: 'relu', name: 'r1' },
      { type: 'conv', name: 'c2', filters: 13, kernel: 3 }, { type: 'layernorm', name: 'ln2' },
      { type: 'conv', name: 'c3', filters: 13, kernel: 1, inputs: ['r1'] }, { type: 'avgpool', name: 'p3', kernel: 3, stride: 1 },
      { type: 'add', name: 'sum', inputs: ['ln2', 'p3'] }, { type: 'concat', name: 'cat', inputs: ['sum', 'p3'] },
      { type: 'globalavgpool', name: 'gap' }, { type: 'linear', name: 'fc1', outputs: 19 }, { type: 'batchnorm', name: 'bnf' },
      { type: 'layernorm', name: 'lnf' }, { type: 'concat', name: 'feat', inputs: ['lnf', 'gap'] }, { type: 'linear', name: 'fc2', outputs: 5 }] };
    const nets: Record<string, Net> = { resnet8: new Net(loadSpec('models/resnet8.json'), cpu), 'norm mix': netOf(normMix) };
    cpu.setWinograd(false); // the convolutions of the hashes' time: direct (resnet8's 3x3 ones compute by Winograd since)
    try {
      for (const [name, net] of Object.entries(nets)) {
        const batch = 11;
        net.init(1);
        for (const view of net.params.views) {
          if (/(ln|bn).*\.(weight|bias)$/.test(view.name)) net.params.param(view).set(randomTensor(view.length, view.offset + 1));
        }
        const hash = createHash('sha256');
        const add = (a: Float32Array | Float64Array): void => void hash.update(Buffer.from(a.buffer, a.byteOffset, a.byteLength));
        for (const step of [0, 1]) {
          const { x, labels } = batchFor(net, batch, 3 + step);
          const { loss } = net.lossAndGradient(x, labels, batch, { ...key, step }, 20);
          [net.params.gradients, net.statistics, Float64Array.of(loss)].forEach(add);
          net.updateBuffers(net.statistics);
          add(net.buffers);
        }
        const { x, labels } = batchFor(net, batch, 9);
        add(Float64Array.of(net.evaluate(x, labels, batch).loss));
        assert.equal(hash.digest('hex'), expected[name], name);
      }
    } finally {
      cpu.setWinograd(true);
    }
  });

  it('chain specs give the bits they gave before graphs (lenet, cifarnet: params, grads, loss)', () => {
    // sha256 computed on the code before graph specs (commit 55ef6d6); lenet's since its conv2
    // computes in nhwc (its 20 input channels are not padded to 32 any more) and its fc1 on
    // oneDNN's sgemm (blas_kernels.cc), on the graph code
    const expected: Record<string, [number, string]> = {
      lenet: [2.286546530697003, '8b02758fb47bd207c38b9e866e17f3830e39b30a4d6bc9670e1298dd7ce26f72'],
      cifarnet: [2.314933109277704, 'e7c7b777cca18429824c7ce39003a8adb95546832ae3be33cb8532d9f957aca1'],
    };
    for (const [name, [expectedLoss, sha]] of Object.entries(expected)) {
      const net = new Net(loadSpec(`models/${name}.json`), cpu);
      net.init(1);
      const x = randomTensor(8 * net.inputSize, 5);
      const labels = Int32Array.from({ length: 8 }, (_, i) => (i * 7 + 5) % 10);
      const { loss } = net.lossAndGradient(x, labels, 8, key, 32);
      const hash = createHash('sha256');
      const bytes = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
      hash.update(bytes(net.params.dataWithTail)); // with its tail float (params.ts), as hashed then
      hash.update(bytes(net.params.gradients));
      hash.update(Buffer.from(Float64Array.of(loss).buffer));
      assert.deepEqual([loss, hash.digest('hex')], [expectedLoss, sha], name);
      assert.equal(net.buffers.length + net.statistics.length, 0, `${name} has buffers`);
    }
  });

  it('rejects bad graphs with one line naming the file, the layer and the problem', () => {
    const conv = (name: string, extra: object = {}): object => ({ type: 'conv', name, filters: 2, kernel: 3, pad: 1, ...extra });
    const tail = [{ type: 'flatten', name: 'f' }, { type: 'linear', name: 'out', outputs: 10 }];
    const base = { input: [1, 8, 8], classes: 10 };
    const cases: Array<[object, string]> = [
      [{ ...base, layers: [conv('a'), { type: 'add', name: 'sum', inputs: ['a', 'nope'] }, ...tail] },
        'g.json: layer 2 (sum): input "nope" is no layer\'s name'],
      [{ ...base, layers: [conv('a', { inputs: ['b'] }), conv('b'), ...tail] },
        'g.json: layer 1 (a): input "b" is layer 2, not an earlier layer (a forward reference or a cycle)'],
      [{ ...base, layers: [conv('a', { inputs: ['a'] }), ...tail] }, 'g.json: layer 1 (a): takes its own output as input (a cycle)'],
      [{ ...base, layers: [conv('a'), conv('b', { filters: 3 }), { type: 'add', name: 'sum', inputs: ['b', 'a'] }, ...tail] },
        'g.json: layer 3 (sum): cannot add "a" [2, 8, 8] to "b" [3, 8, 8]: shapes differ'],
      [{ ...base, layers: [conv('a'), conv('b', { stride: 2 }), { type: 'concat', name: 'cat', inputs: ['a', 'b'] }, ...tail] },
        'g.json: layer 3 (cat): cannot concat "b" [2, 4, 4] with "a" [2, 8, 8]: spatial sizes differ (4x4 vs 8x8)'],
      [{ ...base, layers: [conv('a'), { type: 'flatten', name: 'b' }, { type: 'concat', name: 'cat', inputs: ['a', 'b'] }, ...tail] },
        'g.json: layer 3 (cat): cannot concat "b" [128] with "a" [2, 8, 8]: one is [F], the other [C, H, W]'],
      [{ ...base, layers: [conv('a'), { type: 'add', name: 'sum' }, ...tail] },
        'g.json: layer 2 (sum): add needs "inputs" naming at least two layers'],
      [{ ...base, layers: [conv('a'), { type: 'relu', name: 'r', inputs: ['a', 'input'] }, ...tail] },
        'g.json: layer 2 (r): relu takes one input, got 2'],
      [{ ...base, layers: [conv('a'), { type: 'relu', name: 'r', inputs: 'a' }, ...tail] },
        'g.json: layer 2 (r): "inputs" must be a non-empty array of layer names'],
      [{ ...base, layers: [conv('a'), conv('a'), ...tail] }, 'g.json: layer 2 (a): the name is already layer 1\'s'],
      [{ ...base, layers: [conv('input'), ...tail] }, 'g.json: layer 1 (input): the name "input" is the model input\'s'],
      [{ ...base, layers: [conv('a'), conv('b', { inputs: ['input'] }), ...tail] },
        'g.json: layer 1 (a): its output is used by no layer (only the last layer, the model output, may be)'],
      [{ ...base, layers: [{ type: 'flatten', name: 'f' }, { type: 'globalavgpool', name: 'gap' }, { type: 'linear', name: 'out', outputs: 10 }] },
        'g.json: layer 2 (gap): expects a [C, H, W] input, got [64]'],
      [{ ...base, layers: [conv('a'), { type: 'batchnorm', name: 'bn', momentum: 2 }, ...tail] },
        'g.json: layer 2 (bn): "momentum" must be in [0, 1], got 2'],
      [{ ...base, layers: [conv('a'), { type: 'layernorm', name: 'ln', eps: 0 }, ...tail] },
        'g.json: layer 2 (ln): "eps" must be a positive number, got 0'],
      [{ ...base, input: [0], layers: tail }, 'g.json: "input" must be [F] or [C, H, W], positive integers'],
    ];
    for (const [spec, message] of cases) assert.throws(() => netOf(spec), { name: 'SpecError', message });
  });
});
