// Writes that are never seen half done: a temporary file next to the target, fsync, rename, then
// fsync of the directory, so that the new name too survives a crash of the machine.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { namingFile } from './file-errors';

export function writeAtomically(file: string, bytes: string | Uint8Array): void {
  const partial = `${file}.partial-${process.pid}`;
  namingFile(file, () => {
    removeStrayPartials(file);
    leavingNothingOnError(partial, () => {
      fs.writeFileSync(partial, bytes);
      syncPath(partial);
      fs.renameSync(partial, file);
    });
  });
  syncPath(path.dirname(file));
}

/** What a writer killed before its rename left (another process's partial of the same file). */
function removeStrayPartials(file: string): void {
  const base = `${path.basename(file)}.partial-`;
  const dir = path.dirname(file);
  for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    if (name.startsWith(base)) fs.rmSync(path.join(dir, name), { force: true });
  }
}

/** A full disk or a failed rename leaves no partial behind. */
function leavingNothingOnError(partial: string, action: () => void): void {
  try {
    action();
  } catch (error) {
    fs.rmSync(partial, { force: true });
    throw error;
  }
}

/** Makes a file's bytes, or a directory's entries (names created, renamed or removed in it), durable. */
export function syncPath(target: string): void {
  const fd = fs.openSync(target, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
