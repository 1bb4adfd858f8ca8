// Following a JSON-lines file that another process appends to (metrics.jsonl during a run): each
// read takes only the bytes added since the last one, and a last line still being written waits,
// as bytes, for the rest of it.
import * as fs from 'node:fs';

export class JsonlFollower<T> {
  /** bytes of the file taken so far (complete lines and the partial last one) */
  bytesRead = 0;
  private fd?: number;
  private partial: Buffer = Buffer.alloc(0);

  constructor(private readonly file: string) {}

  /** The records of the lines completed since the last call (none while the file does not exist). */
  read(): T[] {
    if (this.fd === undefined) {
      if (!fs.existsSync(this.file)) return [];
      this.fd = fs.openSync(this.file, 'r');
    }
    const size = fs.fstatSync(this.fd).size;
    if (size <= this.bytesRead) return [];
    const added = Buffer.alloc(size - this.bytesRead);
    const got = fs.readSync(this.fd, added, 0, added.length, this.bytesRead);
    this.bytesRead += got;
    const bytes = Buffer.concat([this.partial, added.subarray(0, got)]);
    const end = bytes.lastIndexOf(0x0a);
    this.partial = bytes.subarray(end + 1);
    if (end < 0) return [];
    return bytes
      .subarray(0, end)
      .toString('utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as T);
  }

  close(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
  }
}
