// A read-only file handle for apache-arrow's random-access reader that (1) counts every byte taken
// from disk, so readback can be reported exactly, and (2) serves arrow from byte ranges that were
// read and checked against the manifest's checksums beforehand (the footer, which arrow parses at
// open), so no unverified byte is decoded.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { DatasetError } from './errors';

interface KeptRange {
  start: number;
  bytes: Buffer;
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export class VerifiedFile {
  /** bytes read from disk since open */
  bytesRead = 0;
  private kept: KeptRange[] = [];

  private constructor(
    readonly path: string,
    private readonly handle: fs.promises.FileHandle,
    readonly size: number,
  ) {}

  static async open(path: string): Promise<VerifiedFile> {
    let handle: fs.promises.FileHandle;
    try {
      handle = await fs.promises.open(path, 'r');
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new DatasetError(path, code === 'ENOENT' ? 'missing' : `cannot open (${code ?? (error as Error).message})`);
    }
    return new VerifiedFile(path, handle, (await handle.stat()).size);
  }

  /** apache-arrow recognises a file handle by `fd` and `stat` */
  get fd(): number {
    return this.handle.fd;
  }

  async stat(): Promise<{ size: number }> {
    return { size: this.size };
  }

  /** Reads [start, start + length) from disk (counted); a short read means the file is truncated. */
  async load(start: number, length: number): Promise<Buffer> {
    const bytes = Buffer.allocUnsafe(length);
    for (let done = 0; done < length;)
      done += this.took(start, length, done, (await this.handle.read(bytes, done, length - done, start + done)).bytesRead);
    return bytes;
  }

  /**
   * load(), blocking: for reads the caller would only wait for, where a hand-off to libuv's
   * threadpool costs more than the read (several ms on busy cores, against well under 1 ms). The
   * bytes land in `into` (at least `length` long) where given.
   */
  loadNow(start: number, length: number, into = Buffer.allocUnsafe(length)): Buffer {
    const bytes = into.subarray(0, length);
    for (let done = 0; done < length;)
      done += this.took(start, length, done, fs.readSync(this.handle.fd, bytes, done, length - done, start + done));
    return bytes;
  }

  /** Counts a read of `bytesRead` bytes at `done` into [start, start + length); 0 means the file ended early. */
  private took(start: number, length: number, done: number, bytesRead: number): number {
    if (bytesRead === 0) throw new DatasetError(this.path, `truncated: ends at byte ${start + done}, expected ${start + length}`);
    this.bytesRead += bytesRead;
    return bytesRead;
  }

  /** Serves later reads inside [start, start + bytes.length) from `bytes` (already verified). */
  keep(start: number, bytes: Buffer): void {
    this.kept.push({ start, bytes });
  }

  /** The FileHandle.read that apache-arrow calls. */
  async read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number; buffer: Uint8Array }> {
    const range = this.kept.find((r) => position >= r.start && position + length <= r.start + r.bytes.length);
    if (range) {
      buffer.set(range.bytes.subarray(position - range.start, position - range.start + length), offset);
      return { bytesRead: length, buffer };
    }
    const { bytesRead } = await this.handle.read(buffer, offset, length, position);
    this.bytesRead += bytesRead;
    return { bytesRead, buffer };
  }

  async close(): Promise<void> {
    this.kept = [];
    await this.handle.close();
  }
}
