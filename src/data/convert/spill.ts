// A split's rows on disk while a conversion streams its input: fixed-size records (a class id as
// int32, then the features' bytes) appended through a 1 MiB buffer, read back by row range when
// the Arrow file is written. Memory stays at the buffer whatever the input's size.
import * as fs from 'node:fs';
import { namingFile } from '../../base/file-errors';

const bufferBytes = 1 << 20;

export class Spill {
  rows = 0;
  private readonly fd: number;
  private readonly buffer: Buffer;
  private used = 0;
  private readonly recordBytes: number;

  constructor(
    readonly file: string,
    readonly sampleSize: number,
    readonly valueBytes: number,
  ) {
    this.recordBytes = 4 + sampleSize * valueBytes;
    this.buffer = Buffer.alloc(Math.max(bufferBytes, this.recordBytes));
    this.fd = namingFile(file, () => fs.openSync(file, 'w+'));
  }

  /** Appends one row: its class id and its `sampleSize` values (float32 or uint8, as `valueBytes` says). */
  append(classId: number, values: Float32Array | Uint8Array): void {
    if (this.used + this.recordBytes > this.buffer.length) this.flush();
    this.buffer.writeInt32LE(classId, this.used);
    const bytes = new Uint8Array(values.buffer, values.byteOffset, this.sampleSize * this.valueBytes);
    this.buffer.set(bytes, this.used + 4);
    this.used += this.recordBytes;
    this.rows += 1;
  }

  flush(): void {
    namingFile(this.file, () =>
      fs.writeSync(this.fd, this.buffer, 0, this.used, (this.rows - this.used / this.recordBytes) * this.recordBytes),
    );
    this.used = 0;
  }

  /** Reads rows [first, first + classIds.length) into classIds and values (after flush()). */
  read(first: number, classIds: Int32Array, values: Float32Array | Uint8Array): void {
    const bytes = Buffer.alloc(classIds.length * this.recordBytes);
    namingFile(this.file, () => fs.readSync(this.fd, bytes, 0, bytes.length, first * this.recordBytes));
    const featureBytes = this.sampleSize * this.valueBytes;
    const into = new Uint8Array(values.buffer, values.byteOffset, classIds.length * featureBytes);
    for (let i = 0; i < classIds.length; ++i) {
      const at = i * this.recordBytes;
      classIds[i] = bytes.readInt32LE(at);
      into.set(bytes.subarray(at + 4, at + this.recordBytes), i * featureBytes);
    }
  }

  close(): void {
    fs.closeSync(this.fd);
    fs.rmSync(this.file, { force: true });
  }
}
