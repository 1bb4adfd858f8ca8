// Reed-Solomon erasure coding over raw bytes (ISA-L in the addon): every pattern of up to m lost
// fragments is rebuilt bit for bit from the k left; encoding some parity rows equals those rows of
// a full encode; the parity bytes equal a GF(2^8) reference of ISA-L's Cauchy matrix written here
// (and, for one data fragment, values worked by hand); Float32Array views at an offset code their
// own bytes and no others; bad arguments fail with exact messages.
import { strict as assert } from 'node:assert';
import { ecDecode, ecEncode } from '../../src/checkpoint/erasure';
import { stream } from '../../src/base/random';
import { randomTensor } from '../helpers/gradcheck';

function randomBytes(length: number, seed: number): Uint8Array {
  const next = stream(seed);
  return Uint8Array.from({ length }, () => Math.floor(next() * 256));
}

/** The k-element subsets of 0 .. n-1, each in ascending order. */
function subsets(n: number, k: number): number[][] {
  if (k === 0) return [[]];
  if (n < k) return [];
  return [...subsets(n - 1, k), ...subsets(n - 1, k - 1).map((s) => [...s, n - 1])];
}

/** All k + m fragments of random data fragments of `length` bytes: data 0 .. k-1, then parity. */
function encodedFragments(k: number, m: number, length: number, seed: number): Uint8Array[] {
  const data = Array.from({ length: k }, (_, i) => randomBytes(length, seed + i));
  const parity = Array.from({ length: m }, () => new Uint8Array(length));
  ecEncode(k, m, data, parity);
  return [...data, ...parity];
}

/** Product in GF(2^8) modulo x^8 + x^4 + x^3 + x^2 + 1 (0x11d, ISA-L's), by shift and add. */
function gfMul(a: number, b: number): number {
  let product = 0;
  for (; b > 0; b >>= 1) {
    if (b & 1) product ^= a;
    a <<= 1;
    if (a & 0x100) a ^= 0x11d;
  }
  return product;
}

function gfInverse(a: number): number {
  for (let b = 1; b < 256; ++b) if (gfMul(a, b) === 1) return b;
  throw new Error(`${a} has no inverse`);
}

/** Parity row `row` as gf_gen_cauchy1_matrix defines it: the sum of data[i] / ((k + row) ^ i). */
function referenceParity(data: Uint8Array[], row: number): Uint8Array {
  const k = data.length;
  const parity = new Uint8Array(data[0].length);
  data.forEach((fragment, i) => {
    const coefficient = gfInverse((k + row) ^ i);
    fragment.forEach((byte, b) => {
      parity[b] ^= gfMul(coefficient, byte);
    });
  });
  return parity;
}

const bytesOf = (view: ArrayBufferView): Uint8Array => new Uint8Array(view.buffer, view.byteOffset, view.byteLength);

