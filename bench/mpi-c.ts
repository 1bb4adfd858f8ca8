// The benchmarks' C baselines: bench/<name>.c compiled with the ULFM Open MPI's mpicc into
// build/bench/<name>, again only when the source is newer.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { mpiHome } from '../src/cli/mpirun';

const root = path.resolve(__dirname, '..', '..');

export function compileMpiC(name: string): string {
  const out = path.join(root, 'build', 'bench', name);
  const src = path.join(root, 'bench', `${name}.c`);
  if (!fs.existsSync(out) || fs.statSync(out).mtimeMs < fs.statSync(src).mtimeMs) {
    fs.mkdirSync(path.dirname(out), { recursive: true });
    execFileSync(path.join(mpiHome, 'bin', 'mpicc'), ['-O2', '-o', out, src], { stdio: 'inherit' });
  }
  return out;
}
