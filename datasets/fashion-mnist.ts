// Converts Fashion-MNIST as Debian ships it (dataset-fashion-mnist: gzip'd IDX files) into an
// ft-train dataset directory (Arrow IPC train/test files + manifest).
//   node dist/datasets/fashion-mnist.js [--source DIR] [--out DIR] [--rows-per-batch N]
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { commandLine, runMain } from '../src/cli/command';
import { DatasetError } from '../src/data/errors';
import type { Manifest } from '../src/data/manifest';
import { writeDataset, type ProgressSink, type SplitSource } from '../src/data/writer';

export const debianSource = '/usr/share/datasets/fashion-mnist';
export const fashionMnistClasses = [
  'T-shirt/top',
  'Trouser',
  'Pullover',
  'Dress',
  'Coat',
  'Sandal',
  'Shirt',
  'Sneaker',
  'Bag',
  'Ankle boot',
];
/** 600 record batches in train: every shard count up to 64 gets 9 or 10 of them. */
export const defaultRowsPerBatch = 100;

export interface IdxSplit {
  rows: number;
  /** [rows, 28, 28] */
  images: Uint8Array;
  labels: Uint8Array;
}

/** Reads one split ('train' or 't10k') of the IDX files, checking headers and sizes. */
export function readIdxSplit(sourceDir: string, split: 'train' | 't10k'): IdxSplit {
  const images = readIdx(path.join(sourceDir, `${split}-images-idx3-ubyte.gz`), 2051, 16);
  const labels = readIdx(path.join(sourceDir, `${split}-labels-idx1-ubyte.gz`), 2049, 8);
  const rows = images.data.readUInt32BE(4);
  const [height, width] = [images.data.readUInt32BE(8), images.data.readUInt32BE(12)];
  if (height !== 28 || width !== 28) throw new DatasetError(images.file, `expected 28x28 images, got ${height}x${width}`);
  if (images.data.length !== 16 + rows * 784)
    throw new DatasetError(images.file, `truncated: ${images.data.length} bytes for ${rows} images`);
  if (labels.data.readUInt32BE(4) !== rows || labels.data.length !== 8 + rows) {
    throw new DatasetError(labels.file, `expected ${rows} labels (as many as images), got ${labels.data.readUInt32BE(4)}`);
  }
  return { rows, images: images.data.subarray(16), labels: labels.data.subarray(8) };
}

function readIdx(file: string, magic: number, headerBytes: number): { file: string; data: Buffer } {
  if (!fs.existsSync(file)) throw new DatasetError(file, "missing: install Debian's dataset-fashion-mnist (launch/setup does)");
  let data: Buffer;
  try {
    data = zlib.gunzipSync(fs.readFileSync(file));
  } catch (error) {
    throw new DatasetError(file, `corrupt: not a readable gzip file (${(error as Error).message})`);
  }
  if (data.length < headerBytes || data.readUInt32BE(0) !== magic)
    throw new DatasetError(file, `corrupt: not an IDX file with magic ${magic}`);
  return { file, data };
}

function splitSource(idx: IdxSplit): SplitSource {
  return {
    rows: idx.rows,
    fill(first, images, labels) {
      images.set(idx.images.subarray(first * 784, first * 784 + images.length));
      for (let i = 0; i < labels.length; ++i) labels[i] = idx.labels[first + i];
    },
  };
}

export async function convertFashionMnist(
  sourceDir: string,
  outDir: string,
  rowsPerBatch = defaultRowsPerBatch,
  progress?: ProgressSink,
): Promise<Manifest> {
  const train = readIdxSplit(sourceDir, 'train');
  const test = readIdxSplit(sourceDir, 't10k');
  return writeDataset(
    outDir,
    {
      name: 'fashion-mnist',
      source: `Debian dataset-fashion-mnist (${sourceDir})`,
      sampleShape: [1, 28, 28],
      classNames: fashionMnistClasses,
    },
    { train: splitSource(train), test: splitSource(test) },
    rowsPerBatch,
    progress,
  );
}

if (require.main === module) {
  runMain('fashion-mnist', async () => {
    const args = commandLine(
      'fashion-mnist',
      "$0 [--source DIR] [--out DIR]\n\nConverts Debian's Fashion-MNIST (IDX) into an Arrow dataset directory.",
    )
      .option('source', { type: 'string', default: debianSource, describe: 'directory with the *-idx?-ubyte.gz files' })
      .option('out', { type: 'string', default: 'datasets/fashion-mnist', describe: 'dataset directory to write' })
      .option('rows-per-batch', {
        type: 'number',
        default: defaultRowsPerBatch,
        describe: 'samples per Arrow record batch (shards are whole batches)',
      })
      .parseSync();
    await convertFashionMnist(args.source, args.out, args.rowsPerBatch, console.log);
  });
}
