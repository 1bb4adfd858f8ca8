// Writes that are never seen half done: a temporary file next to the target, fsync, rename, then
// fsync of the directory, so that the new name too survives a crash of the machine.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { namingFile } from './file-errors';

export function writeAtomically(file: string, bytes: string | Uint8Array): void {
  moveIntoPlace(writeAside(file, bytes), file);
}

/**
 * writeAtomically's first half: `bytes` in a temporary file next to `file`, whose path it returns;
 * nothing is seen under `file` until moveIntoPlace, which makes them durable first. Lets a writer
 * prepare a commit while what the commit vouches for is still being written, without an fsync of
 * its own racing those writes' (on a journalling file system their fsyncs have usually carried
 * these bytes by the time moveIntoPlace asks).
 */
export function writeAside(file: string, bytes: string | Uint8Array): string {
  removeStrayPartials(file);
  const partial = `${file}.partial-${process.pid}`;
  namingFile(file, () => leavingNothingOnError(partial, () => fs.writeFileSync(partial, bytes)));
  return partial;
}

/** writeAtomically's second half: makes writeAside's `partial` durable, renames it to `file`, and makes the new name durable. */
export function moveIntoPlace(partial: string, file: string): void {
  namingFile(file, () => leavingNothingOnError(partial, () => {
    syncPath(partial);
    fs.renameSync(partial, file);
  }));
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
