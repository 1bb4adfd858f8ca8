// makeDirectory (base/make-directory.ts): mkdir -p that names the first directory it made, and that
// ends with an error where Node's recursive mkdir loops for good (/proc: ENOENT under a parent that exists).
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { makeDirectory } from '../../src/base/make-directory';

describe('makeDirectory', () => {
  let root: string;
  beforeEach(() => (root = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-mkdir-'))));
  afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

  it('makes the missing directories and returns the first it made; none made: undefined', () => {
    const deep = path.join(root, 'a', 'b', 'c');
    assert.equal(makeDirectory(deep), path.join(root, 'a'));
    assert.ok(fs.statSync(deep).isDirectory());
    assert.equal(makeDirectory(deep), undefined);
    assert.equal(makeDirectory(path.join(root, 'a', 'd')), path.join(root, 'a', 'd'));
  });

  it('a path through a file: one error naming it, nothing made', () => {
    const file = path.join(root, 'file');
    fs.writeFileSync(file, '');
    assert.throws(() => makeDirectory(path.join(file, 'x', 'y')), { code: 'ENOTDIR' });
    assert.throws(() => makeDirectory(file), { message: `${file}: exists and is not a directory`, code: 'ENOTDIR' });
  });

  it("ENOENT though the parent exists (/proc) is thrown, where fs.mkdirSync's recursive form never returns", () => {
    assert.throws(() => makeDirectory('/proc/ft-test/x'), {
      code: 'ENOENT',
      message: "ENOENT: no such file or directory, mkdir '/proc/ft-test'",
    });
  });
});
