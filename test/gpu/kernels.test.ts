// The GPU backend's kernels against the CPU backend's on the same inputs, a GPU net's gradients
// against finite differences, and the same bits from the same seed twice. Tolerances: outputs that
// sum products (convolutions, linear layers) within 1e-4 of the largest CPU value (float32 sums in
// another order); max pooling, ReLU and the element-wise kernels exact (one value chosen, or one
// operation per output), except max pooling's gradient where windows overlap, and average
// pooling, within 1e-6 (sums in another order, or a sum divided where the CPU sums divided terms);
// the loss within 1e-12 relative (double on both sides), its gradient within 1e-7.
import { strict as assert } from 'node:assert';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { assertClose } from '../helpers/close';
import { checkGradient, randomTensor } from '../helpers/gradcheck';
import { requireGpu } from '../helpers/gpu';
import type { AttentionShape, Backend, ConvShape, EmbeddingShape, LinearShape, NormShape, PoolKind, PoolShape } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import { cudaAddon, cudaBackend } from '../../src/nn/cuda';
import { Net } from '../../src/nn/net';
import { type ModelSpec, parseSpec } from '../../src/nn/spec';

let gpu: Backend;

/** x's values on the GPU (its own mirror), and x. */
function onGpu(x: Float32Array): Float32Array {
  gpu.upload(x, x);
  return x;
}

/** A host copy of the GPU's values of `mirrored`. */
function fromGpu(mirrored: Float32Array): Float32Array {
  const host = new Float32Array(mirrored.length);
  gpu.download(mirrored, host);
  return host;
}

function assertSameBits(name: string, got: Float32Array, want: Float32Array): void {
  assert.ok(
    Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(Buffer.from(want.buffer, want.byteOffset, want.byteLength)),
    `${name}: bits differ`,
  );
}

