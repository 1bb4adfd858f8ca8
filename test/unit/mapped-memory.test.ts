// Memory mapped ahead of its first write (base/mapped-memory.ts): zeros, its pages mapped (the
// process's resident memory grows by them) once the mapping ends, and, where a pool thread maps
// it, the call returns first and what the caller writes meanwhile is kept: the mapping never
// writes the memory.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { mappedAll, mappedMemory } from '../../src/base/mapped-memory';

describe('mappedMemory (base/mapped-memory.ts)', () => {
  it('gives zeros, and keeps what is written into it while its pages are mapped', async () => {
    const bytes = 32 << 20;
    const memory = new Uint32Array(mappedMemory(bytes, true));
    assert.equal(memory.byteLength, bytes);
    assert.ok(memory.every((v) => v === 0));
    // written from both ends while a pool thread may still be mapping the middle
    for (let i = 0; i < memory.length; i += 1021) memory[i] = i + 1;
    await mappedAll();
    for (let i = 0; i < memory.length; ++i) {
      if (memory[i] !== (i % 1021 === 0 ? i + 1 : 0)) assert.fail(`element ${i} is ${memory[i]}`);
    }
  });

  it('maps the pages: the resident memory grows by them once the mapping ends', function () {
    if (!fs.existsSync('/proc/self/status')) this.skip();
    // in a process of its own: a collection here could free another test's garbage meanwhile
    const measure = `
      const { mappedAll, mappedMemory } = require(${JSON.stringify(require.resolve('../../src/base/mapped-memory'))});
      const resident = () => Number(/VmRSS:\\s+(\\d+) kB/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
      (async () => {
        const before = resident();
        const kept = [mappedMemory(48 << 20, false), mappedMemory(16 << 20, true)];
        await mappedAll();
        console.log(JSON.stringify({ grown: resident() - before, bytes: kept.reduce((n, b) => n + b.byteLength, 0) }));
      })();`;
    const child = spawnSync(process.execPath, ['-e', measure], { encoding: 'utf8' });
    assert.equal(child.status, 0, child.stderr);
    const { grown, bytes } = JSON.parse(child.stdout) as { grown: number; bytes: number };
    assert.equal(bytes, 64 << 20);
    assert.ok(grown >= 0.75 * bytes, `resident memory grew by ${grown} bytes for ${bytes} mapped`);
  });
});
