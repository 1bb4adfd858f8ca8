// Writes that are never seen half done: a temporary file next to the target, fsync, rename, then
// fsync of the directory, so that the new name too survives a crash of the machine.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { namingFile } from './file-errors';

export function writeAtomically(file: string, bytes: string | Uint8Array): void {
  removeStrayPartials(file);
  namingFile(file, () => writeThenRename(file, bytes));
  syncDirectory(path.dirname(file));
}

/** What a writer killed before its rename left (another process's partial of the same file). */
function removeStrayPartials(file: string): void {
  const base = `${path.basename(file)}.partial-`;
  const dir = path.dirname(file);
  for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    if (name.startsWith(base)) fs.rmSync(path.join(dir, name), { force: true });
  }
}

function writeThenRename(file: string, bytes: string | Uint8Array): void {
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

/** Makes the entries of `dir` (names created, renamed or removed in it) durable. */
export function syncDirectory(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
