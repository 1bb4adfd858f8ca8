// The transformer's CPU kernels (binding/src/cpu/transformer.cc): causal attention against a
// double-precision reference and finite differences, its causality, the same bits at any thread
// count; GELU at known values and its derivative, both against a double-precision reference over
// [-10, 10] and beyond; the same bits from each build of the softmax and GELU loops (fast_math.h's exp
// and erfc); the embedding's exact values and its refusal of a bad token; the sum of squares' fixed
// order; the scale in place; dropout's mask, src/base/random.ts's draw, and the product applying it.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { cpuLevels, type AttentionShape, type EmbeddingShape } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import { uniform } from '../../src/base/random';
import { checkGradient, dot, randomTensor } from '../helpers/gradcheck';

/** Whether a and b hold the same bits. */
function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function scaled(x: Float32Array, by: number): Float32Array {
  return x.map((v) => v * by);
}

/** att[N, H, T, T] and y[N, T, C] by loops in double: the contract's causal softmax(q k^T / sqrt(D)) v. */
function referenceAttention(qkv: Float32Array, [n, t, h, d]: AttentionShape): { att: Float64Array; y: Float64Array } {
  const c = h * d;
  const att = new Float64Array(n * h * t * t);
  const y = new Float64Array(n * t * c);
  const at = (s: number, i: number, part: number, head: number, k: number): number => qkv[(s * t + i) * 3 * c + part * c + head * d + k];
  for (let s = 0; s < n; ++s)
    for (let head = 0; head < h; ++head)
      for (let i = 0; i < t; ++i) {
        const scores: number[] = [];
        for (let j = 0; j <= i; ++j) {
          let sum = 0;
          for (let k = 0; k < d; ++k) sum += at(s, i, 0, head, k) * at(s, j, 1, head, k);
          scores.push(sum / Math.sqrt(d));
        }
        const max = Math.max(...scores);
        const exps = scores.map((v) => Math.exp(v - max));
        const total = exps.reduce((a, b) => a + b);
        const row = ((s * h + head) * t + i) * t;
        exps.forEach((e, j) => (att[row + j] = e / total));
        for (let k = 0; k < d; ++k) {
          let sum = 0;
          for (let j = 0; j <= i; ++j) sum += att[row + j] * at(s, j, 2, head, k);
          y[(s * t + i) * c + head * d + k] = sum;
        }
      }
  return { att, y };
}

/**
 * The standard normal distribution's cdf Phi(x) in double, for the kernels' float x: the tail
 * Phi(-|x|) = erfc(|x| / sqrt 2) / 2 by erf's series of positive terms below |x| / sqrt 2 = 1 and by
 * Laplace's continued fraction for erfc (300 terms) from there (relative error below 1e-14 against
 * mpmath over [-12, 12]); exp(-x^2 / 2) with its argument exact (x^2 of a float is a double).
 */
function normalCdf(x: number): number {
  const z = Math.abs(x) / Math.SQRT2;
  const gauss = Math.exp(-0.5 * x * x);
  let tail: number;
  if (z < 1) {
    // erf(z) = 2 / sqrt(pi) exp(-z^2) sum over n of z (2 z^2)^n / (1 3 5 ... (2n + 1))
    let term = z;
    let sum = z;
    for (let n = 1; term > 1e-17 * sum; ++n) {
      term *= (2 * z * z) / (2 * n + 1);
      sum += term;
    }
    tail = (1 - (2 / Math.sqrt(Math.PI)) * gauss * sum) / 2;
  } else {
    // erfc(z) = exp(-z^2) / sqrt(pi) / (z + (1/2) / (z + 1 / (z + (3/2) / (z + 2 / (z + ...)))))
    let f = z;
    for (let k = 300; k >= 1; --k) f = z + k / 2 / f;
    tail = gauss / Math.sqrt(Math.PI) / f / 2;
  }
  return x < 0 ? tail : 1 - tail;
}

/** GELU(x) = x Phi(x) and GELU'(x) = Phi(x) + x phi(x), in double. */
function referenceGelu(x: number): { y: number; slope: number } {
  const cdf = normalCdf(x);
  return { y: x * cdf, slope: cdf + (x * Math.exp(-0.5 * x * x)) / Math.sqrt(2 * Math.PI) };
}