describe('GPU backend: kernels against the CPU backend', function () {
  before(function () {
    requireGpu(this);
    gpu = cudaBackend();
    console.log(`    on ${cudaAddon().gpu().name}: ${JSON.stringify(cudaAddon().libraries())}`);
  });

  // Filters over at most 128 input values (C R S) take the addon's own weight gradient, the others
  // cuDNN's: both kinds; the own kernel with 1, 2, 3 and 4 slices of 32 weights (C R S 27, 50, 75,
  // 125), two tiles of filters (40), a run of output positions crossing samples (13 x 11 outputs),
  // and cifarnet's first layer at batch 40 (80 runs of positions added).
  for (const shape of [
    [4, 3, 12, 12, 8, 3, 3, 1, 1],
    [3, 5, 11, 9, 6, 5, 5, 2, 0],
    [2, 1, 28, 28, 20, 5, 5, 1, 0],
    [7, 3, 13, 11, 5, 3, 3, 1, 1],
    [5, 2, 9, 9, 40, 5, 5, 1, 2],
    [40, 3, 32, 32, 32, 5, 5, 1, 2],
    [2, 8, 10, 10, 12, 5, 5, 1, 2],
  ] as ConvShape[]) {
    it(`convolution ${shape.join('x')}: forward, backward data, backward weights (the same bits twice)`, () => {
      const [n, c, h, w, k, r, , stride, pad] = shape;
      const oh = Math.floor((h + 2 * pad - r) / stride) + 1;
      const ow = Math.floor((w + 2 * pad - r) / stride) + 1;
      const x = onGpu(randomTensor(n * c * h * w, 1));
      const wt = onGpu(randomTensor(k * c * r * r, 2));
      const b = onGpu(randomTensor(k, 3));
      const dy = onGpu(randomTensor(n * k * oh * ow, 4));
      const [yCpu, yGpu] = [new Float32Array(n * k * oh * ow), new Float32Array(n * k * oh * ow)];
      cpu.conv2dForward(x, wt, b, yCpu, shape, 'plain', 'plain');
      gpu.conv2dForward(x, wt, b, yGpu, shape, 'plain', 'plain');
      assertClose('y', fromGpu(yGpu), yCpu, 1e-4);
      const [dxCpu, dxGpu] = [new Float32Array(x.length), new Float32Array(x.length)];
      cpu.conv2dBackwardData(dy, wt, dxCpu, shape, 'plain', 'plain');
      gpu.conv2dBackwardData(dy, wt, dxGpu, shape, 'plain', 'plain');
      assertClose('dx', fromGpu(dxGpu), dxCpu, 1e-4);
      const [dwCpu, dwGpu, dbCpu, dbGpu] = [
        new Float32Array(wt.length),
        new Float32Array(wt.length),
        new Float32Array(k),
        new Float32Array(k),
      ];
      cpu.conv2dBackwardWeights(x, dy, dwCpu, dbCpu, shape, 'plain', 'plain');
      gpu.conv2dBackwardWeights(x, dy, dwGpu, dbGpu, shape, 'plain', 'plain');
      assertClose('dw', fromGpu(dwGpu), dwCpu, 1e-4);
      assertClose('db', fromGpu(dbGpu), dbCpu, 1e-4);
      const [dwAgain, dbAgain] = [new Float32Array(wt.length), new Float32Array(k)];
      gpu.conv2dBackwardWeights(x, dy, dwAgain, dbAgain, shape, 'plain', 'plain');
      assertSameBits('dw', fromGpu(dwAgain), fromGpu(dwGpu));
      assertSameBits('db', fromGpu(dbAgain), fromGpu(dbGpu));
    });
  }

  for (const [kind, shape] of [
    ['max', [3, 4, 12, 12, 2, 2, 0]],
    ['max', [2, 3, 11, 11, 3, 2, 1]],
    ['avg', [2, 3, 11, 11, 3, 2, 1]],
    ['avg', [3, 4, 12, 12, 2, 2, 0]],
  ] as [PoolKind, PoolShape][]) {
    it(`${kind} pooling ${shape.join('x')}: forward and backward`, () => {
      const [n, c, h, w, r, stride, pad] = shape;
      const oh = Math.floor((h + 2 * pad - r) / stride) + 1;
      const ow = Math.floor((w + 2 * pad - r) / stride) + 1;
      const x = onGpu(randomTensor(n * c * h * w, 5));
      const dy = onGpu(randomTensor(n * c * oh * ow, 6));
      const run = (backend: Backend): [Float32Array, Float32Array] => {
        const y = new Float32Array(n * c * oh * ow);
        const dx = new Float32Array(x.length);
        const ws = new Uint8Array(backend.pool2dWorkspaceBytes(kind, shape));
        backend.pool2dForward(kind, x, y, ws, shape);
        backend.pool2dBackward(kind, dy, dx, ws, shape);
        return [y, dx];
      };
      const [yCpu, dxCpu] = run(cpu);
      const [yGpu, dxGpu] = run(gpu);
      if (kind === 'max') {
        assertSameBits('y', fromGpu(yGpu), yCpu);
        // an input in several windows sums their gradients, perhaps in another order
        if (r <= stride) assertSameBits('dx', fromGpu(dxGpu), dxCpu);
        else assertClose('dx', fromGpu(dxGpu), dxCpu, 1e-6);
      } else {
        assertClose('y', fromGpu(yGpu), yCpu, 1e-6);
        assertClose('dx', fromGpu(dxGpu), dxCpu, 1e-6);
      }
    });
  }

  for (const shape of [
    [16, 50, 10],
    [64, 800, 500],
    [3, 7, 1],
  ] as LinearShape[]) {
    it(`linear ${shape.join('x')}: forward and backward`, () => {
      const [n, i, o] = shape;
      const x = onGpu(randomTensor(n * i, 7));
      const w = onGpu(randomTensor(o * i, 8));
      const b = onGpu(randomTensor(o, 9));
      const dy = onGpu(randomTensor(n * o, 10));
      const run = (backend: Backend): Float32Array[] => {
        const [y, dx, dw, db] = [new Float32Array(n * o), new Float32Array(n * i), new Float32Array(o * i), new Float32Array(o)];
        backend.linearForward(x, w, b, y, shape);
        backend.linearBackward(x, w, dy, dx, dw, db, shape);
        return [y, dx, dw, db];
      };
      const want = run(cpu);
      run(gpu).forEach((got, k) => assertClose(['y', 'dx', 'dw', 'db'][k], fromGpu(got), want[k], 1e-4));
    });
  }

  it('ReLU, add, scale: exact', () => {
    const x = onGpu(randomTensor(1000, 11));
    const dy = onGpu(randomTensor(1000, 12));
    const [yCpu, yGpu, dxCpu, dxGpu] = [1, 2, 3, 4].map(() => new Float32Array(1000));
    cpu.reluForward(x, yCpu);
    gpu.reluForward(x, yGpu);
    assertSameBits('relu y', fromGpu(yGpu), yCpu);
    cpu.reluBackward(x, dy, dxCpu);
    gpu.reluBackward(x, dy, dxGpu);
    assertSameBits('relu dx', fromGpu(dxGpu), dxCpu);
    const accCpu = randomTensor(1000, 13);
    const accGpu = onGpu(accCpu.slice());
    cpu.addInPlace(accCpu, x);
    gpu.addInPlace(accGpu, x);
    assertSameBits('add', fromGpu(accGpu), accCpu);
    cpu.scaleInPlace(accCpu, 0.37);
    gpu.scaleInPlace(accGpu, 0.37);
    assertSameBits('scale', fromGpu(accGpu), accCpu);
  });

  it("SGD and AdamW updates, in place and out of place, and their state steps alone: the CPU's bits, step after step", () => {
    const n = 5000;
    // gradients over many magnitudes, so that a fused multiply-add anywhere would show in some element
    const scaled = (seed: number): Float32Array => randomTensor(n, seed).map((v, i) => v * 10 ** ((i % 9) - 4));
    const params = scaled(21);
    const [pCpu, pGpu] = [params.slice(), onGpu(params.slice())];
    const [vCpu, vGpu] = [new Float32Array(n), onGpu(new Float32Array(n))];
    const [mCpu, mGpu, sCpu, sGpu] = [new Float32Array(n), onGpu(new Float32Array(n)), new Float32Array(n), onGpu(new Float32Array(n))];
    const [outP, outA, outB] = [1, 2, 3].map(() => [onGpu(new Float32Array(n)), new Float32Array(n)] as const);
    for (let step = 0; step < 4; ++step) {
      const grads = onGpu(scaled(30 + step));
      cpu.sgdUpdate(pCpu, grads, vCpu, 0.05, 0.9, 5e-4);
      gpu.sgdUpdate(pGpu, grads, vGpu, 0.05, 0.9, 5e-4);
      assertSameBits(`sgd p, step ${step}`, fromGpu(pGpu), pCpu);
      assertSameBits(`sgd v, step ${step}`, fromGpu(vGpu), vCpu);
      cpu.adamwUpdate(pCpu, grads, mCpu, sCpu, 3e-3, 0.9, 0.95, 1e-8, 0.1, step + 1);
      gpu.adamwUpdate(pGpu, grads, mGpu, sGpu, 3e-3, 0.9, 0.95, 1e-8, 0.1, step + 1);
      assertSameBits(`adamw p, step ${step}`, fromGpu(pGpu), pCpu);
      assertSameBits(`adamw m, step ${step}`, fromGpu(mGpu), mCpu);
      assertSameBits(`adamw v, step ${step}`, fromGpu(sGpu), sCpu);
    }
    // out of place: the outputs take the update, the inputs stay
    const grads = onGpu(scaled(40));
    const before = fromGpu(pGpu);
    cpu.sgdUpdate(pCpu, grads, vCpu, 0.05, 0.9, 5e-4, outP[1], outA[1]);
    gpu.sgdUpdate(pGpu, grads, vGpu, 0.05, 0.9, 5e-4, outP[0], outA[0]);
    assertSameBits('sgd paramsOut', fromGpu(outP[0]), outP[1]);
    assertSameBits('sgd velocityOut', fromGpu(outA[0]), outA[1]);
    assertSameBits('sgd params kept', fromGpu(pGpu), before);
    cpu.adamwUpdate(pCpu, grads, mCpu, sCpu, 3e-3, 0.9, 0.95, 1e-8, 0.1, 5, outP[1], outA[1], outB[1]);
    gpu.adamwUpdate(pGpu, grads, mGpu, sGpu, 3e-3, 0.9, 0.95, 1e-8, 0.1, 5, outP[0], outA[0], outB[0]);
    for (const [name, k] of [
      ['paramsOut', 0],
      ['mOut', 1],
      ['vOut', 2],
    ] as const) {
      assertSameBits(`adamw ${name}`, fromGpu([outP, outA, outB][k][0]), [outP, outA, outB][k][1]);
    }
    // the state's steps alone (sharded state's replay)
    const [inCpu, inGpu] = [new Float32Array(n), onGpu(new Float32Array(n))];
    cpu.sgdStateInput(pCpu, grads, 5e-4, inCpu);
    gpu.sgdStateInput(pGpu, grads, 5e-4, inGpu);
    assertSameBits('sgdStateInput', fromGpu(inGpu), inCpu);
    cpu.sgdReplay(vCpu, inCpu, 0.9);
    gpu.sgdReplay(vGpu, inGpu, 0.9);
    assertSameBits('sgdReplay', fromGpu(vGpu), vCpu);
    cpu.adamwReplay(mCpu, sCpu, grads, 0.9, 0.95);
    gpu.adamwReplay(mGpu, sGpu, grads, 0.9, 0.95);
    assertSameBits('adamwReplay m', fromGpu(mGpu), mCpu);
    assertSameBits('adamwReplay v', fromGpu(sGpu), sCpu);
    assert.throws(() => gpu.adamwUpdate(pGpu, grads, mGpu, sGpu, 3e-3, 0.9, 0.95, 1e-8, 0.1, 0), {
      message: 'adamwUpdate: expected step to be an integer >= 1, got 0.000000',
    });
    assert.throws(() => gpu.sgdUpdate(pGpu, grads, vGpu, 0.05, 0.9, 5e-4, outP[0]), {
      message: 'sgdUpdate: expected all 2 output arrays or none, got 1',
    });
  });

  for (const shape of [
    [8, 5, 36],
    [3, 4, 1],
    [1, 3, 1],
    [64, 2, 300],
  ] as NormShape[]) {
    it(`batchnorm ${shape.join('x')}: training forward, evaluation, backward; within 1e-5 (double sums in another order)`, () => {
      const [n, c, area] = shape;
      const size = n * c * area;
      // values far from zero mean, so that the variance's two passes matter
      const x = onGpu(randomTensor(size, 51).map((v, i) => 3 + v * (1 + (i % 5))));
      const [w, b, dy] = [onGpu(randomTensor(c, 52)), onGpu(randomTensor(c, 53)), onGpu(randomTensor(size, 54))];
      const cpuStats = [1, 2, 3].map(() => new Float64Array(c));
      const gpuStats = [1, 2, 3].map(() => new Float64Array(c));
      const [yCpu, xhatCpu, yGpu, xhatGpu] = [1, 2, 3, 4].map(() => new Float32Array(size));
      cpu.batchnormForwardTrain(x, w, b, yCpu, xhatCpu, cpuStats[0], cpuStats[1], cpuStats[2], 1e-5, shape);
      gpu.batchnormForwardTrain(x, w, b, yGpu, xhatGpu, gpuStats[0], gpuStats[1], gpuStats[2], 1e-5, shape);
      if (n * area > 1) {
        assertClose('y', fromGpu(yGpu), yCpu, 1e-5);
        assertClose('xhat', fromGpu(xhatGpu), xhatCpu, 1e-5);
      } else {
        // one value per channel: it is its mean, so xhat is 0 and y is b
        assertSameBits('xhat', fromGpu(xhatGpu), new Float32Array(size));
        assertSameBits('y', fromGpu(yGpu), fromGpu(b));
      }
      // mean and unbiased variance come back to the host arrays (the layer reads them there)
      for (const [k, name] of ['mean', 'unbiased'].entries()) {
        cpuStats[k].forEach((want, ch) => {
          assert.ok(
            Math.abs(gpuStats[k][ch] - want) <= 1e-12 * Math.max(1, Math.abs(want)),
            `${name}[${ch}]: ${gpuStats[k][ch]}, CPU ${want}`,
          );
        });
      }
      if (n * area === 1) assert.deepEqual([...gpuStats[1]], new Array<number>(c).fill(0), 'one value per channel: unbiased variance 0');
      const [running, runningVar] = [onGpu(randomTensor(c, 55)), onGpu(randomTensor(c, 56).map((v) => 1 + v * v))];
      const [evalCpu, evalGpu] = [new Float32Array(size), new Float32Array(size)];
      cpu.batchnormForwardEval(x, w, b, running, runningVar, evalCpu, 1e-5, shape);
      gpu.batchnormForwardEval(x, w, b, running, runningVar, evalGpu, 1e-5, shape);
      assertClose('evaluation y', fromGpu(evalGpu), evalCpu, 1e-6);
      const [dxCpu, dxGpu] = [new Float32Array(size), new Float32Array(size)];
      const [dwCpu, dbCpu, dwGpu, dbGpu] = [1, 2, 3, 4].map(() => new Float32Array(c));
      cpu.batchnormBackward(dy, xhatCpu, w, cpuStats[2], dxCpu, dwCpu, dbCpu, shape);
      gpu.batchnormBackward(dy, xhatGpu, w, gpuStats[2], dxGpu, dwGpu, dbGpu, shape);
      // with one value per channel xhat is 0: so are dw and dx
      if (n * area > 1) assertClose('dw', fromGpu(dwGpu), dwCpu, 1e-5);
      else assertSameBits('dw', fromGpu(dwGpu), new Float32Array(c));
      assertClose('db', fromGpu(dbGpu), dbCpu, 1e-5);
      if (n * area > 1) assertClose('dx', fromGpu(dxGpu), dxCpu, 1e-5);
      // without dx (a first layer): the same parameter gradients
      const [dwAlone, dbAlone] = [new Float32Array(c), new Float32Array(c)];
      gpu.batchnormBackward(dy, xhatGpu, w, gpuStats[2], null, dwAlone, dbAlone, shape);
      assertSameBits('dw without dx', fromGpu(dwAlone), fromGpu(dwGpu));
    });
  }

  it("global average pooling, forward and backward, and copy: the CPU's bits", () => {
    const shape: NormShape = [5, 7, 49];
    const x = onGpu(randomTensor(5 * 7 * 49, 61));
    const dy = onGpu(randomTensor(5 * 7, 62));
    const [yCpu, yGpu] = [new Float32Array(35), new Float32Array(35)];
    cpu.globalAvgPoolForward(x, yCpu, shape);
    gpu.globalAvgPoolForward(x, yGpu, shape);
    assertSameBits('y', fromGpu(yGpu), yCpu);
    const [dxCpu, dxGpu] = [new Float32Array(x.length), new Float32Array(x.length)];
    cpu.globalAvgPoolBackward(dy, dxCpu, shape);
    gpu.globalAvgPoolBackward(dy, dxGpu, shape);
    assertSameBits('dx', fromGpu(dxGpu), dxCpu);
    const copied = new Float32Array(x.length);
    gpu.copy(x, copied);
    assertSameBits('copy', fromGpu(copied), x);
    assert.throws(() => gpu.copy(x, new Float32Array(3)), {
      name: 'TypeError',
      message: 'copy: expected y to be a Float32Array of 1715 elements, got Float32Array of 3',
    });
  });

  it("mirrors: one per buffer, shared by its views; a collected buffer's freed, never found by a new buffer at its address", () => {
    const cuda = cudaAddon();
    const whole = randomTensor(4096, 16);
    gpu.upload(whole, whole);
    const held = cuda.heldBytes();
    const view = whole.subarray(1000, 2000);
    assertSameBits('a view of an uploaded buffer', fromGpu(view), whole.subarray(1000, 2000));
    assert.equal(cuda.heldBytes(), held, 'a view of a mirrored buffer took device memory of its own');
    // a view mirrored first mirrors its whole buffer: the rest of it zero, later views inside it
    const fresh = randomTensor(3000, 17);
    const [left, right] = [fresh.subarray(0, 1000), fresh.subarray(2000, 3000)];
    gpu.upload(left, left);
    assert.equal(cuda.heldBytes() - held, fresh.byteLength);
    gpu.upload(right, right);
    assert.equal(cuda.heldBytes() - held, fresh.byteLength);
    const expected = fresh.slice();
    expected.fill(0, 1000, 2000);
    assertSameBits('the whole buffer after two of its views', fromGpu(fresh), expected);
    // buffers uploaded and dropped, then new ones of the same sizes (the allocator hands their
    // addresses out again): each new buffer's mirror starts zeroed, and the dropped ones' are freed
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const sizes = Array.from({ length: 24 }, (_, i) => (1 << 16) + 1024 * (i % 3));
    const base = cuda.heldBytes();
    for (const size of sizes) gpu.upload(new Float32Array(size).fill(7), new Float32Array(size));
    gc();
    gc();
    for (const [i, size] of sizes.entries()) {
      const reborn = new Float32Array(size);
      const values = fromGpu(reborn);
      assert.ok(
        values.every((v) => v === 0),
        `new buffer ${i}: its mirror holds another buffer's values`,
      );
    }
    gc();
    gc();
    gpu.upload(new Float32Array(1), new Float32Array(1)); // making a mirror frees the collected buffers'
    const kept = cuda.heldBytes() - base;
    assert.ok(kept <= 2 * 4 * ((1 << 16) + 2048), `mirrors of collected buffers kept: ${kept} bytes`);
  });

  it('page-locked host arrays: zeroed, and uploaded and downloaded as any array', () => {
    const host = gpu.hostArray(1 << 20);
    assert.equal(host.length, 1 << 20);
    assert.ok(host.every((v) => v === 0));
    host.set(randomTensor(host.length, 15));
    const mirrored = new Float32Array(host.length);
    gpu.upload(host, mirrored);
    const back = gpu.hostArray(host.length);
    gpu.download(mirrored, back);
    assertSameBits('round trip', back, host);
    assert.equal(gpu.hostArray(0).length, 0);
  });

  it('softmax cross-entropy: loss and its gradient; a label out of range refused as on the CPU', () => {
    const [n, c] = [37, 10];
    const logits = onGpu(randomTensor(n * c, 14).map((v) => 8 * v));
    const labels = Int32Array.from({ length: n }, (_, i) => (i * 7) % c);
    const [dCpu, dGpu] = [new Float32Array(n * c), new Float32Array(n * c)];
    const lossCpu = cpu.softmaxCrossEntropy(logits, labels, dCpu, [n, c]);
    const lossGpu = gpu.softmaxCrossEntropy(logits, labels, dGpu, [n, c]);
    assert.ok(Math.abs(lossGpu - lossCpu) <= 1e-12 * lossCpu, `loss: GPU ${lossGpu}, CPU ${lossCpu}`);
    const got = fromGpu(dGpu);
    for (let i = 0; i < dCpu.length; ++i) assert.ok(Math.abs(got[i] - dCpu[i]) <= 1e-7, `dlogits[${i}]: GPU ${got[i]}, CPU ${dCpu[i]}`);
    labels[3] = c;
    assert.throws(() => gpu.softmaxCrossEntropy(logits, labels, dGpu, [n, c]), {
      message: `softmaxCrossEntropy: labels[3] is ${c}, outside 0..${c - 1}`,
    });
  });

  it('a kernel the GPU lacks says so; an array of the wrong length is refused before any work', () => {
    assert.throws(() => gpu.sumOfSquares(new Float32Array(1)), /^Error: sumOfSquares: not on the GPU backend yet/);
    assert.throws(
      () => gpu.reluForward(new Float32Array(4), new Float32Array(3)),
      /reluForward: expected y to be a Float32Array of 4 elements/,
    );
  });
});

