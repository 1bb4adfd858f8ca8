// The one line a failed write ends with names the file the user gave: a descriptor's error (no
// path in Node's message) and a temporary file's (the path of an atomic write's partial) alike.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeAtomically } from '../../src/base/atomic-write';
import { namedError, namingFile } from '../../src/base/file-errors';

describe('file errors name their file', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-file-errors-'));
  after(() => fs.rmSync(root, { recursive: true, force: true }));

  it('an atomic write where its partial cannot be made names the target, not the partial, and leaves nothing', () => {
    const under = path.join(root, 'a-file');
    fs.writeFileSync(under, '');
    const file = path.join(under, 'report.html');
    assert.throws(() => writeAtomically(file, 'x'), { message: `${file}: ENOTDIR: not a directory`, code: 'ENOTDIR' });
    const missing = path.join(root, 'missing', 'summary.json');
    assert.throws(() => writeAtomically(missing, 'x'), { message: `${missing}: ENOENT: no such file or directory`, code: 'ENOENT' });
    assert.deepEqual(fs.readdirSync(root), ['a-file']);
  });

  it("a descriptor's error gets the file's name; one that names the file, or was named already, is kept", () => {
    const file = path.join(root, 'metrics.jsonl');
    const descriptor = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    assert.equal((namedError(file, descriptor) as Error).message, `${file}: ENOSPC: no space left on device`);
    const rename = Object.assign(new Error(`EXDEV: cross-device link not permitted, rename '${file}.partial-7' -> '/x'`), {
      code: 'EXDEV',
    });
    assert.equal((namedError(file, rename) as Error).message, `${file}: EXDEV: cross-device link not permitted`);
    const own = Object.assign(new Error(`EACCES: permission denied, open '${file}'`), { code: 'EACCES' });
    assert.equal(namedError(file, own), own);
    assert.throws(
      () =>
        namingFile(file, () =>
          namingFile(file, () => {
            throw descriptor;
          }),
        ),
      { message: `${file}: ENOSPC: no space left on device` },
    );
    const plain = new Error('not a system error');
    assert.equal(namedError(file, plain), plain);
  });
});
