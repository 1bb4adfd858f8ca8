// `mkdir -p` that always ends. Node's own (fs.mkdirSync with recursive: true, and its promise form)
// loops for good where mkdir of a missing directory says ENOENT though its parent exists, as in
// /proc or /sys: it makes the parent again (EEXIST), then the child again, and so on. Here each
// missing directory is made once, from the nearest existing part of the path down, and any error
// is thrown.
import * as fs from 'node:fs';
import * as path from 'node:path';

/** The nearest part of `dir`'s path that exists (`dir` itself where it does), resolved. */
export function nearestExisting(dir: string): string {
  let at = path.resolve(dir);
  while (!fs.existsSync(at) && path.dirname(at) !== at) at = path.dirname(at);
  return at;
}

/** Makes `dir` and its missing parents; returns the first directory it made (undefined: none). */
export function makeDirectory(dir: string): string | undefined {
  const existing = nearestExisting(dir);
  if (!isDirectory(existing)) throw notADirectory(existing);
  const missing: string[] = [];
  for (let at = path.resolve(dir); at !== existing; at = path.dirname(at)) missing.unshift(at);
  for (const at of missing) {
    try {
      fs.mkdirSync(at);
    } catch (error) {
      // made meanwhile by another process (a peer rank making the same directory)
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (!isDirectory(at)) throw notADirectory(at);
    }
  }
  return missing[0];
}

function notADirectory(at: string): Error {
  return Object.assign(new Error(`${at}: exists and is not a directory`), { code: 'ENOTDIR' });
}

function isDirectory(at: string): boolean {
  try {
    return fs.statSync(at).isDirectory();
  } catch {
    return false;
  }
}
