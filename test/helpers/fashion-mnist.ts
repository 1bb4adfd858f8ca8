// Reads Fashion-MNIST straight from Debian's dataset-fashion-mnist (gzip'd IDX files) for tests and
// benchmarks that need real images before the Arrow datasets exist. Pixels scaled to [0, 1].
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';

export const fashionMnistDir = '/usr/share/datasets/fashion-mnist';

export interface Images {
  count: number;
  /** [count, 1, 28, 28] */
  pixels: Float32Array;
  labels: Int32Array;
}

function readIdx(file: string, magic: number): Buffer {
  const data = zlib.gunzipSync(fs.readFileSync(file));
  if (data.readUInt32BE(0) !== magic) throw new Error(`${file}: not an IDX file with magic ${magic}`);
  return data;
}

/** The first `limit` samples of the 'train' or 't10k' split. */
export function loadFashionMnist(split: 'train' | 't10k', limit: number): Images {
  const images = readIdx(path.join(fashionMnistDir, `${split}-images-idx3-ubyte.gz`), 2051);
  const labels = readIdx(path.join(fashionMnistDir, `${split}-labels-idx1-ubyte.gz`), 2049);
  const count = Math.min(limit, images.readUInt32BE(4));
  const pixels = new Float32Array(count * 784);
  for (let i = 0; i < pixels.length; ++i) pixels[i] = images[16 + i] / 255;
  return { count, pixels, labels: Int32Array.from(labels.subarray(8, 8 + count)) };
}