/** The float ulp at v: the gap between the float32 nearest |v| and the next one above it. */
function floatUlp(v: number): number {
  const f = new Float32Array([Math.abs(v)]);
  const at = f[0];
  new Uint32Array(f.buffer)[0] += 1;
  return f[0] - at;
}

/**
 * In a child process that pins `level` (a process runs one build of fast_math's loops for its life):
 * sha256 of GELU and its derivative over [-20, 20] and of attention's probabilities on scores that
 * every product computes exactly (halves in [-4, 4], D = 16: sums of quarters below 2^8), so that
 * only the softmax's build, not OpenBLAS's kernels of the level, could change a bit. Rounded to
 * float, these would seldom show a difference in a double's last bit (a build that fused multiply-adds
 * gave the same floats here): what they catch is a build that computes something else.
 */
function fastMathBits(level: string): string {
  const code = `
    const { createHash } = require('node:crypto');
    const { cpu } = require('./dist/src/nn/cpu');
    cpu.pinLevel(process.argv[1]);
    const hash = createHash('sha256');
    const add = (a) => hash.update(Buffer.from(a.buffer, a.byteOffset, a.byteLength));
    const x = Float32Array.from({ length: 40_001 }, (_, i) => i / 1000 - 20 + (i % 7) * 1e-4);
    const y = new Float32Array(x.length);
    const dx = new Float32Array(x.length);
    cpu.geluForward(x, y);
    cpu.geluBackward(x, x.map((v, i) => 1 + (i % 3)), dx);
    [y, dx].forEach(add);
    const shape = [2, 150, 3, 16];
    const qkv = Float32Array.from({ length: 2 * 150 * 3 * 48 }, (_, i) => (((i * 37) % 17) - 8) / 2);
    const att = new Float32Array(2 * 3 * 150 * 150);
    cpu.attentionForward(qkv, att, new Float32Array(2 * 150 * 48), shape);
    add(att);
    process.stdout.write(hash.digest('hex'));`;
  const run = spawnSync(process.execPath, ['-e', code, level], {
    encoding: 'utf8',
    timeout: 60_000,
    cwd: path.join(__dirname, '..', '..', '..'),
  });
  assert.equal(run.status, 0, `fast_math bits at ${level}: ${run.stderr}`);
  return run.stdout;
}

function attention(shape: AttentionShape, seed: number) {
  const [n, t, h, d] = shape;
  const c = h * d;
  return {
    qkv: randomTensor(n * t * 3 * c, seed),
    att: new Float32Array(n * h * t * t),
    y: new Float32Array(n * t * c),
    dy: randomTensor(n * t * c, seed + 1),
    dqkv: new Float32Array(n * t * 3 * c),
  };
}

