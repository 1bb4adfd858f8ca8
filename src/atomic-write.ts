// Writes that are never seen half done: a temporary file next to the target, fsync, then rename.
import * as fs from 'node:fs';

export function writeAtomically(file: string, bytes: string | Uint8Array): void {
  const partial = `${file}.partial-${process.pid}`;
  try {
    const fd = fs.openSync(partial, 'w');
    try {
      fs.writeFileSync(fd, bytes);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(partial, file);
  } catch (error) {
    fs.rmSync(partial, { force: true }); // a full disk or a failed rename leaves nothing behind
    throw error;
  }
}