describe('erasure coding', () => {
  for (const [k, m] of [
    [2, 1],
    [2, 2],
    [3, 2],
    [4, 2],
    [1, 3],
  ]) {
    it(`k=${k}, m=${m}: every loss of up to ${m} fragment${m > 1 ? 's' : ''} is rebuilt bit for bit`, () => {
      const n = k + m;
      for (const length of [1, 17, 4099]) {
        const all = encodedFragments(k, m, length, length);
        // exactly m lost: every set of k present fragments rebuilds all k + m (itself included)
        for (const present of subsets(n, k)) {
          const wanted = [...Array(n).keys()];
          const outputs = wanted.map(() => new Uint8Array(length));
          ecDecode(
            k,
            m,
            present,
            present.map((i) => all[i]),
            wanted,
            outputs,
          );
          wanted.forEach((w, j) => assert.deepEqual(outputs[j], all[w], `length ${length}, present ${present}: fragment ${w}`));
        }
        // fewer lost: the last k survivors (parity where there is some) rebuild just those lost
        for (let lostCount = 1; lostCount < m; ++lostCount) {
          for (const lost of subsets(n, lostCount)) {
            const present = [...Array(n).keys()].filter((i) => !lost.includes(i)).slice(-k);
            const outputs = lost.map(() => new Uint8Array(length));
            ecDecode(
              k,
              m,
              present,
              present.map((i) => all[i]),
              lost,
              outputs,
            );
            lost.forEach((w, j) => assert.deepEqual(outputs[j], all[w], `length ${length}, lost ${lost}: fragment ${w}`));
          }
        }
      }
    });
  }

  it('encoding some parity rows gives the bytes of those rows of a full encode', () => {
    const [k, m, length] = [3, 4, 4099];
    const all = encodedFragments(k, m, length, 7);
    const data = all.slice(0, k);
    for (const rows of [[3, 1], [2], [0, 1, 2, 3]]) {
      const parity = rows.map(() => new Uint8Array(length));
      ecEncode(k, m, data, parity, rows);
      rows.forEach((row, j) => assert.deepEqual(parity[j], all[k + row], `rows ${rows}: row ${row}`));
    }
  });

  it("parity bytes equal a GF(2^8) reference of ISA-L's Cauchy matrix", () => {
    for (const [k, m] of [
      [2, 2],
      [3, 2],
      [4, 2],
      [5, 3],
    ]) {
      for (const length of [5, 100]) {
        // below and above the SIMD kernels' 32 or 64-byte blocks
        const all = encodedFragments(k, m, length, 31 * k + m);
        for (let row = 0; row < m; ++row) {
          assert.deepEqual(all[k + row], referenceParity(all.slice(0, k), row), `k=${k}, m=${m}, length ${length}: row ${row}`);
        }
      }
    }
  });

  it('with one data fragment, parity row 0 is a copy and row j the data divided by 1 + j in GF(2^8)', () => {
    const data = Uint8Array.from([0, 1, 2, 0x80, 0xff]);
    const parity = [0, 1, 2].map(() => new Uint8Array(data.length));
    ecEncode(1, 3, [data], parity);
    assert.deepEqual(parity[0], data);
    // 2 x 0x8e = 0x11c = 1 modulo 0x11d; 3 x 0xf4 = 0xf4 ^ 0xf5 = 1
    assert.deepEqual(parity[1], Uint8Array.from([0, 0x8e, 0x01, 0x40, 0xf1]));
    assert.deepEqual(parity[2], Uint8Array.from([0, 0xf4, 0xf5, 0x8b, gfMul(0xff, 0xf4)]));
  });

  it('codes the bytes of Float32Array views at an offset (and a DataView), and writes no byte outside them', () => {
    const n = 1001;
    const state = randomTensor(2 * n + 3, 5);
    const data = [state.subarray(1, 1 + n), state.subarray(2 + n, 2 + 2 * n)];
    const expected = [new Uint8Array(4 * n), new Uint8Array(4 * n)];
    ecEncode(
      2,
      2,
      data.map((d) => bytesOf(d).slice()),
      expected,
    );

    const out = new Float32Array(2 * n + 3).fill(-1);
    const parity = [out.subarray(1, 1 + n), new DataView(out.buffer, 4 * (2 + n), 4 * n)];
    ecEncode(2, 2, data, parity);
    parity.forEach((p, j) => assert.deepEqual(bytesOf(p), expected[j], `parity ${j}`));
    assert.deepEqual([out[0], out[1 + n], out[2 + 2 * n]], [-1, -1, -1]);

    const rebuilt = new Float32Array(n + 2);
    ecDecode(2, 2, [1, 2], [data[1], parity[0]], [0], [rebuilt.subarray(1, 1 + n)]);
    assert.deepEqual(bytesOf(rebuilt.subarray(1, 1 + n)), bytesOf(data[0]));
    assert.deepEqual([rebuilt[0], rebuilt[n + 1]], [0, 0]);
  });

  it('rejects bad arguments with exact messages', () => {
    const bytes = (length: number): Uint8Array => new Uint8Array(length);
    const cases: [() => void, string][] = [
      [
        () => ecEncode(2, 1, [bytes(17), bytes(16)], [bytes(17)]),
        'ec.encode: expected data[1] to be 17 bytes long like data[0], got 16 bytes',
      ],
      [
        () => ecEncode(2, 1, [bytes(17), bytes(17)], [bytes(18)]),
        'ec.encode: expected parity[0] to be 17 bytes long like data[0], got 18 bytes',
      ],
      [
        () => ecEncode(2, 1, [bytes(4), bytes(4), bytes(4)], [bytes(4)]),
        'ec.encode: expected data to be 2 buffers (one per data fragment), got 3',
      ],
      [() => ecEncode(2, 2, [bytes(4), bytes(4)], [bytes(4)]), 'ec.encode: expected parity to be 2 buffers (one per entry of rows), got 1'],
      [
        () => ecEncode(2, 2, [bytes(4), bytes(4)], [bytes(4)], [2]),
        'ec.encode: expected rows to be distinct parity rows from 0 to 1, got [2]',
      ],
      [
        () => ecEncode(2, 2, [bytes(4), bytes(4)], [bytes(4), bytes(4)], [1, 1]),
        'ec.encode: expected rows to be distinct parity rows from 0 to 1, got [1, 1]',
      ],
      [() => ecEncode(0, 1, [], []), 'ec.encode: expected k to be an integer from 1 to 254, got number 0'],
      [() => ecEncode(200, 56, [], []), 'ec.encode: expected m to be an integer from 1 to 55, got number 56'],
      [
        () => ecEncode(1, 1, [[1, 2] as unknown as Uint8Array], [bytes(2)]),
        'ec.encode: expected data[0] to be an ArrayBufferView, got Array',
      ],
      [
        () => ecEncode(1, 1, [bytes(4)], [bytes(4)], [0.5]),
        'ec.encode: expected rows to be an Array of integers from 0 to 254, got number 0.5',
      ],
      [
        () => ecDecode(3, 2, [0, 4], [bytes(8), bytes(8)], [1], [bytes(8)]),
        'ec.decode: expected present to be 3 distinct fragment indices from 0 to 4, got [0, 4]',
      ],
      [
        () => ecDecode(2, 2, [0, 0], [bytes(8), bytes(8)], [1], [bytes(8)]),
        'ec.decode: expected present to be 2 distinct fragment indices from 0 to 3, got [0, 0]',
      ],
      [
        () => ecDecode(2, 2, [0, 3], [bytes(8), bytes(8)], [4], [bytes(8)]),
        'ec.decode: expected wanted to be distinct fragment indices from 0 to 3, got [4]',
      ],
      [
        () => ecDecode(2, 2, [0, 3], [bytes(8)], [1], [bytes(8)]),
        'ec.decode: expected fragments to be 2 buffers (one per entry of present), got 1',
      ],
      [
        () => ecDecode(2, 2, [0, 3], [bytes(8), bytes(8)], [1, 2], [bytes(8)]),
        'ec.decode: expected outputs to be 2 buffers (one per entry of wanted), got 1',
      ],
    ];
    for (const [call, message] of cases) assert.throws(call, { name: 'TypeError', message });

    const shared = new Uint8Array(24);
    assert.throws(() => ecEncode(2, 1, [shared.subarray(0, 8), shared.subarray(8, 16)], [shared.subarray(12, 20)]), {
      name: 'TypeError',
      message: 'ec.encode: expected parity[0] to be apart from every other buffer, got it overlapping data[1]',
    });
    assert.throws(() => ecDecode(1, 2, [0], [bytes(8)], [1, 2], [shared.subarray(0, 8), shared.subarray(4, 12)]), {
      name: 'TypeError',
      message: 'ec.decode: expected outputs[1] to be apart from every other buffer, got it overlapping outputs[0]',
    });
  });
});