describe('transformer kernels', () => {
  // T = 150: three of the kernel's causal row blocks of 64, the last one partial
  const shape: AttentionShape = [2, 150, 3, 8];

  after(() => cpu.setThreads(1));

  it('attentionForward equals causal softmax attention in double, zeros above the diagonal', () => {
    // qkv x1: flat softmax rows, |error| <= 1e-6 (seen: 9e-8); x6: peaked rows, scores 36x larger and
    // so their float32 rounding too, |error| <= 1e-4 (seen: 1.4e-5 in y, whose values reach 6)
    for (const [by, tolerance] of [
      [1, 1e-6],
      [6, 1e-4],
    ]) {
      const a = attention(shape, 1);
      a.qkv = scaled(a.qkv, by);
      a.att.fill(NaN);
      cpu.attentionForward(a.qkv, a.att, a.y, shape);
      const expected = referenceAttention(a.qkv, shape);
      const [, t] = shape;
      a.att.forEach((got, i) => {
        if (i % t > Math.floor(i / t) % t) assert.ok(Object.is(got, 0), `att[${i}] = ${got} above the diagonal, expected 0`);
        else assert.ok(Math.abs(got - expected.att[i]) <= tolerance, `x${by}: att[${i}] = ${got}, expected ${expected.att[i]}`);
      });
      a.y.forEach((got, i) => assert.ok(Math.abs(got - expected.y[i]) <= tolerance, `x${by}: y[${i}] = ${got}, expected ${expected.y[i]}`));
    }
  });

  it('attentionForward stays finite for scores far beyond exp()’s float range', () => {
    const a = attention([1, 70, 2, 4], 3);
    a.qkv = scaled(a.qkv, 100); // scores up to 2e4
    cpu.attentionForward(a.qkv, a.att, a.y, [1, 70, 2, 4]);
    assert.ok(a.att.every(Number.isFinite) && a.y.every(Number.isFinite));
    for (let row = 0; row < 2 * 70; ++row) {
      const sum = a.att.subarray(row * 70, (row + 1) * 70).reduce((x, v) => x + v, 0);
      assert.ok(Math.abs(sum - 1) < 1e-5, `row ${row} of att sums to ${sum}`);
    }
  });

  it('attentionBackward matches central finite differences of sum(y r) (step 1e-2, |error| <= 1e-3 max(1, |numeric|); seen: 9e-5) and overwrites all of dqkv', () => {
    // T = 67: a full row block and a partial one, so the blocked products' edges are crossed
    const small: AttentionShape = [2, 67, 2, 4];
    const a = attention(small, 5);
    a.qkv = scaled(a.qkv, 2);
    a.dqkv.fill(NaN);
    cpu.attentionForward(a.qkv, a.att, a.y, small);
    cpu.attentionBackward(a.qkv, a.att, a.dy, a.dqkv, small);
    assert.ok(a.dqkv.every(Number.isFinite), 'every element of dqkv is written');
    const loss = (): number => {
      cpu.attentionForward(a.qkv, a.att, a.y, small);
      return dot(a.y, a.dy);
    };
    checkGradient('dqkv', a.qkv, a.dqkv, loss, { eps: 1e-2, tolerance: 1e-3, samples: 400 });
  });

  it('attention is causal: changing position 100 leaves the outputs of positions 0..99 the same bits', () => {
    const a = attention(shape, 7);
    cpu.attentionForward(a.qkv, a.att, a.y, shape);
    const [n, t, h, d] = shape;
    const c = h * d;
    const changed = a.qkv.slice();
    for (let s = 0; s < n; ++s) for (let k = 0; k < 3 * c; ++k) changed[(s * t + 100) * 3 * c + k] += 0.75;
    const att = new Float32Array(a.att.length);
    const y = new Float32Array(a.y.length);
    cpu.attentionForward(changed, att, y, shape);
    for (let s = 0; s < n; ++s) {
      const before = (k: number) => (u: Float32Array) => u.subarray(s * t * c, (s * t + k) * c);
      assert.ok(sameBits(before(100)(a.y), before(100)(y)), `sequence ${s}: y before position 100 changed`);
      assert.ok(!sameBits(before(101)(a.y), before(101)(y)), `sequence ${s}: y at position 100 did not change`);
      for (let head = 0; head < h; ++head) {
        const rows = (u: Float32Array) => u.subarray((s * h + head) * t * t, ((s * h + head) * t + 100) * t);
        assert.ok(sameBits(rows(a.att), rows(att)), `sequence ${s}, head ${head}: att rows before 100 changed`);
      }
    }
  });

  it('attention, GELU, embedding and the sum of squares give the same bits at 1 and 2 threads', () => {
    const run = (threads: number) => {
      cpu.setThreads(threads);
      const a = attention([3, 90, 3, 16], 11);
      cpu.attentionForward(a.qkv, a.att, a.y, [3, 90, 3, 16]);
      cpu.attentionBackward(a.qkv, a.att, a.dy, a.dqkv, [3, 90, 3, 16]);
      const x = scaled(randomTensor(100_000, 12), 4);
      const dy = randomTensor(x.length, 13);
      const gelu = new Float32Array(x.length);
      const dgelu = new Float32Array(x.length);
      cpu.geluForward(x, gelu);
      cpu.geluBackward(x, dy, dgelu);
      const embShape: EmbeddingShape = [4, 64, 200, 50];
      const tokens = randomTensor(4 * 65, 14).map((v) => Math.floor((v + 1) * 25));
      const emb = new Float32Array(4 * 64 * 200);
      cpu.embeddingForward(tokens, 65, randomTensor(50 * 200, 15), randomTensor(64 * 200, 16), emb, embShape);
      const squares = cpu.sumOfSquares(randomTensor(300_000, 17));
      return { outputs: [a.att, a.y, a.dqkv, gelu, dgelu, emb], squares };
    };
    try {
      const one = run(1);
      const two = run(2);
      ['att', 'y', 'dqkv', 'gelu', 'dgelu', 'embedding'].forEach((name, i) =>
        assert.ok(sameBits(one.outputs[i], two.outputs[i]), `${name} differs between 1 and 2 threads`),
      );
      assert.ok(Object.is(one.squares, two.squares), `sumOfSquares: ${one.squares} at 1 thread, ${two.squares} at 2`);
    } finally {
      cpu.setThreads(1);
    }
  });

  it('attention refuses arrays of the wrong size', () => {
    const a = attention([1, 4, 2, 2], 1);
    assert.throws(() => cpu.attentionForward(a.qkv, new Float32Array(31), a.y, [1, 4, 2, 2]), {
      name: 'TypeError',
      message: 'attentionForward: expected att to be a Float32Array of 32 elements, got Float32Array of 31',
    });
    assert.throws(() => cpu.attentionBackward(a.qkv, a.att, a.dy, new Float32Array(3), [1, 4, 2, 2]), {
      name: 'TypeError',
      message: 'attentionBackward: expected dqkv to be a Float32Array of 48 elements, got Float32Array of 3',
    });
  });

  it('GELU at known values: GELU(0) = 0, GELU(1) = Phi(1), GELU(-1) = -Phi(-1), GELU(3) = 3 Phi(3); its derivative Phi(x) + x phi(x) there', () => {
    const x = Float32Array.from([0, 1, -1, 3]);
    const y = new Float32Array(4);
    cpu.geluForward(x, y);
    [0, 0.8413447460685429, -0.15865525393145707, 2.99595030590511].forEach((v, i) => assert.equal(y[i], Math.fround(v), `GELU(${x[i]})`));
    const dx = new Float32Array(4);
    cpu.geluBackward(x, Float32Array.from([1, 1, 1, 2]), dx);
    // GELU'(0) = 1/2; dy = 2 at x = 3
    [0.5, 1.0833154705876864, -0.08331547058768629, 2 * 1.011945647204184].forEach((v, i) =>
      assert.equal(dx[i], Math.fround(v), `dy GELU'(${x[i]})`),
    );
  });

  it('geluBackward matches central finite differences of sum(GELU(x) r) (step 1e-2, |error| <= 1e-3 max(1, |numeric|))', () => {
    const x = scaled(randomTensor(500, 21), 4);
    const r = randomTensor(500, 22);
    const y = new Float32Array(500);
    const dx = new Float32Array(500);
    cpu.geluBackward(x, r, dx);
    checkGradient(
      'dx',
      x,
      dx,
      () => {
        cpu.geluForward(x, y);
        return dot(y, r);
      },
      { eps: 1e-2, tolerance: 1e-3, samples: 500 },
    );
  });

  it('GELU and its derivative are within 2 float ulps of a double-precision reference over [-10, 10] (seen: 0.5, the nearest floats; 0.501 for the derivative by its zero), and exact far out', () => {
    // a sweep in steps of 1e-3, 20000 random floats, and floats around GELU'(x) = 0 (x = -0.7518)
    const points: number[] = [];
    for (let i = 0; i <= 20_000; ++i) points.push(Math.fround(i / 1000 - 10));
    const random = randomTensor(20_000, 31);
    random.forEach((v) => points.push(Math.fround(10 * v)));
    for (let i = -500; i <= 500; ++i) points.push(Math.fround(-0.7517916 + i * 6e-8));
    const x = Float32Array.from(points);
    const dy = new Float32Array(x.length).fill(1);
    const y = new Float32Array(x.length);
    const dx = new Float32Array(x.length);
    cpu.geluForward(x, y);
    cpu.geluBackward(x, dy, dx);
    // the worst error in float ulps of GELU and of GELU'
    const worst = [0, 0];
    x.forEach((v, i) => {
      const expected = referenceGelu(v);
      const ulps = [Math.abs(y[i] - expected.y) / floatUlp(expected.y), Math.abs(dx[i] - expected.slope) / floatUlp(expected.slope)];
      assert.ok(ulps[0] <= 2, `GELU(${v}) = ${y[i]}, expected ${expected.y} (${ulps[0]} ulps)`);
      assert.ok(ulps[1] <= 2, `GELU'(${v}) = ${dx[i]}, expected ${expected.slope} (${ulps[1]} ulps)`);
      ulps.forEach((u, k) => (worst[k] = Math.max(worst[k], u)));
    });
    // GELU is the nearest float everywhere (within the reference's 1e-14); GELU' too but by its zero,
    // where Phi(x) + x phi(x) cancels to about 1e-6 of its terms, so a double's last bits reach the float's
    assert.ok(worst[0] <= 0.5 + 1e-6, `GELU: worst error ${worst[0]} float ulps, not the nearest float everywhere`);
    // the tail keeps its relative accuracy: GELU(-10) = -10 Phi(-10) = -7.6e-23 (by mpmath), not 0
    assert.equal(y[0], Math.fround(-7.619853024160526e-23));
    assert.equal(y[20_000], 10);
    // far out: GELU(x) = x, GELU'(x) = 1 above; GELU(x) = -0 (x times a tail of 0), GELU'(x) = 0 below; a denormal
    // float from -13.15; at the infinities x Phi(x) is inf and -inf * 0 = NaN
    const far = Float32Array.from([20, 1e4, 1e30, 3.4e38, -20, -1e4, -1e30, -3.4e38, -13.5]);
    const farY = new Float32Array(far.length);
    const farDx = new Float32Array(far.length);
    cpu.geluForward(far, farY);
    cpu.geluBackward(far, new Float32Array(far.length).fill(1), farDx);
    for (let i = 0; i < 4; ++i) assert.deepEqual([farY[i], farDx[i]], [far[i], 1], `GELU(${far[i]})`);
    for (let i = 4; i < 8; ++i) assert.ok(Object.is(farY[i], -0) && farDx[i] === 0, `GELU(${far[i]}) = ${farY[i]}, GELU' ${farDx[i]}`);
    assert.equal(farY[8], Math.fround(-1.0555389862638154e-40)); // -13.5 Phi(-13.5), by mpmath
    assert.ok(Math.abs(farY[8]) < 2 ** -126, `GELU(-13.5) = ${farY[8]}: a denormal`);
    const edge = new Float32Array(3);
    cpu.geluForward(Float32Array.of(Infinity, -Infinity, NaN), edge);
    assert.deepEqual([...edge], [Infinity, NaN, NaN]);
  });

  it('the builds of the softmax and GELU loops for each level give the same bits (the lowest level runs the baseline build)', function () {
    this.timeout(120_000);
    const host = cpu.hostLevel();
    const lowest = cpuLevels[0];
    if (host === lowest) this.skip();
    assert.equal(fastMathBits(lowest), fastMathBits(host));
  });

  describe('embedding', () => {
    // N = 2 sequences of T = 2 positions in rows of stride 3 (the third value a target: never read)
    const shape: EmbeddingShape = [2, 2, 3, 5];
    const x = Float32Array.from([3, 0, 99.5, 3, 3, -7]);
    const wte = Float32Array.from({ length: 15 }, (_, i) => 10 * Math.floor(i / 3) + (i % 3)); // row v: 10v, 10v+1, 10v+2
    const wpe = Float32Array.from([0.5, 0.25, 0.125, 1.5, 1.25, 1.125]);
    const dy = Float32Array.from({ length: 12 }, (_, i) => i + 1); // dy[n, t, c] = 6n + 3t + c + 1

    it('forward: y[n, t] = wte[x[n stride + t]] + wpe[t], exactly', () => {
      const y = new Float32Array(12);
      cpu.embeddingForward(x, 3, wte, wpe, y, shape);
      assert.deepEqual([...y], [30.5, 31.25, 32.125, 1.5, 2.25, 3.125, 30.5, 31.25, 32.125, 31.5, 32.25, 33.125]);
    });

    it('backward: dwpe = the sum over sequences; dwte zeroed, or added to with accumulate', () => {
      const dwte = new Float32Array(15).fill(100);
      const dwpe = new Float32Array(6).fill(NaN);
      cpu.embeddingBackward(x, 3, dy, dwte, dwpe, shape, false);
      assert.deepEqual([...dwpe], [1 + 7, 2 + 8, 3 + 9, 4 + 10, 5 + 11, 6 + 12]);
      // token 3 at (0, 0), (1, 0), (1, 1); token 0 at (0, 1)
      const rows = [
        [4, 5, 6],
        [0, 0, 0],
        [0, 0, 0],
        [1 + 7 + 10, 2 + 8 + 11, 3 + 9 + 12],
        [0, 0, 0],
      ];
      assert.deepEqual([...dwte], rows.flat());
      dwte.fill(100);
      cpu.embeddingBackward(x, 3, dy, dwte, dwpe, shape, true);
      assert.deepEqual(
        [...dwte],
        rows.flat().map((v) => v + 100),
      );
    });

    it('refuses a token that is no integer in [0, V), naming its sequence, position and value, before writing anything', () => {
      const y = new Float32Array(12).fill(-1);
      for (const [bad, shown] of [
        [2.5, '2.5'],
        [5, '5'],
        [-1, '-1'],
        [NaN, 'NaN'],
      ] as const) {
        const tokens = x.slice();
        tokens[4] = bad;
        assert.throws(() => cpu.embeddingForward(tokens, 3, wte, wpe, y, shape), {
          name: 'RangeError',
          message: `embeddingForward: the token of sequence 1 at position 1 (x[4]) is ${shown}, not an integer in [0, 5)`,
        });
        assert.throws(() => cpu.embeddingBackward(tokens, 3, dy, new Float32Array(15), new Float32Array(6), shape, false), {
          name: 'RangeError',
          message: `embeddingBackward: the token of sequence 1 at position 1 (x[4]) is ${shown}, not an integer in [0, 5)`,
        });
      }
      assert.ok(
        y.every((v) => v === -1),
        'y untouched',
      );
      assert.throws(() => cpu.embeddingForward(x, 1, wte, wpe, y, shape), {
        name: 'TypeError',
        message: 'embeddingForward: expected stride to be an integer from 2 to 2147483647, got number 1',
      });
    });
  });

  it('sumOfSquares: exact on small integers (over several 2^16 blocks), the same bits as its fixed order in double', () => {
    assert.equal(cpu.sumOfSquares(Float32Array.from([1, -2, 3, -4])), 30);
    assert.equal(cpu.sumOfSquares(new Float32Array(0)), 0);
    const ints = Float32Array.from({ length: 3 * 65536 + 17 }, (_, i) => (i % 201) - 100);
    let exact = 0;
    ints.forEach((v) => (exact += v * v));
    assert.equal(cpu.sumOfSquares(ints), exact);
    const x = randomTensor(300_000, 31);
    let total = 0;
    for (let start = 0; start < x.length; start += 65536) {
      let block = 0;
      for (const v of x.subarray(start, start + 65536)) block += v * v;
      total += block;
    }
    assert.ok(Object.is(cpu.sumOfSquares(x), total), 'blocks of 2^16 in order, each in order');
  });

  it('scaleInPlace: x *= float32(scale), each product rounded to float32', () => {
    const x = randomTensor(70_000, 41);
    const expected = x.map((v) => Math.fround(v * Math.fround(0.1)));
    cpu.scaleInPlace(x, 0.1);
    assert.ok(sameBits(x, expected));
  });

  it("dropoutMask: 0 where random.ts's uniform(...keys, i) < p, else float32(1 / (1 - p)) (keys taken modulo 2^32, as hashKeys takes them); multiply: each product rounded to float32; bad arguments refused in one line", () => {
    const n = 50_000;
    for (const [p, keys] of [
      [0.1, [1, 4, 0, 7, 2]],
      [0.5, [2 ** 32 + 5, 2 ** 40, 3]],
      [0, [0]],
    ] as [number, number[]][]) {
      const mask = new Float32Array(n).fill(-1);
      cpu.dropoutMask(mask, p, keys);
      const expected = Float32Array.from({ length: n }, (_, i) => (uniform(...keys, i) < p ? 0 : 1 / (1 - p)));
      assert.ok(sameBits(mask, expected), `p ${p}, keys ${keys.join(',')}`);
    }
    const [a, b] = [randomTensor(n, 42), randomTensor(n, 43)];
    const y = new Float32Array(n);
    cpu.multiply(a, b, y);
    assert.ok(
      sameBits(
        y,
        a.map((v, i) => Math.fround(v * b[i])),
      ),
    );
    const mask = new Float32Array(4);
    assert.throws(() => cpu.dropoutMask(mask, 1, [1]), {
      name: 'TypeError',
      message: 'dropoutMask: expected p to be a number in [0, 1), got number 1',
    });
    assert.throws(() => cpu.dropoutMask(mask, 0.5, [1, 2.5]), {
      name: 'TypeError',
      message: 'dropoutMask: expected keys to be an Array of integers >= 0, got Array',
    });
    assert.throws(() => cpu.multiply(a, b, mask), {
      name: 'TypeError',
      message: `multiply: expected y to be a Float32Array of ${n} elements, got Float32Array of 4`,
    });
  });
});
