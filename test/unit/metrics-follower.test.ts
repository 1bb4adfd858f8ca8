// The drill's follower of metrics.jsonl: each read takes only the bytes appended since the last,
// a line appended in pieces is returned once whole, and a file that does not exist yet is no error.
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { JsonlFollower } from '../../src/run/follower';

describe('JsonlFollower (launch/drill following metrics.jsonl)', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'follower-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads only the new bytes, holding a partial last line until it is complete', () => {
    const file = path.join(dir, 'metrics.jsonl');
    const follower = new JsonlFollower<{ step: number; note?: string }>(file);
    assert.deepEqual(follower.read(), []);
    assert.equal(follower.bytesRead, 0);

    const first = '{"step":0}\n{"step":1}\n';
    fs.writeFileSync(file, first);
    assert.deepEqual(follower.read(), [{ step: 0 }, { step: 1 }]);
    assert.equal(follower.bytesRead, Buffer.byteLength(first));

    // nothing new: nothing read
    assert.deepEqual(follower.read(), []);
    assert.equal(follower.bytesRead, Buffer.byteLength(first));

    // a line in three pieces, the second splitting a two-byte UTF-8 character
    const line = Buffer.from('{"step":2,"note":"é"}\n');
    const cut = line.indexOf(0xc3) + 1;
    fs.appendFileSync(file, line.subarray(0, 5));
    assert.deepEqual(follower.read(), []);
    fs.appendFileSync(file, line.subarray(5, cut));
    assert.deepEqual(follower.read(), []);
    fs.appendFileSync(file, Buffer.concat([line.subarray(cut), Buffer.from('{"step":3}\n{"st')]));
    assert.deepEqual(follower.read(), [{ step: 2, note: 'é' }, { step: 3 }]);
    assert.equal(follower.bytesRead, Buffer.byteLength(first) + line.length + '{"step":3}\n{"st'.length);
    fs.appendFileSync(file, 'ep":4}\n');
    assert.deepEqual(follower.read(), [{ step: 4 }]);
    assert.equal(follower.bytesRead, fs.statSync(file).size);
    follower.close();
  });

  it('reads each byte once over many appends', () => {
    const file = path.join(dir, 'metrics.jsonl');
    const follower = new JsonlFollower<{ step: number }>(file);
    const seen: number[] = [];
    let total = 0;
    for (let step = 0; step < 200; step++) {
      fs.appendFileSync(file, `${JSON.stringify({ step })}\n`);
      const before = follower.bytesRead;
      seen.push(...follower.read().map((r) => r.step));
      total += follower.bytesRead - before;
      assert.equal(follower.bytesRead - before, `${JSON.stringify({ step })}\n`.length);
    }
    assert.deepEqual(
      seen,
      Array.from({ length: 200 }, (_, i) => i),
    );
    assert.equal(total, fs.statSync(file).size);
    follower.close();
  });
});
