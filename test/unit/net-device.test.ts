// The net's side of the GPU backend, checked where there is no GPU: on a CPU backend with the GPU's
// memory model (test/helpers/mirrored-backend.ts), a net uploads exactly its parameters and batch
// before each pass and downloads exactly its gradients and logits after, and so computes what the
// CPU net computes (within the rounding of the other activation layout) step after step, its
// gradients landing in the placed slot. The GPU's own kernels are checked on a GPU (test/gpu).
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec, parseSpec } from '../../src/nn/spec';
import { assertClose } from '../helpers/close';
import { randomTensor } from '../helpers/gradcheck';
import { mirroredBackend } from '../helpers/mirrored-backend';

const key = { seed: 7, epoch: 0, step: 0, shard: 0 };
const batch = 16;

describe("Net on a GPU's memory model", function () {
  this.timeout(60_000);
  const spec = loadSpec('models/lenet.json');
  const labels = Int32Array.from({ length: batch }, (_, i) => (i * 3) % 10);
  const x = randomTensor(batch * 784, 11).map((v) => (v + 1) / 2);

  it('one pass moves exactly the parameters and the batch up, the gradients and the logits down', () => {
    const { backend, traffic } = mirroredBackend();
    const net = new Net(spec, backend);
    net.init(3);
    const P = net.params.data.length;
    net.lossAndGradient(x, labels, batch, key);
    assert.deepEqual(traffic, { up: 4 * (P + batch * 784), down: 4 * (P + batch * 10) });
    net.evaluate(x, labels, batch);
    assert.deepEqual(traffic, { up: 4 * 2 * (P + batch * 784), down: 4 * (P + 2 * batch * 10) });
  });

  it("the loss, the correct count and the gradient are the CPU net's; a placed slot gets the gradient", () => {
    const { backend } = mirroredBackend();
    const [onDevice, onCpu] = [new Net(spec, backend), new Net(spec, cpu)];
    onDevice.init(3);
    onCpu.init(3);
    const slot = new Float32Array(onDevice.params.data.length + 1);
    onDevice.placeGradients(slot);
    const [got, want] = [onDevice.lossAndGradient(x, labels, batch, key, 64), onCpu.lossAndGradient(x, labels, batch, key, 64)];
    assert.ok(Math.abs(got.loss - want.loss) <= 1e-6 * want.loss, `loss ${got.loss} vs ${want.loss}`);
    assert.equal(got.correct, want.correct);
    assertClose('gradient in the slot', slot.subarray(0, -1), onCpu.params.gradients, 1e-4);
    assertClose('logits', onDevice.forward(x, batch, false, key), onCpu.forward(x, batch, false, key), 1e-5);
  });

  it('ten steps with the host SGD update between: the parameters follow the CPU net', () => {
    const { backend } = mirroredBackend();
    const nets = [new Net(spec, backend), new Net(spec, cpu)];
    for (const net of nets) {
      net.init(5);
      const velocity = new Float32Array(net.params.data.length);
      for (let step = 0; step < 10; ++step) {
        net.lossAndGradient(x, labels, batch, { ...key, step });
        cpu.sgdUpdate(net.params.data, net.params.gradients, velocity, 0.05, 0.9, 5e-4);
      }
    }
    assertClose('parameters', nets[0].params.data, nets[1].params.data, 1e-4);
  });

  it('a layer without GPU kernels, or an output read twice, is refused when the net is built', () => {
    const { backend } = mirroredBackend();
    const bn = parseSpec(
      'bn.json',
      JSON.stringify({
        input: [1, 8, 8],
        classes: 2,
        layers: [{ type: 'batchnorm', name: 'bn' }, { type: 'flatten' }, { type: 'linear', outputs: 2 }],
      }),
    );
    assert.throws(() => new Net(bn, backend), {
      message:
        'bn.json: layer 1 (bn): a batchnorm layer has no GPU kernels yet (--device cuda computes conv, maxpool, avgpool, linear, relu, flatten layers)',
    });
    const layers = [
      { type: 'flatten', name: 'f' },
      { type: 'linear', name: 'a', outputs: 2 },
      { type: 'linear', name: 'b', outputs: 2, inputs: ['f'] },
      { type: 'add', name: 'sum', inputs: ['a', 'b'] },
    ];
    const branches = parseSpec('branches.json', JSON.stringify({ input: [1, 8, 8], classes: 2, layers }));
    assert.throws(() => new Net(branches, backend), {
      message: 'branches.json: layer 3 (b): reads "f", which another layer reads too: the GPU backend computes chains of layers only',
    });
  });
});
