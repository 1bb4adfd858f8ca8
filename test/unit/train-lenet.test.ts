// One process trains Caffe's LeNet on a slice of the real Fashion-MNIST with SGD + momentum: the
// loss must fall well below its starting value (ln 10 = 2.30) and test accuracy rise.
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec } from '../../src/nn/spec';
import { loadFashionMnist } from '../helpers/fashion-mnist';

describe('LeNet on Fashion-MNIST', function () {
  this.timeout(120_000);

  it('training lowers the loss below 0.75 and reaches 70% test accuracy', () => {
    const batch = 64;
    const steps = 150;
    const train = loadFashionMnist('train', batch * steps);
    const test = loadFashionMnist('t10k', 1000);
    const net = new Net(loadSpec('models/lenet.json'), cpu);
    net.init(1);
    const velocity = new Float32Array(net.params.data.length);
    const losses: number[] = [];
    for (let step = 0; step < steps; ++step) {
      const x = train.pixels.subarray(step * batch * 784, (step + 1) * batch * 784);
      const labels = train.labels.subarray(step * batch, (step + 1) * batch);
      losses.push(net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step, shard: 0 }).loss);
      cpu.sgdUpdate(net.params.data, net.params.gradients, velocity, 0.01, 0.9, 5e-4);
    }
    const first = losses.slice(0, 10).reduce((a, b) => a + b) / 10;
    const last = losses.slice(-20).reduce((a, b) => a + b) / 20;
    const { correct } = net.evaluate(test.pixels, test.labels, test.count);
    console.log(`      loss ${first.toFixed(3)} -> ${last.toFixed(3)}, test accuracy ${(correct / test.count * 100).toFixed(1)}%`);
    assert.ok(first > 1.5, `first loss ${first}`);
    assert.ok(last < 0.75, `mean loss of the last 20 steps is ${last}`);
    assert.ok(correct / test.count >= 0.7, `test accuracy ${correct / test.count}`);
  });
});
