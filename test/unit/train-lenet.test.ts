// One process trains Caffe's LeNet on the real Fashion-MNIST (datasets/fashion-mnist, written by
// launch/prepare) through the data pipeline: one shard, seeded micro-batches, SGD + momentum. The
// loss must fall well below its starting value (ln 10 = 2.30) and test accuracy rise.
import { strict as assert } from 'node:assert';
import { Dataset } from '../../src/data/dataset';
import { gatherBatch, MicroBatches } from '../../src/data/micro-batches';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec } from '../../src/nn/spec';

describe('LeNet on Fashion-MNIST', function () {
  this.timeout(120_000);

  it('training lowers the loss below 0.75 and reaches 70% test accuracy', async () => {
    const batch = 64;
    const steps = 150;
    const dataset = await Dataset.open('datasets/fashion-mnist');
    const layout = dataset.train.layout(1);
    const shard = (await dataset.train.readShards(layout, [0])).get(0)!;
    const test = await dataset.test.readAll();
    await dataset.close();
    const plan = new MicroBatches(layout, batch, 1);
    const net = new Net(loadSpec('models/lenet.json'), cpu);
    net.init(1);
    const velocity = new Float32Array(net.params.data.length);
    const x = new Float32Array(batch * 784);
    const labels = new Int32Array(batch);
    const losses: number[] = [];
    for (let step = 0; step < steps; ++step) {
      gatherBatch(shard, plan.rows(0, 0, step), x, labels);
      losses.push(net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step, shard: 0 }).loss);
      cpu.sgdUpdate(net.params.data, net.params.gradients, velocity, 0.01, 0.9, 5e-4);
    }
    const first = losses.slice(0, 10).reduce((a, b) => a + b) / 10;
    const last = losses.slice(-20).reduce((a, b) => a + b) / 20;
    const testCount = 1000;
    const testX = new Float32Array(testCount * 784);
    const testLabels = new Int32Array(testCount);
    gatherBatch(
      test,
      Int32Array.from({ length: testCount }, (_, i) => i),
      testX,
      testLabels,
    );
    const { correct } = net.evaluate(testX, testLabels, testCount);
    console.log(`      loss ${first.toFixed(3)} -> ${last.toFixed(3)}, test accuracy ${((correct / testCount) * 100).toFixed(1)}%`);
    assert.ok(first > 1.5, `first loss ${first}`);
    assert.ok(last < 0.75, `mean loss of the last 20 steps is ${last}`);
    assert.ok(correct / testCount >= 0.7, `test accuracy ${correct / testCount}`);
  });
});
