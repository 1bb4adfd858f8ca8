// The net's side of the GPU backend, checked where there is no GPU: on a CPU backend with the GPU's
// memory model (test/helpers/mirrored-backend.ts), a net uploads exactly its parameters and batch
// before each pass and downloads exactly its gradients and logits after, and so computes what the
// CPU net computes (within the rounding of the other activation layout) step after step, its
// gradients landing in the placed slot. The GPU's own kernels are checked on a GPU (test/gpu).
import { strict as assert } from 'node:assert';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec, parseSpec } from '../../src/nn/spec';
import { Optimizer } from '../../src/solver/optimizer';
import { ReplicatedState } from '../../src/solver/replicated-state';
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

  it("a residual net (batchnorm, add, global pooling, an output read twice): the CPU net's loss, gradient and statistics, in the placed slot, and its evaluation after the running statistics moved", () => {
    const { backend } = mirroredBackend();
    const residual = loadSpec('models/resnet8.json');
    const [onDevice, onCpu] = [new Net(residual, backend), new Net(residual, cpu)];
    const images = randomTensor(batch * 3 * 32 * 32, 12);
    for (const net of [onDevice, onCpu]) net.init(3);
    const [P, B] = [onDevice.params.data.length, onDevice.buffers.length];
    assert.ok(B > 0);
    const slot = new Float32Array(P + B + 1);
    onDevice.placeGradients(slot);
    const [got, want] = [onDevice.lossAndGradient(images, labels, batch, key), onCpu.lossAndGradient(images, labels, batch, key)];
    assert.ok(Math.abs(got.loss - want.loss) <= 1e-5 * want.loss, `loss ${got.loss} vs ${want.loss}`);
    assertClose('gradient in the slot', slot.subarray(0, P), onCpu.params.gradients, 1e-4);
    assertClose('statistics in the slot', slot.subarray(P, P + B), onCpu.statistics, 1e-5);
    // the running statistics move on the host; an evaluation on the device reads them
    for (const net of [onDevice, onCpu]) net.updateBuffers(onCpu.statistics);
    assertClose('logits in evaluation', onDevice.forward(images, batch, false, key), onCpu.forward(images, batch, false, key), 1e-4);
  });

  it('with the update on the device (replicated state), the parameters stay there: a step moves only the batch and the gradients, hostParams() brings them back', () => {
    const { backend, traffic } = mirroredBackend();
    const nets = [new Net(spec, backend), new Net(spec, cpu)];
    const sgd = { name: 'sgd' as const, momentum: 0.9, weightDecay: 5e-4, beta1: 0, beta2: 0, eps: 0 };
    const P = nets[0].params.data.length;
    const updates = nets.map((net) => new ReplicatedState(new Optimizer(sgd, net.backend), net.backend, [new Float32Array(P)], net));
    nets.forEach((net) => net.init(5));
    const step = (k: number, t: number): void => {
      nets[k].lossAndGradient(x, labels, batch, { ...key, step: t });
      updates[k].update(nets[k].params.data, nets[k].params.gradients, 0.05, t);
    };
    step(0, 0);
    const initial = nets[0].params.data.slice();
    const before = { ...traffic };
    step(0, 1);
    // up: the batch and the gradient (for the update); down: the gradient and the logits
    assert.deepEqual([traffic.up - before.up, traffic.down - before.down], [4 * (batch * 784 + P), 4 * (P + batch * 10)]);
    assert.deepEqual(nets[0].params.data, initial, 'the host copy moved without a read');
    for (let t = 2; t < 10; ++t) step(0, t);
    for (let t = 0; t < 10; ++t) step(1, t);
    assertClose('parameters', nets[0].hostParams(), nets[1].params.data, 1e-4);
    assert.notDeepEqual(nets[0].params.data, initial);
    // the host's values written (a rollback's, a resume's) go up with the next pass
    nets[0].params.data.set(initial);
    const evaluated = nets[0].evaluate(x, labels, batch);
    nets[0].params.data.set(initial);
    assert.equal(evaluated.loss, nets[0].evaluate(x, labels, batch).loss);
  });

  it("a GPT (embedding, layernorm, attention, GELU, dropout, a tied head): one pass moves the parameters and the token windows up, the gradients and the logits down, with the CPU net's loss, correct count and gradient", () => {
    const { backend, traffic } = mirroredBackend();
    const gpt = loadSpec('models/gpt-tiny.json');
    const [onDevice, onCpu] = [new Net(gpt, backend), new Net(gpt, cpu)];
    const { context: T, vocab: V } = gpt.language!;
    const windows = 2;
    const tokens = Float32Array.from({ length: windows * (T + 1) }, (_, i) => (i * 7919 + 13) % V);
    for (const net of [onDevice, onCpu]) net.init(3);
    const P = onDevice.params.data.length;
    const [got, want] = [
      onDevice.lossAndGradient(tokens, new Int32Array(windows), windows, key),
      onCpu.lossAndGradient(tokens, new Int32Array(windows), windows, key),
    ];
    assert.deepEqual(traffic, { up: 4 * (P + windows * (T + 1)), down: 4 * (P + windows * T * V) });
    assert.ok(Math.abs(got.loss - want.loss) <= 1e-6 * want.loss, `loss ${got.loss} vs ${want.loss}`);
    assert.equal(got.correct, want.correct);
    assertClose('gradient', onDevice.params.gradients, onCpu.params.gradients, 1e-4);
  });

  it('a layer without GPU kernels is refused when the net is built', () => {
    const { backend } = mirroredBackend();
    const concat = parseSpec(
      'concat.json',
      JSON.stringify({
        input: [4],
        classes: 2,
        layers: [
          { type: 'linear', name: 'a', outputs: 3 },
          { type: 'concat', name: 'cat', inputs: ['a', 'input'] },
          { type: 'linear', outputs: 2 },
        ],
      }),
    );
    assert.throws(() => new Net(concat, backend), {
      message:
        'concat.json: layer 2 (cat): a concat layer has no GPU kernels yet (--device cuda computes conv, maxpool, avgpool, linear, relu, flatten, batchnorm, globalavgpool, add, embedding, layernorm, attention, gelu, dropout, lmhead layers)',
    });
  });
});
