// The CPU kernels: forward results against direct loops, gradients against central finite
// differences, the same bits on every run, and argument errors.
import { strict as assert } from 'node:assert';
import type { ConvShape, Layout, PoolKind, PoolShape } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import { activationLength } from '../../src/nn/layer';
import { checkGradient, dot, randomTensor } from '../helpers/gradcheck';

const convShape: ConvShape = [2, 3, 7, 6, 4, 3, 3, 2, 1]; // N C H W K R S stride pad

function convOut([, , h, w, , r, s, stride, pad]: ConvShape): [number, number] {
  return [Math.floor((h + 2 * pad - r) / stride) + 1, Math.floor((w + 2 * pad - s) / stride) + 1];
}

function conv(shape: ConvShape) {
  const [n, c, h, w, k, r, s] = shape;
  const [oh, ow] = convOut(shape);
  return {
    x: randomTensor(n * c * h * w, 1),
    w: randomTensor(k * c * r * s, 2),
    b: randomTensor(k, 3),
    y: new Float32Array(n * k * oh * ow),
    dy: randomTensor(n * k * oh * ow, 4),
    dx: new Float32Array(n * c * h * w),
    dw: new Float32Array(k * c * r * s),
    db: new Float32Array(k),
  };
}

/** conv(x, w) + b by loops in double, [N, K, OH, OW]. */
function directConv(t: ReturnType<typeof conv>, shape: ConvShape): Float64Array {
  const [n, c, h, w, k, r, s, stride, pad] = shape;
  const [oh, ow] = convOut(shape);
  const y = new Float64Array(n * k * oh * ow);
  for (let i = 0; i < n; ++i)
    for (let o = 0; o < k; ++o)
      for (let p = 0; p < oh; ++p)
        for (let q = 0; q < ow; ++q) {
          let sum = t.b[o];
          for (let ch = 0; ch < c; ++ch)
            for (let u = 0; u < r; ++u)
              for (let v = 0; v < s; ++v) {
                const yy = p * stride - pad + u;
                const xx = q * stride - pad + v;
                if (yy >= 0 && yy < h && xx >= 0 && xx < w)
                  sum += t.x[((i * c + ch) * h + yy) * w + xx] * t.w[((o * c + ch) * r + u) * s + v];
              }
          y[((i * k + o) * oh + p) * ow + q] = sum;
        }
  return y;
}

