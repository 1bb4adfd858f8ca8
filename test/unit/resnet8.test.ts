// models/resnet8.json: its size, and that a few SGD steps on a fixed batch lower the loss while
// the running statistics follow the batches (single process: the micro-batch's statistics are S).
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec } from '../../src/nn/spec';
import { Optimizer } from '../../src/solver/optimizer';
import { randomTensor } from '../helpers/gradcheck';

describe('resnet8', function () {
  this.timeout(60_000);

  it('has the parameters and buffers of a CIFAR ResNet-8 with projection shortcuts', () => {
    const net = new Net(loadSpec('models/resnet8.json'), cpu);
    const conv = (c: number, k: number, r: number): number => k * c * r * r + k;
    const bn = (c: number): number => 2 * c;
    assert.equal(
      net.params.data.length,
      conv(3, 16, 3) +
        bn(16) +
        2 * (conv(16, 16, 3) + bn(16)) +
        conv(16, 32, 3) +
        conv(32, 32, 3) +
        conv(16, 32, 1) +
        3 * bn(32) +
        conv(32, 64, 3) +
        conv(64, 64, 3) +
        conv(32, 64, 1) +
        3 * bn(64) +
        64 * 10 +
        10,
    ); // 78,378
    assert.equal(net.buffers.length, 2 * (3 * 16 + 3 * 32 + 3 * 64));
  });

  it('SGD steps on a fixed batch lower the loss; running statistics move off their initial values', () => {
    const net = new Net(loadSpec('models/resnet8.json'), cpu);
    net.init(1);
    const batch = 8;
    const x = randomTensor(batch * net.inputSize, 3);
    const labels = Int32Array.from({ length: batch }, (_, i) => i % 10);
    const sgd = new Optimizer({ name: 'sgd', momentum: 0.9, weightDecay: 0, beta1: 0, beta2: 0, eps: 0 }, cpu);
    const velocity = new Float32Array(net.params.data.length);
    const losses: number[] = [];
    for (let step = 0; step < 6; ++step) {
      losses.push(net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step, shard: 0 }).loss);
      sgd.update(net.params.data, net.params.gradients, [velocity], 0.05, step);
      net.updateBuffers(net.statistics);
    }
    assert.ok(losses[5] < losses[0] * 0.8, `losses ${losses.join(', ')}`);
    const firstVar = net.bufferViews.find((v) => v.name === 'bn1.running_var')!;
    assert.ok(
      net.buffers.subarray(0, firstVar.offset).every((v) => v !== 0),
      'bn1.running_mean still 0',
    );
    const evaluation = net.evaluate(x, labels, batch);
    assert.ok(Number.isFinite(evaluation.loss), `evaluation loss ${evaluation.loss}`);
  });
});