describe("GPU backend: a transformer's kernels against the CPU backend", function () {
  before(function () {
    requireGpu(this);
    gpu = cudaBackend();
  });

  /** The CPU's and the GPU's outputs of a kernel given fresh outputs of these lengths. */
  function both(lengths: number[], kernel: (backend: Backend, outputs: Float32Array[]) => void): [Float32Array[], Float32Array[]] {
    const cpuOutputs = lengths.map((n) => new Float32Array(n));
    const gpuOutputs = lengths.map((n) => new Float32Array(n));
    kernel(cpu, cpuOutputs);
    kernel(gpu, gpuOutputs);
    return [cpuOutputs, gpuOutputs.map(fromGpu)];
  }

  for (const shape of [
    [2, 7, 2, 4],
    [1, 70, 3, 8],
    [3, 5, 2, 1],
  ] as AttentionShape[]) {
    const [n, t, h, d] = shape;
    const exact = d === 1;
    it(`attention ${shape.join('x')}: forward and backward${exact ? " (one value per head: each score is one product, so att has the CPU's bits)" : ''}`, () => {
      const c = h * d;
      const qkv = onGpu(randomTensor(n * t * 3 * c, 71).map((v) => 2 * v));
      const dy = onGpu(randomTensor(n * t * c, 72));
      const [[attCpu, yCpu], [attGpu, yGpu]] = both([n * h * t * t, n * t * c], (backend, [att, y]) =>
        backend.attentionForward(qkv, att, y, shape),
      );
      if (exact) assertSameBits('att', attGpu, attCpu);
      else assertClose('att', attGpu, attCpu, 1e-6);
      assertClose('y', yGpu, yCpu, 1e-5);
      // each row sums to 1 over its keys, and is 0 after them
      for (let row = 0; row < n * h * t; ++row) {
        const i = row % t;
        const probs = attGpu.subarray(row * t, (row + 1) * t);
        assert.ok(Math.abs(probs.subarray(0, i + 1).reduce((a, b) => a + b, 0) - 1) < 1e-5, `row ${row} sums to 1`);
        assert.ok(
          probs.subarray(i + 1).every((p) => p === 0),
          `row ${row}: zeros after key ${i}`,
        );
      }
      const attOnGpu = onGpu(attCpu.slice());
      const [[dqkvCpu], [dqkvGpu]] = both([qkv.length], (backend, [dqkv]) => backend.attentionBackward(qkv, attOnGpu, dy, dqkv, shape));
      assertClose('dqkv', dqkvGpu, dqkvCpu, 1e-5);
    });
  }

  it("GELU forward and backward: the CPU's bits (one chain of double operations, the same exp and erfc)", () => {
    const x = onGpu(
      Float32Array.from([...randomTensor(4000, 73)].map((v, i) => v * (i % 4 === 0 ? 20 : 4)).concat([0, -0, 13.5, -13.5, -38, 38])),
    );
    const dy = onGpu(randomTensor(x.length, 74));
    const [[yCpu], [yGpu]] = both([x.length], (backend, [y]) => backend.geluForward(x, y));
    assertSameBits('y', yGpu, yCpu);
    const [[dxCpu], [dxGpu]] = both([x.length], (backend, [dx]) => backend.geluBackward(x, dy, dx));
    assertSameBits('dx', dxGpu, dxCpu);
  });

  for (const [n, d] of [
    [6, 10],
    [700, 64],
    [1, 3],
  ]) {
    it(`layernorm ${n}x${d}: forward and backward, within 1e-6 (double sums; the parameters' gradients in chunks of samples)`, () => {
      const x = onGpu(randomTensor(n * d, 75).map((v, i) => v * 3 + (i % 5)));
      const [w, b] = [onGpu(randomTensor(d, 76)), onGpu(randomTensor(d, 77))];
      const dy = onGpu(randomTensor(n * d, 78));
      const [yCpu, xhatCpu, yGpu, xhatGpu, dxCpu, dxGpu] = [1, 2, 3, 4, 5, 6].map(() => new Float32Array(n * d));
      const [invStdCpu, invStdGpu] = [new Float64Array(n), new Float64Array(n)];
      cpu.layernormForward(x, w, b, yCpu, xhatCpu, invStdCpu, 1e-5, [n, d]);
      gpu.layernormForward(x, w, b, yGpu, xhatGpu, invStdGpu, 1e-5, [n, d]);
      assertClose('y', fromGpu(yGpu), yCpu, 1e-6);
      assertClose('xhat', fromGpu(xhatGpu), xhatCpu, 1e-6);
      // each backward from its own forward (the GPU's invStd stays on the GPU)
      const [dwCpu, dbCpu, dwGpu, dbGpu] = [1, 2, 3, 4].map(() => new Float32Array(d));
      cpu.layernormBackward(dy, xhatCpu, w, invStdCpu, dxCpu, dwCpu, dbCpu, [n, d]);
      gpu.layernormBackward(dy, xhatGpu, w, invStdGpu, dxGpu, dwGpu, dbGpu, [n, d]);
      assertClose('dx', fromGpu(dxGpu), dxCpu, 1e-6);
      assertClose('dw', fromGpu(dwGpu), dwCpu, 1e-6);
      assertClose('db', fromGpu(dbGpu), dbCpu, 1e-6);
      const [dwAlone, dbAlone] = [new Float32Array(d), new Float32Array(d)];
      gpu.layernormBackward(dy, xhatGpu, w, invStdGpu, null, dwAlone, dbAlone, [n, d]);
      assertSameBits('dw without dx', fromGpu(dwAlone), fromGpu(dwGpu));
    });
  }

  it("embedding forward and backward (tokens repeated, a stride past T): the CPU's bits; a bad token refused in the CPU's words", () => {
    const [n, t, c, vocab] = [5, 9, 6, 7];
    const stride = t + 1;
    const shape: EmbeddingShape = [n, t, c, vocab];
    const x = onGpu(Float32Array.from({ length: n * stride }, (_, i) => (i * i + 3) % vocab));
    const [wte, wpe] = [onGpu(randomTensor(vocab * c, 79)), onGpu(randomTensor(t * c, 80))];
    const dy = onGpu(randomTensor(n * t * c, 81));
    const [[yCpu], [yGpu]] = both([n * t * c], (backend, [y]) => backend.embeddingForward(x, stride, wte, wpe, y, shape));
    assertSameBits('y', yGpu, yCpu);
    for (const accumulate of [false, true]) {
      const start = randomTensor(vocab * c, 82);
      const [[dwteCpu, dwpeCpu], [dwteGpu, dwpeGpu]] = both([vocab * c, t * c], (backend, [dwte, dwpe]) => {
        dwte.set(start);
        if (backend !== cpu) onGpu(dwte);
        backend.embeddingBackward(x, stride, dy, dwte, dwpe, shape, accumulate);
      });
      assertSameBits(`dwte (accumulate ${accumulate})`, dwteGpu, dwteCpu);
      assertSameBits(`dwpe (accumulate ${accumulate})`, dwpeGpu, dwpeCpu);
    }
    for (const bad of [2.5, -1, 7, Number.NaN]) {
      const tokens = x.slice();
      tokens[3 * stride + 4] = bad;
      tokens[4 * stride + 1] = bad;
      const message = `embeddingForward: the token of sequence 3 at position 4 (x[${3 * stride + 4}]) is ${bad}, not an integer in [0, 7)`;
      assert.throws(() => cpu.embeddingForward(tokens, stride, wte, wpe, yCpu, shape), { name: 'RangeError', message });
      assert.throws(() => gpu.embeddingForward(onGpu(tokens), stride, wte, wpe, new Float32Array(n * t * c), shape), {
        name: 'RangeError',
        message,
      });
    }
  });

  it("dropout's mask and the product that applies it: the CPU's bits; a bad p or keys refused in the CPU's words", () => {
    const x = onGpu(randomTensor(100_003, 83));
    for (const [p, keys] of [
      [0.1, [1, 4, 0, 7, 2]],
      [0.5, [1, 4, 0, 7, 3]],
      [0, [9]],
      [0.25, [2 ** 32 + 5, 2 ** 40]],
    ] as [number, number[]][]) {
      const [[maskCpu, yCpu], [maskGpu, yGpu]] = both([x.length, x.length], (backend, [mask, y]) => {
        backend.dropoutMask(mask, p, keys);
        backend.multiply(x, mask, y);
      });
      assertSameBits(`mask (p ${p}, keys ${keys.join(',')})`, maskGpu, maskCpu);
      assertSameBits(`y (p ${p})`, yGpu, yCpu);
      const dropped = maskCpu.filter((m) => m === 0).length / x.length;
      assert.ok(Math.abs(dropped - p) < 0.01, `p ${p}: ${dropped} dropped`);
    }
    const mask = new Float32Array(10);
    for (const backend of [cpu, gpu]) {
      assert.throws(() => backend.dropoutMask(mask, 1, [1]), { message: 'dropoutMask: expected p to be a number in [0, 1), got number 1' });
      assert.throws(() => backend.dropoutMask(mask, 0.5, [1, -2]), {
        message: 'dropoutMask: expected keys to be an Array of integers >= 0, got Array',
      });
    }
  });
});

