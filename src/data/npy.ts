// NumPy's .npy format (version 1.0): a dataset split as two arrays that Python reads with
// numpy.load alone, features (uint8 or float32) [N, ...sample shape] and labels int32 [N]
// (little-endian, C order), and split.json with the divisor ft-train divides the features by.
import * as path from 'node:path';
import { writeAtomically } from '../base/atomic-write';
import type { ShardData } from './split';
import { makeDirectory } from '../base/make-directory';

export function encodeNpy(data: Uint8Array | Int32Array | Float32Array, shape: number[]): Buffer {
  const descr = data instanceof Uint8Array ? '|u1' : data instanceof Float32Array ? '<f4' : '<i4';
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(', ');
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${dims}), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n'; // the data starts 64-byte aligned
  const prefix = Buffer.alloc(10);
  Buffer.from('\x93NUMPY', 'latin1').copy(prefix);
  prefix.writeUInt8(1, 6);
  prefix.writeUInt16LE(header.length, 8);
  return Buffer.concat([prefix, Buffer.from(header, 'latin1'), Buffer.from(data.buffer, data.byteOffset, data.byteLength)]);
}

/** Writes DIR/features.npy, DIR/labels.npy and DIR/split.json from a split's samples of shape `sampleShape`. */
export function writeSplitNpy(data: ShardData, sampleShape: readonly number[], dir: string): void {
  makeDirectory(dir);
  writeAtomically(
    path.join(dir, 'features.npy'),
    encodeNpy(data.features.subarray(0, data.rows * data.sampleSize), [data.rows, ...sampleShape]),
  );
  writeAtomically(path.join(dir, 'split.json'), `${JSON.stringify({ divisor: data.divisor })}\n`);
  writeAtomically(path.join(dir, 'labels.npy'), encodeNpy(data.labels.subarray(0, data.rows), [data.rows]));
}
