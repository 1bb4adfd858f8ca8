// Scratch directories of the tests: created per file, removed after it. Removal retries while a
// job's last writes land; if it still fails, the error says what was left and which ft-train
// processes were alive, so a stray process shows up instead of a bare ENOTEMPTY. A file whose
// tests a --grep left out never runs its removal: whatever is left goes when mocha exits.
import { execSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const made = new Set<string>();
process.on('exit', () => made.forEach((dir) => fs.rmSync(dir, { recursive: true, force: true })));

export function makeScratch(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.add(dir);
  return dir;
}

export function removeScratch(dir: string): void {
  try {
    fs.rmSync(dir, { recursive: true, force: true, maxRetries: 30, retryDelay: 100 });
  } catch (error) {
    const left = fs.existsSync(dir) ? execSync(`find ${JSON.stringify(dir)} | head -20`).toString() : '';
    const alive = execSync('ps -eo pid,etime,args | grep -E "ft-train|prterun" | grep -v grep || true').toString();
    throw new Error(`${(error as Error).message}\nleft:\n${left}processes:\n${alive}`, { cause: error });
  }
}