describe('GPU backend: a net', function () {
  const smallJson = {
    name: 'small',
    input: [1, 10, 10],
    classes: 4,
    layers: [
      { type: 'conv', name: 'conv1', filters: 3, kernel: 3 },
      { type: 'maxpool', name: 'pool1', kernel: 2, stride: 2 },
      { type: 'relu', name: 'relu1' },
      { type: 'avgpool', name: 'pool2', kernel: 2, stride: 1 },
      { type: 'flatten', name: 'flatten' },
      { type: 'linear', name: 'ip1', outputs: 4 },
    ],
  };
  const small: ModelSpec = parseSpec('small.json', JSON.stringify(smallJson));
  const batch = 6;
  const x = randomTensor(batch * 100, 21);
  const labels = Int32Array.from({ length: batch }, (_, i) => i % 4);
  const key = { seed: 1, epoch: 0, step: 0, shard: 0 };

  before(function () {
    requireGpu(this);
  });

  it('gradients against finite differences, and against the CPU net', () => {
    const net = new Net(small, cudaBackend());
    net.init(3);
    net.lossAndGradient(x, labels, batch, key);
    const gradients = net.params.gradients.slice();
    checkGradient('params', net.params.data, gradients, () => net.evaluate(x, labels, batch).loss, {
      eps: 1e-2,
      tolerance: 2e-2,
      samples: 60,
    });
    const reference = new Net(small, cpu);
    reference.init(3);
    reference.lossAndGradient(x, labels, batch, key);
    assertClose('gradients', gradients, reference.params.gradients, 1e-4);
  });

  it('the same seed twice: the same bits, step after step (with a host SGD update between)', () => {
    const train = (): Float32Array => {
      const net = new Net(small, cudaBackend());
      net.init(5);
      const velocity = new Float32Array(net.params.data.length);
      for (let step = 0; step < 10; ++step) {
        net.lossAndGradient(x, labels, batch, { ...key, step });
        cpu.sgdUpdate(net.params.data, net.params.gradients, velocity, 0.1, 0.9, 5e-4);
      }
      return net.params.data.slice();
    };
    assertSameBits('params', train(), train());
  });

  it('a layer without GPU kernels is refused when the net is built, in one line', () => {
    const layers = [
      { type: 'conv', name: 'c', filters: 2, kernel: 3 },
      { type: 'concat', name: 'cat', inputs: ['c', 'c'] },
      { type: 'flatten', name: 'f' },
      { type: 'linear', name: 'ip', outputs: 4 },
    ];
    const spec = parseSpec('cat.json', JSON.stringify({ ...smallJson, layers }));
    assert.throws(() => new Net(spec, cudaBackend()), {
      message:
        'cat.json: layer 2 (cat): a concat layer has no GPU kernels yet (--device cuda computes conv, maxpool, avgpool, linear, relu, flatten, batchnorm, globalavgpool, add, embedding, layernorm, attention, gelu, dropout, lmhead layers)',
    });
  });

  it('a residual net (batchnorm, add, global pooling, an output read twice): gradients against finite differences and the CPU net, statistics, evaluation', () => {
    const layers = [
      { type: 'conv', name: 'conv1', filters: 4, kernel: 3, pad: 1 },
      { type: 'batchnorm', name: 'bn1' },
      { type: 'relu', name: 'relu1' },
      { type: 'conv', name: 'conv2', filters: 4, kernel: 3, pad: 1 },
      { type: 'batchnorm', name: 'bn2' },
      { type: 'add', name: 'add', inputs: ['bn2', 'relu1'] },
      { type: 'relu', name: 'relu2' },
      { type: 'globalavgpool', name: 'pool' },
      { type: 'linear', name: 'fc', outputs: 4 },
    ];
    const residual = parseSpec('residual.json', JSON.stringify({ ...smallJson, name: 'residual', layers }));
    const net = new Net(residual, cudaBackend());
    const reference = new Net(residual, cpu);
    net.init(3);
    reference.init(3);
    const got = net.lossAndGradient(x, labels, batch, key);
    const want = reference.lossAndGradient(x, labels, batch, key);
    assert.ok(Math.abs(got.loss - want.loss) <= 1e-5 * want.loss, `loss ${got.loss}, CPU ${want.loss}`);
    const gradients = net.params.gradients.slice();
    assertClose('gradients', gradients, reference.params.gradients, 1e-4);
    assertClose('statistics', net.statistics, reference.statistics, 1e-5);
    // in training mode (batch statistics), as the gradient was taken
    checkGradient('params', net.params.data, gradients, () => trainingLoss(net), { eps: 1e-2, tolerance: 2e-2, samples: 60 });
    for (const n of [net, reference]) n.updateBuffers(reference.statistics);
    assertClose('evaluation logits', net.forward(x, batch, false, key), reference.forward(x, batch, false, key), 1e-4);
  });

  describe('a GPT (embedding, layernorm, attention, GELU, dropout, residual adds, a tied head)', () => {
    const gptJson = {
      name: 'gpt-test',
      context: 8,
      vocab: 11,
      layers: [
        { type: 'embedding', name: 'embed', dim: 8 },
        { type: 'layernorm', name: 'ln1' },
        { type: 'linear', name: 'qkv', outputs: 24 },
        { type: 'attention', name: 'attn', heads: 2 },
        { type: 'linear', name: 'proj', outputs: 8 },
        { type: 'dropout', name: 'drop', p: 0.2 },
        { type: 'add', name: 'res1', inputs: ['drop', 'embed'] },
        { type: 'layernorm', name: 'ln2' },
        { type: 'linear', name: 'fc', outputs: 16 },
        { type: 'gelu', name: 'gelu' },
        { type: 'linear', name: 'fc2', outputs: 8 },
        { type: 'add', name: 'res2', inputs: ['fc2', 'res1'] },
        { type: 'layernorm', name: 'lnf' },
        { type: 'lmhead', name: 'head', embedding: 'embed' },
      ],
    };
    const gptSpec = parseSpec('gpt-test.json', JSON.stringify(gptJson));
    const windows = 3;
    const tokens = Float32Array.from({ length: windows * 9 }, (_, i) => (i * 7 + 3) % 11);
    const none = new Int32Array(windows);

    // a step of 1e-3: the embedding's 0.02-scale rows feed a layernorm, curved at 1e-2 (seen on the
    // CPU: 5e-4 off at 1e-3 against 1.3e-2 at 1e-2)
    it('gradients against finite differences of the training loss (dropout on, its mask fixed by the key) in every tensor, and against the CPU net', () => {
      const net = new Net(gptSpec, cudaBackend());
      net.init(3);
      const got = net.lossAndGradient(tokens, none, windows, key);
      const gradients = net.params.gradients.slice();
      for (const view of net.params.views) {
        checkGradient(
          view.name,
          net.params.param(view),
          gradients.subarray(view.offset, view.offset + view.length),
          () => net.lossAndGradient(tokens, none, windows, key).loss,
          {
            eps: 1e-3,
            tolerance: 2e-3,
            samples: 6,
          },
        );
      }
      const reference = new Net(gptSpec, cpu);
      reference.init(3);
      const want = reference.lossAndGradient(tokens, none, windows, key);
      assert.ok(Math.abs(got.loss - want.loss) <= 1e-6 * want.loss, `loss ${got.loss}, CPU ${want.loss}`);
      assert.equal(got.correct, want.correct);
      assertClose('gradients', gradients, reference.params.gradients, 1e-4);
      assertClose('logits in evaluation', net.forward(tokens, windows, false, key), reference.forward(tokens, windows, false, key), 1e-4);
    });

    it('the same seed twice: the same bits, step after step (a host AdamW update between)', () => {
      const train = (): Float32Array => {
        const net = new Net(gptSpec, cudaBackend());
        net.init(5);
        const P = net.params.data.length;
        const [m, v] = [new Float32Array(P), new Float32Array(P)];
        for (let step = 1; step <= 10; ++step) {
          net.lossAndGradient(tokens, none, windows, { ...key, step });
          cpu.adamwUpdate(net.params.data, net.params.gradients, m, v, 3e-3, 0.9, 0.95, 1e-8, 0.1, step);
        }
        return net.params.data.slice();
      };
      assertSameBits('params', train(), train());
    });
  });

  /** The training-mode loss at the net's current parameters (a pass whose gradient is not used). */
  function trainingLoss(net: Net): number {
    return net.lossAndGradient(x, labels, batch, key).loss;
  }
});
