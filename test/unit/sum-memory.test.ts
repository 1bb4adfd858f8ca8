// The memory the shard-ordered sums take their buffers from: a given block lent again (the smallest
// that holds a request, zeroed, at most once), blocks made ready for sizes, their pages mapped (the
// process's resident memory grows by them), the ones no size needs let go, and none kept above the bound.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { reserveBelowBytes, SumMemory } from '../../src/sharding/sum-memory';

describe('SumMemory (sharding/sum-memory.ts)', () => {
  it('lends a given block again, the smallest that holds the request, zeroed, and only once', () => {
    const memory = new SumMemory();
    const [small, large] = [new Float32Array(100).fill(7), new Float32Array(1000).fill(9)];
    memory.give([large, small, small.subarray(10, 20)]);
    const taken = memory.take(80);
    assert.equal(taken.buffer, small.buffer);
    assert.equal(taken.length, 80);
    assert.ok(taken.every((x) => x === 0));
    const next = memory.take(80);
    assert.equal(next.buffer, large.buffer, 'a block given twice is lent once');
    const fresh = memory.take(80);
    assert.ok(fresh.buffer !== small.buffer && fresh.buffer !== large.buffer);
    assert.ok(fresh.every((x) => x === 0));
  });

  it('a request larger than every free block gets new memory, leaving the blocks free', () => {
    const memory = new SumMemory();
    const block = new Float32Array(10);
    memory.give([block]);
    assert.notEqual(memory.take(11).buffer, block.buffer);
    assert.equal(memory.take(10).buffer, block.buffer);
  });

  it('reserve keeps the free blocks that fit the sizes, makes new ones for the rest, and lets the others go', () => {
    const memory = new SumMemory();
    const [fits, unneeded] = [new Float32Array(600), new Float32Array(50)];
    memory.give([fits, unneeded]);
    memory.reserve([500, 2000]);
    const big = memory.take(2000);
    assert.ok(big.buffer !== fits.buffer && big.buffer !== unneeded.buffer);
    assert.equal(memory.take(500).buffer, fits.buffer);
    const after = memory.take(10);
    assert.ok(after.buffer !== unneeded.buffer, 'a block no size needed was kept');
  });

  it('the blocks reserve makes are in memory, their pages mapped, not just allocated', function () {
    if (!fs.existsSync('/proc/self/status')) this.skip();
    // in a process of its own: here, a collection the 64 MiB set off could free another test's
    // garbage while the block is written, and the resident memory would show the difference only
    const measure = `
      const { SumMemory } = require(${JSON.stringify(require.resolve('../../src/sharding/sum-memory'))});
      const { mappedAll } = require(${JSON.stringify(require.resolve('../../src/base/mapped-memory'))});
      const resident = () => Number(/VmRSS:\\s+(\\d+) kB/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
      (async () => {
        const memory = new SumMemory();
        const floats = (64 << 20) / 4;
        const before = resident();
        memory.reserve([floats]);
        await mappedAll();
        const grown = resident() - before;
        console.log(JSON.stringify({ grown, taken: memory.take(floats).length }));
      })();`;
    const child = spawnSync(process.execPath, ['-e', measure], { encoding: 'utf8' });
    assert.equal(child.status, 0, child.stderr);
    const { grown, taken } = JSON.parse(child.stdout) as { grown: number; taken: number };
    assert.ok(grown >= 48 << 20, `resident memory grew by ${grown} bytes for a 64 MiB block`);
    assert.equal(taken, (64 << 20) / 4);
  });

  it(`keeps nothing where the sizes come to ${reserveBelowBytes >> 20} MiB or more`, () => {
    const memory = new SumMemory();
    const block = new Float32Array(100);
    memory.give([block]);
    memory.reserve([100, reserveBelowBytes / 4]);
    assert.notEqual(memory.take(100).buffer, block.buffer);
  });
});