describe('CPU kernels', () => {
  it('an error inside oneDNN becomes a JS error, and the process lives on', () => {
    // a 2e9-wide input passes the argument checks but no memory object of that size can exist
    const one = new Float32Array(1);
    const shape = [1, 1, 1, 2_000_000_000, 1, 1, 1, 1, 0] as unknown as ConvShape;
    // which of oneDNN's steps fails first depends on the level's kernels (x86-64-v3: the primitive)
    assert.throws(() => cpu.conv2dForward(one, one, one, one, shape), {
      name: 'Error',
      message: /^could not create a (memory object|primitive)$/,
    });
  });

  it('conv2dForward equals a direct convolution', () => {
    const t = conv(convShape);
    cpu.conv2dForward(t.x, t.w, t.b, t.y, convShape);
    const expected = directConv(t, convShape);
    t.y.forEach((got, i) => assert.ok(Math.abs(got - expected[i]) < 1e-5, `y[${i}] = ${got}, expected ${expected[i]}`));
  });

  it('conv2d gradients match finite differences (input, weights, bias)', () => {
    const t = conv(convShape);
    const loss = (): number => {
      cpu.conv2dForward(t.x, t.w, t.b, t.y, convShape);
      return dot(t.y, t.dy);
    };
    cpu.conv2dBackwardData(t.dy, t.w, t.dx, convShape);
    cpu.conv2dBackwardWeights(t.x, t.dy, t.dw, t.db, convShape);
    checkGradient('dx', t.x, t.dx, loss);
    checkGradient('dw', t.w, t.dw, loss);
    checkGradient('db', t.b, t.db, loss);
  });

  // 32 channels: every pass by Winograd; 16: the weight gradient alone (dnnl_kernels.cc)
  for (const shape of [
    [3, 32, 6, 7, 48, 3, 3, 1, 1],
    [2, 16, 9, 8, 16, 3, 3, 1, 1],
  ] as ConvShape[]) {
    it(`3x3 convolutions over ${shape[1]} channels by Winograd (AVX-512): near a direct convolution and the direct kernels' gradients, other bits, the same bits every run`, () => {
      const passes = (): Float32Array[] => {
        const t = conv(shape);
        cpu.conv2dForward(t.x, t.w, t.b, t.y, shape);
        cpu.conv2dBackwardData(t.dy, t.w, t.dx, shape);
        cpu.conv2dBackwardWeights(t.x, t.dy, t.dw, t.db, shape);
        return [t.y, t.dx, t.dw];
      };
      const winograd = passes();
      passes().forEach((again, i) => assert.deepEqual(again, winograd[i], `pass ${i} differs between identical calls`));
      const expected = directConv(conv(shape), shape);
      winograd[0].forEach((got, i) => assert.ok(Math.abs(got - expected[i]) < 1e-4, `y[${i}] = ${got}, expected ${expected[i]}`));
      cpu.setWinograd(false);
      let direct: Float32Array[];
      try {
        direct = passes();
      } finally {
        cpu.setWinograd(true);
      }
      // the direct kernels' gradients match finite differences (above); Winograd's stay near them
      ['y', 'dx', 'dw'].forEach((name, k) =>
        winograd[k].forEach((got, i) =>
          assert.ok(
            Math.abs(got - direct[k][i]) < 1e-4 * Math.max(1, Math.abs(direct[k][i])),
            `${name}[${i}] = ${got}, direct ${direct[k][i]}`,
          ),
        ),
      );
      const differs = winograd.map((got, i) => !Buffer.from(got.buffer).equals(Buffer.from(direct[i].buffer)));
      const expectedDiffers = cpu.channelBlock === 16 ? [shape[1] >= 32, shape[1] >= 32, true] : [false, false, false];
      assert.deepEqual(differs, expectedDiffers, 'which passes [y, dx, dw] differ from the direct ones');
    });
  }

  for (const kind of ['max', 'avg'] as PoolKind[]) {
    it(`${kind} pooling: forward and its gradient`, () => {
      const shape: PoolShape = [2, 3, 6, 6, 2, 2, 0];
      const x = randomTensor(2 * 3 * 36, 5);
      const y = new Float32Array(2 * 3 * 9);
      const dy = randomTensor(y.length, 6);
      const dx = new Float32Array(x.length);
      const ws = new Uint8Array(cpu.pool2dWorkspaceBytes(kind, shape));
      cpu.pool2dForward(kind, x, y, ws, shape);
      const window = (plane: number, p: number, q: number): number[] => [0, 1, 6, 7].map((o) => x[plane * 36 + p * 12 + q * 2 + o]);
      for (let plane = 0; plane < 6; ++plane)
        for (let p = 0; p < 3; ++p)
          for (let q = 0; q < 3; ++q) {
            const values = window(plane, p, q);
            const expected = kind === 'max' ? Math.max(...values) : values.reduce((a, b) => a + b) / 4;
            assert.ok(Math.abs(y[plane * 9 + p * 3 + q] - expected) < 1e-6);
          }
      cpu.pool2dBackward(kind, dy, dx, ws, shape);
      checkGradient(
        'dx',
        x,
        dx,
        () => {
          cpu.pool2dForward(kind, x, y, ws, shape);
          return dot(y, dy);
        },
        { eps: 1e-3, tolerance: 2e-3 },
      );
    });
  }

  for (const kind of ['max', 'avg'] as PoolKind[]) {
    it(`conv -> ${kind} pool -> conv in the blocked layout: the same bits as in plain, forward and backward`, () => {
      // 20 and 12 channels: not multiples of the block, so the padding is exercised. Pooling windows
      // that do not overlap: where they do, oneDNN's plain pooling backward adds a position's
      // gradients in another order than its blocked kernel below x86-64-v4 (a net keeps each layer's
      // layout whatever the machine, so no run's bits depend on it)
      const conv1: ConvShape = [2, 3, 9, 9, 20, 3, 3, 1, 1];
      const pool: PoolShape = [2, 20, 9, 9, 2, 2, 0];
      const conv2: ConvShape = [2, 20, 4, 4, 12, 3, 3, 1, 0];
      const sizes = { x: [2, 3, 9, 9], a: [2, 20, 9, 9], p: [2, 20, 4, 4], z: [2, 12, 2, 2] } as const;
      const length = ([n, ...chw]: readonly number[], layout: Layout): number => activationLength(cpu, chw, n, layout);
      const w1 = randomTensor(20 * 3 * 9, 31),
        b1 = randomTensor(20, 32),
        w2 = randomTensor(12 * 20 * 9, 33),
        b2 = randomTensor(12, 34);
      const x = randomTensor(length(sizes.x, 'plain'), 35),
        dzPlain = randomTensor(length(sizes.z, 'plain'), 36);
      const inPlain = (dims: readonly number[], t: Float32Array, layout: Layout): Float32Array => {
        if (layout === 'plain') return t;
        const plain = new Float32Array(length(dims, 'plain'));
        cpu.convertLayout(t, plain, dims as [number, number, number, number], 'plain');
        return plain;
      };
      const run = (layout: Layout): Float32Array[] => {
        const a = new Float32Array(length(sizes.a, layout)),
          p = new Float32Array(length(sizes.p, layout));
        const z = new Float32Array(length(sizes.z, layout));
        const ws = new Uint8Array(cpu.pool2dWorkspaceBytes(kind, pool, layout));
        cpu.conv2dForward(x, w1, b1, a, conv1, 'plain', layout);
        cpu.pool2dForward(kind, a, p, ws, pool, layout);
        cpu.conv2dForward(p, w2, b2, z, conv2, layout, layout);
        let dz = dzPlain;
        if (layout === 'blocked') {
          dz = new Float32Array(z.length);
          cpu.convertLayout(dzPlain, dz, [...sizes.z], 'blocked');
          // the reorder pads with zeros: so did the convolution, or the two would differ
          const zAgain = new Float32Array(z.length);
          cpu.convertLayout(inPlain(sizes.z, z, layout), zAgain, [...sizes.z], 'blocked');
          assert.ok(Buffer.from(zAgain.buffer).equals(Buffer.from(z.buffer)), 'padded channels of z are zero');
        }
        const dp = new Float32Array(p.length),
          da = new Float32Array(a.length),
          dx = new Float32Array(x.length);
        const dw1 = new Float32Array(w1.length),
          db1 = new Float32Array(20),
          dw2 = new Float32Array(w2.length),
          db2 = new Float32Array(12);
        cpu.conv2dBackwardWeights(p, dz, dw2, db2, conv2, layout, layout);
        cpu.conv2dBackwardData(dz, w2, dp, conv2, layout, layout);
        cpu.pool2dBackward(kind, dp, da, ws, pool, layout);
        cpu.conv2dBackwardWeights(x, da, dw1, db1, conv1, 'plain', layout);
        cpu.conv2dBackwardData(da, w1, dx, conv1, 'plain', layout);
        return [
          inPlain(sizes.a, a, layout),
          inPlain(sizes.p, p, layout),
          inPlain(sizes.z, z, layout),
          inPlain(sizes.p, dp, layout),
          inPlain(sizes.a, da, layout),
          dx,
          dw1,
          db1,
          dw2,
          db2,
        ];
      };
      const plain = run('plain');
      const blocked = run('blocked');
      ['a', 'p', 'z', 'dp', 'da', 'dx', 'dw1', 'db1', 'dw2', 'db2'].forEach((name, i) => {
        assert.ok(Buffer.from(blocked[i].buffer).equals(Buffer.from(plain[i].buffer)), `${name} differs between layouts`);
      });
    });
  }

  for (const channels of [20, 32]) {
    it(`batchnorm and global average pooling of ${channels} channels in the blocked layout: the same bits as in plain`, () => {
      const [n, h, w] = [3, 5, 7];
      const dims: [number, number, number, number] = [n, channels, h, w];
      const shape: [number, number, number] = [n, channels, h * w];
      const length = (layout: Layout): number => activationLength(cpu, [channels, h, w], n, layout);
      const x = randomTensor(length('plain'), 41),
        dyPlain = randomTensor(length('plain'), 42),
        dpooled = randomTensor(n * channels, 43);
      const weight = randomTensor(channels, 44),
        bias = randomTensor(channels, 45);
      const runningMean = randomTensor(channels, 46),
        runningVar = randomTensor(channels, 47).map(Math.abs);
      const toLayout = (t: Float32Array, layout: Layout): Float32Array => {
        if (layout === 'plain') return t;
        const blocked = new Float32Array(length('blocked'));
        cpu.convertLayout(t, blocked, dims, 'blocked');
        return blocked;
      };
      const toPlain = (t: Float32Array, layout: Layout): Float32Array => {
        if (layout === 'plain') return t;
        const plain = new Float32Array(length('plain'));
        cpu.convertLayout(t, plain, dims, 'plain');
        // the reorder back pads with zeros: so must the kernels have, for the convolutions reading their padding
        assert.ok(Buffer.from(toLayout(plain, 'blocked').buffer).equals(Buffer.from(t.buffer)), 'padding channels are zero');
        return plain;
      };
      const run = (layout: Layout): Array<Float32Array | Float64Array> => {
        const xs = toLayout(x, layout),
          dy = toLayout(dyPlain, layout);
        const y = new Float32Array(xs.length),
          xhat = new Float32Array(xs.length),
          yEval = new Float32Array(xs.length);
        const dx = new Float32Array(xs.length),
          dxPool = new Float32Array(xs.length),
          pooled = new Float32Array(n * channels);
        const [mean, unbiased, invStd] = [new Float64Array(channels), new Float64Array(channels), new Float64Array(channels)];
        const [dw, db] = [new Float32Array(channels), new Float32Array(channels)];
        cpu.batchnormForwardTrain(xs, weight, bias, y, xhat, mean, unbiased, invStd, 1e-5, shape, layout);
        cpu.batchnormForwardEval(xs, weight, bias, runningMean, runningVar, yEval, 1e-5, shape, layout);
        cpu.batchnormBackward(dy, xhat, weight, invStd, dx, dw, db, shape, layout);
        cpu.globalAvgPoolForward(xs, pooled, shape, layout);
        cpu.globalAvgPoolBackward(dpooled, dxPool, shape, layout);
        return [
          toPlain(y, layout),
          toPlain(xhat, layout),
          toPlain(yEval, layout),
          toPlain(dx, layout),
          toPlain(dxPool, layout),
          mean,
          unbiased,
          invStd,
          dw,
          db,
          pooled,
        ];
      };
      const plain = run('plain');
      const blocked = run('blocked');
      ['y', 'xhat', 'y (eval)', 'dx', 'dx (pooling)', 'mean', 'unbiased', 'invStd', 'dw', 'db', 'pooled'].forEach((name, i) => {
        assert.ok(Buffer.from(blocked[i].buffer).equals(Buffer.from(plain[i].buffer)), `${name} differs between layouts`);
      });
    });
  }

  it('batchnorm: the same bits as double-precision loops in the fixed order (whichever build of the kernels this CPU runs)', () => {
    // JavaScript's numbers are doubles: these loops are the kernels' arithmetic, one operation at a
    // time, in sample-then-position order; an AVX-512 build that fused a multiply and an add, or
    // reordered a sum, would differ in the last bits
    const [n, channels, spatial] = [3, 20, 35];
    const shape: [number, number, number] = [n, channels, spatial];
    const x = randomTensor(n * channels * spatial, 51),
      dy = randomTensor(x.length, 52);
    const weight = randomTensor(channels, 53),
      bias = randomTensor(channels, 54);
    const y = new Float32Array(x.length),
      xhat = new Float32Array(x.length),
      dx = new Float32Array(x.length);
    const [mean, unbiased, invStd] = [new Float64Array(channels), new Float64Array(channels), new Float64Array(channels)];
    const [dw, db] = [new Float32Array(channels), new Float32Array(channels)];
    cpu.batchnormForwardTrain(x, weight, bias, y, xhat, mean, unbiased, invStd, 1e-5, shape, 'plain');
    cpu.batchnormBackward(dy, xhat, weight, invStd, dx, dw, db, shape, 'plain');
    const m = n * spatial;
    const at = (sample: number, c: number, s: number): number => (sample * channels + c) * spatial + s;
    const each = (c: number, f: (i: number) => void): void => {
      for (let sample = 0; sample < n; ++sample) for (let s = 0; s < spatial; ++s) f(at(sample, c, s));
    };
    const expected = {
      y: new Float32Array(x.length),
      xhat: new Float32Array(x.length),
      dx: new Float32Array(x.length),
      mean: new Float64Array(channels),
      unbiased: new Float64Array(channels),
      invStd: new Float64Array(channels),
      dw: new Float32Array(channels),
      db: new Float32Array(channels),
    };
    for (let c = 0; c < channels; ++c) {
      let sum = 0,
        squares = 0,
        dySum = 0,
        dyXhat = 0;
      each(c, (i) => {
        sum += x[i];
      });
      const mu = sum / m;
      each(c, (i) => {
        const centred = x[i] - mu;
        squares += centred * centred;
      });
      const inv = 1 / Math.sqrt(squares / m + 1e-5);
      [expected.mean[c], expected.unbiased[c], expected.invStd[c]] = [mu, squares / (m - 1), inv];
      each(c, (i) => {
        expected.xhat[i] = Math.fround((x[i] - mu) * inv);
        expected.y[i] = Math.fround(expected.xhat[i] * weight[c] + bias[c]);
      });
      each(c, (i) => {
        dySum += dy[i];
        dyXhat += dy[i] * expected.xhat[i];
      });
      [expected.db[c], expected.dw[c]] = [dySum, dyXhat];
      const scale = weight[c] * inv;
      each(c, (i) => {
        expected.dx[i] = Math.fround(scale * (dy[i] - dySum / m - expected.xhat[i] * (dyXhat / m)));
      });
    }
    const got = { y, xhat, dx, mean, unbiased, invStd, dw, db };
    for (const [name, values] of Object.entries(expected)) {
      assert.ok(Buffer.from(got[name as keyof typeof got].buffer).equals(Buffer.from(values.buffer)), `${name} differs from the loops`);
    }
  });

  it('linear: forward and gradients (input, weights, bias)', () => {
    const [n, i, o] = [5, 7, 3];
    const x = randomTensor(n * i, 7),
      w = randomTensor(o * i, 8),
      b = randomTensor(o, 9);
    const y = new Float32Array(n * o),
      dy = randomTensor(n * o, 10);
    const dx = new Float32Array(n * i),
      dw = new Float32Array(o * i),
      db = new Float32Array(o);
    cpu.linearForward(x, w, b, y, [n, i, o]);
    for (let s = 0; s < n; ++s)
      for (let k = 0; k < o; ++k) {
        let sum = b[k];
        for (let j = 0; j < i; ++j) sum += x[s * i + j] * w[k * i + j];
        assert.ok(Math.abs(y[s * o + k] - sum) < 1e-5);
      }
    cpu.linearBackward(x, w, dy, dx, dw, db, [n, i, o]);
    const loss = (): number => {
      cpu.linearForward(x, w, b, y, [n, i, o]);
      return dot(y, dy);
    };
    checkGradient('dx', x, dx, loss);
    checkGradient('dw', w, dw, loss);
    checkGradient('db', b, db, loss);
  });

  it('relu and softmax cross-entropy: gradients', () => {
    const x = randomTensor(60, 11),
      y = new Float32Array(60),
      dy = randomTensor(60, 12),
      dx = new Float32Array(60);
    cpu.reluForward(x, y);
    assert.deepEqual(
      [...y],
      [...x].map((v) => Math.max(v, 0)),
    );
    cpu.reluBackward(x, dy, dx);
    checkGradient(
      'relu dx',
      x,
      dx,
      () => {
        cpu.reluForward(x, y);
        return dot(y, dy);
      },
      { eps: 1e-3 },
    );

    const logits = randomTensor(4 * 10, 13).map((v) => v * 3);
    const labels = Int32Array.of(0, 9, 3, 3);
    const dlogits = new Float32Array(40);
    const loss = cpu.softmaxCrossEntropy(logits, labels, dlogits, [4, 10]);
    let expected = 0;
    for (let s = 0; s < 4; ++s) {
      const row = [...logits.subarray(s * 10, s * 10 + 10)];
      expected += Math.log(row.reduce((a, v) => a + Math.exp(v), 0)) - row[labels[s]];
    }
    assert.ok(Math.abs(loss - expected / 4) < 1e-12);
    const scratch = new Float32Array(40);
    checkGradient('dlogits', logits, dlogits, () => cpu.softmaxCrossEntropy(logits, labels, scratch, [4, 10]), {
      eps: 1e-3,
      tolerance: 1e-3,
    });
  });

  it('addInPlace adds element-wise with float32 rounding, and checks lengths', () => {
    const acc = randomTensor(1001, 21).map((v) => v * 1e3);
    const x = randomTensor(1001, 22).map((v) => v * 1e-3);
    const expected = acc.map((v, i) => Math.fround(v + x[i]));
    cpu.addInPlace(acc, x);
    assert.deepEqual(acc, expected);
    assert.throws(() => cpu.addInPlace(acc, new Float32Array(3)), /addInPlace: expected x to be a Float32Array of 1001 elements/);
  });

  it('sgdUpdate applies momentum and weight decay', () => {
    const p = Float32Array.of(1, -2),
      g = Float32Array.of(0.5, 0.25),
      v = Float32Array.of(0.1, 0);
    cpu.sgdUpdate(p, g, v, 0.1, 0.9, 0.01);
    const f = Math.fround; // float32 arithmetic: round the operands and every result
    const v0 = f(f(f(0.9) * f(0.1)) + f(f(0.5) + f(f(0.01) * 1)));
    const v1 = f(f(f(0.9) * 0) + f(f(0.25) + f(f(0.01) * -2)));
    assert.deepEqual([...v], [v0, v1]);
    assert.deepEqual([...p], [f(1 - f(f(0.1) * v0)), f(-2 - f(f(0.1) * v1))]);
  });

  it('gives the same bits on every run', () => {
    const run = (): Float32Array[] => {
      const t = conv(convShape);
      cpu.conv2dForward(t.x, t.w, t.b, t.y, convShape);
      cpu.conv2dBackwardData(t.dy, t.w, t.dx, convShape);
      cpu.conv2dBackwardWeights(t.x, t.dy, t.dw, t.db, convShape);
      return [t.y, t.dx, t.dw, t.db];
    };
    const first = run();
    for (let r = 0; r < 3; ++r) {
      run().forEach((a, i) => assert.ok(Buffer.from(a.buffer).equals(Buffer.from(first[i].buffer))));
    }
  });

  it('rejects bad arguments with errors naming them', () => {
    const t = conv(convShape);
    assert.throws(() => cpu.conv2dForward(t.x, t.w, t.b, new Float32Array(3), convShape), {
      name: 'TypeError',
      message: 'conv2dForward: expected y to be a Float32Array of 96 elements, got Float32Array of 3',
    });
    assert.throws(() => cpu.conv2dForward(t.x, t.w, t.b, t.y, [2, 3, 7] as unknown as ConvShape), {
      name: 'TypeError',
      message: 'conv2dForward: expected shape to be an Array of 9 integers >= 0, got Array',
    });
    assert.throws(() => cpu.softmaxCrossEntropy(new Float32Array(4), Int32Array.of(0, 2), new Float32Array(4), [2, 2]), {
      name: 'RangeError',
      message: 'softmaxCrossEntropy: labels[1] is 2, outside 0..1',
    });
    assert.throws(() => cpu.pool2dForward('median' as PoolKind, t.x, t.y, new Uint8Array(0), [1, 1, 2, 2, 2, 2, 0]), {
      name: 'TypeError',
      message: "pool2dForward: expected kind to be 'max' or 'avg', got string",
    });
    const [values, two] = [new Float32Array(8), new Float32Array(2)];
    assert.throws(
      () =>
        cpu.batchnormForwardTrain(
          values,
          two,
          two,
          values,
          values,
          new Float32Array(2) as unknown as Float64Array,
          new Float64Array(2),
          new Float64Array(2),
          1e-5,
          [2, 2, 2],
        ),
      { name: 'TypeError', message: 'batchnormForwardTrain: expected mean to be a Float64Array of 2 elements, got Float32Array' },
    );
    assert.throws(() => cpu.layernormForward(values, two, two, values, values, new Float64Array(4), 0, [4, 2]), {
      name: 'TypeError',
      message: 'layernormForward: expected eps to be a number > 0, got number 0',
    });
    assert.throws(() => cpu.globalAvgPoolForward(values, new Float32Array(3), [2, 2, 2]), {
      name: 'TypeError',
      message: 'globalAvgPoolForward: expected y to be a Float32Array of 4 elements, got Float32Array of 3',
    });
    assert.throws(() => cpu.conv2dForward(t.x, t.w, t.b, t.y, convShape, 'nhwc' as Layout), {
      name: 'TypeError',
      message: "conv2dForward: expected xLayout to be 'plain' or 'blocked', got string",
    });
  });
});
