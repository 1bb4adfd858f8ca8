// Batchnorm's running statistics as net state: net.statistics after a micro-batch (batch mean and
// unbiased variance, weighted batch / normalizer), net.updateBuffers' formula on hand-computed
// values, and evaluation on the running statistics.
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { parseSpec } from '../../src/nn/spec';

const key = { seed: 1, epoch: 0, step: 0, shard: 0 };

function netOf(spec: object): Net {
  const net = new Net(parseSpec('bn.json', JSON.stringify(spec)), cpu);
  net.init(1);
  return net;
}

describe('Batchnorm running statistics', () => {
  it('lays out running means and variances per layer, in layer order; init sets 0 and 1', () => {
    const net = netOf({
      input: [2, 2, 2],
      classes: 3,
      layers: [{ type: 'batchnorm', name: 'a' }, { type: 'flatten' }, { type: 'batchnorm', name: 'b' }, { type: 'linear', outputs: 3 }],
    });
    assert.deepEqual(
      net.bufferViews.map((v) => [v.name, v.offset, v.shape]),
      [
        ['a.running_mean', 0, [2]],
        ['a.running_var', 2, [2]],
        ['b.running_mean', 4, [8]],
        ['b.running_var', 12, [8]],
      ],
    );
    assert.deepEqual([...net.buffers], [0, 0, 1, 1, ...new Array(8).fill(0), ...new Array(8).fill(1)]);
    assert.equal(net.statistics.length, 20);
  });

  it('statistics: batch mean and unbiased variance times batch / normalizer, per channel and per feature', () => {
    // [F] = [2], 4 rows: feature 0 is 1, 2, 3, 4 (mean 2.5, unbiased variance 5/3), feature 1 constant 0.5
    const features = netOf({ input: [2], classes: 2, layers: [{ type: 'batchnorm' }] });
    features.lossAndGradient(Float32Array.of(1, 0.5, 2, 0.5, 3, 0.5, 4, 0.5), Int32Array.of(0, 1, 0, 1), 4, key, 8);
    assert.deepEqual([...features.statistics], [1.25, 0.25, Math.fround(5 / 6), 0]);
    // [C, H, W] = [2, 1, 2], 2 samples: channel 0 holds 1, 2 | 3, 4, channel 1 holds -1, -1 | 1, 1 (unbiased variance 4/3)
    const channels = netOf({ input: [2, 1, 2], classes: 4, layers: [{ type: 'batchnorm' }, { type: 'flatten' }] });
    channels.lossAndGradient(Float32Array.of(1, 2, -1, -1, 3, 4, 1, 1), Int32Array.of(0, 1), 2, key);
    assert.deepEqual([...channels.statistics], [2.5, 0, Math.fround(5 / 3), Math.fround(4 / 3)]);
  });

  it('a micro-batch with one value per channel contributes its biased variance, 0', () => {
    const net = netOf({ input: [2], classes: 2, layers: [{ type: 'batchnorm' }] });
    net.lossAndGradient(Float32Array.of(3, -1), Int32Array.of(0), 1, key, 4);
    assert.deepEqual([...net.statistics], [0.75, -0.25, 0, 0]);
  });

  it('updateBuffers: running = (1 - momentum) running + momentum S, in float32, per layer momentum', () => {
    const net = netOf({ input: [2], classes: 2, layers: [{ type: 'batchnorm', momentum: 0.25 }, { type: 'batchnorm' }] });
    net.updateBuffers(Float32Array.of(2, -4, 3, 1, 10, 0, 2, 1));
    // momentum 0.25: exact; momentum 0.1: 0.1f * 10 rounds to 1, 0.9f = 0.89999997615814209
    const [m, k] = [Math.fround(0.1), Math.fround(0.9)];
    assert.deepEqual([...net.buffers], [0.5, -1, 1.5, 1, 1, 0, Math.fround(k + Math.fround(m * 2)), Math.fround(k + m)]);
    net.updateBuffers(Float32Array.of(2, -4, 3, 1, 10, 0, 2, 1));
    assert.deepEqual([...net.buffers].slice(0, 6), [0.875, -1.75, 1.875, 1, Math.fround(Math.fround(k * 1) + 1), 0]);
    assert.throws(() => net.updateBuffers(new Float32Array(7)), {
      name: 'RangeError',
      message: 'updateBuffers: 7 statistics for 8 buffer values',
    });
  });

  it("evaluation normalises with the running statistics, training with the batch's", () => {
    const net = netOf({ input: [2], classes: 2, layers: [{ type: 'batchnorm', eps: 1 }] });
    net.buffers.set([1, -2, 3, 15]); // sqrt(var + eps): 2 and 4
    net.params.data.set([2, 1, 0.5, -1]); // weight, bias
    const x = Float32Array.of(5, 6, -3, 2);
    assert.deepEqual(
      [...net.forward(x, 2, false, key)],
      [((5 - 1) / 2) * 2 + 0.5, ((6 + 2) / 4) * 1 - 1, ((-3 - 1) / 2) * 2 + 0.5, (2 + 2) / 4 - 1],
    );
    // batch statistics: feature 0 has mean 1 and biased variance 16 (sqrt(16 + 1) is not a power of two)
    const y = net.forward(x, 2, true, key);
    assert.deepEqual(
      [...y].map((v) => Math.round(v * 1e6) / 1e6),
      [
        Math.round(((4 / Math.sqrt(17)) * 2 + 0.5) * 1e6) / 1e6,
        Math.round((2 / Math.sqrt(5) - 1) * 1e6) / 1e6,
        Math.round(((-4 / Math.sqrt(17)) * 2 + 0.5) * 1e6) / 1e6,
        Math.round((-2 / Math.sqrt(5) - 1) * 1e6) / 1e6,
      ],
    );
  });
});
