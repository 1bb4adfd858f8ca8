// `mkdir -p` that always ends. Node's own (fs.mkdirSync with recursive: true, and its promise form)
// loops for good where mkdir of a missing directory says ENOENT though its parent exists, as in
// /proc or /sys: it makes the parent again (EEXIST), then the child again, and so on. Here each
// missing directory is made once, from the nearest existing one down, and any error is thrown.
import * as fs from 'node:fs';
import * as path from 'node:path';

/** Makes `dir` and its missing parents; returns the first directory it made (undefined: none). */
export function makeDirectory(dir: string): string | undefined {
  const missing: string[] = [];
  for (let at = path.resolve(dir); !isDirectory(at); at = path.dirname(at)) {
    missing.unshift(at);
    if (path.dirname(at) === at) break;
  }
  for (const at of missing) {
    try {
      fs.mkdirSync(at);
    } catch (error) {
      // made meanwhile by another process (a peer rank making the same directory)
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (!isDirectory(at)) throw Object.assign(new Error(`${at}: exists and is not a directory`), { code: 'ENOTDIR' });
    }
  }
  return missing[0];
}

function isDirectory(at: string): boolean {
  try {
    return fs.statSync(at).isDirectory();
  } catch {
    return false;
  }
}
