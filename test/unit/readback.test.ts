// Readback of lost shards on demand, over a small synthetic dataset (20 record batches of 50 rows,
// 4 shards of 5 batches): ready(rows) reads exactly the batches those rows live in, what a step asks
// for is read at once, ahead of the background pass, every batch is read once (the bytes taken
// equal the shards' bytes), the data equals a whole read, and a batch that fails its checksum is
// kept and thrown by the next ready(). A shard taken over goes into the memory kept for it
// (HeldShards.keepRoom), whose pages are mapped when kept (the process's resident memory grows).
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { generateSynthetic, syntheticDefaults } from '../../datasets/synthetic';
import { Dataset } from '../../src/data/dataset';
import { Readback } from '../../src/data/readback';
import type { ShardLayout } from '../../src/data/shard-layout';
import type { ShardData, Split } from '../../src/data/split';
import { HeldShards } from '../../src/protocol/shards';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-readback-');
const synthetic = path.join(scratch, 'synthetic');
const small = {
  ...syntheticDefaults,
  shape: [1, 8, 8] as [number, number, number],
  classes: 4,
  trainRows: 1000,
  testRows: 200,
  rowsPerBatch: 50,
};

const nextTick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** The given rows of a shard: their pixels and labels. */
function rowsOf(data: ShardData, rows: number[]): { images: number[][]; labels: number[] } {
  return {
    images: rows.map((r) => Array.from(data.features.subarray(r * data.sampleSize, (r + 1) * data.sampleSize))),
    labels: rows.map((r) => data.labels[r]),
  };
}

describe('Readback', function () {
  this.timeout(30_000);
  let dataset: Dataset;
  let split: Split;
  let layout: ShardLayout;

  before(async () => {
    await generateSynthetic(synthetic, small);
    dataset = await Dataset.open(synthetic);
    split = dataset.train;
    layout = split.layout(4);
  });
  after(async () => {
    await dataset.close();
    removeScratch(scratch);
  });

  it('ready(rows) reads exactly the record batches holding them, the background pass the rest, each batch once', async () => {
    const whole = await split.readShards(layout, [1, 2]);
    const readback = new Readback(split, layout, [2, 1]);
    assert.deepEqual(
      readback.shards.map((s) => s.shard),
      [1, 2],
    );
    const before = split.bytesRead;
    // shard 2 holds batches 10..14: rows 0 and 1 lie in batch 10, 120 in 12, 249 in 14
    const rows = [249, 0, 120, 1];
    await readback.shards[1].ready(Int32Array.from(rows));
    const asked = split.batchBytes(10, 11) + split.batchBytes(12, 13) + split.batchBytes(14, 15);
    assert.equal(readback.bytesRead, asked);
    assert.equal(split.bytesRead - before, asked);
    assert.deepEqual(rowsOf(readback.shards[1], rows), rowsOf(whole.get(2)!, rows));
    assert.equal(readback.complete, false);

    readback.startBackground();
    while (!readback.complete) await nextTick();
    const shardBytes = split.shardBytes(layout, 1) + split.shardBytes(layout, 2);
    assert.equal(readback.bytesRead, shardBytes);
    assert.equal(split.bytesRead - before, shardBytes);
    for (const shard of readback.shards) {
      assert.ok(Buffer.from(shard.features).equals(Buffer.from(whole.get(shard.shard)!.features)), `shard ${shard.shard} pixels`);
      assert.deepEqual(Array.from(shard.labels), Array.from(whole.get(shard.shard)!.labels));
    }
    await readback.shards[0].ready(Int32Array.from([0, 249]));
    assert.equal(readback.bytesRead, shardBytes, 'nothing read twice');
  });

  it('asks huge pages for a shard once all its batches are loaded, once, not before (a first write into them would wait for compaction)', async () => {
    const readback = new Readback(split, layout, [3, 1]);
    const advised: { shard: number; loaded: boolean }[] = [];
    const adviseFilled = split.adviseFilled.bind(split);
    split.adviseFilled = (data: ShardData) => {
      // every row of the shard is in place
      const shard = readback.shards.find((s) => s === data)!;
      advised.push({ shard: shard.shard, loaded: Buffer.from(shard.features).equals(Buffer.from(whole.get(shard.shard)!.features)) });
      adviseFilled(data);
    };
    const whole = await split.readShards(layout, [1, 3]);
    try {
      // shard 3 holds batches 15..19: all but batch 17 asked for, then batch 17
      await readback.shards[1].ready(Int32Array.from([0, 50, 150, 249]));
      assert.deepEqual(advised, []);
      await readback.shards[1].ready(Int32Array.of(100));
      assert.deepEqual(advised, [{ shard: 3, loaded: true }]);
      readback.startBackground();
      while (!readback.complete) await nextTick();
      assert.deepEqual(advised, [
        { shard: 3, loaded: true },
        { shard: 1, loaded: true },
      ]);
    } finally {
      split.adviseFilled = adviseFilled;
    }
  });

  it('what a step asks for is read at once, ahead of the background pass; stop() ends the pass', async () => {
    const readback = new Readback(split, layout, [0, 1, 2]);
    const [, , shard2] = readback.shards;
    readback.startBackground();
    // the pass has claimed its first read (all of shard 0, below the size limit of one read); the
    // step's batch 14 is read at once, without waiting for it
    await shard2.ready(Int32Array.of(249));
    assert.equal(readback.bytesRead, split.batchBytes(14, 15));
    // stop() lets the read in flight finish, and nothing is read after it
    await readback.stop();
    assert.equal(readback.bytesRead, split.shardBytes(layout, 0) + split.batchBytes(14, 15));
    for (let i = 0; i < 5; ++i) await nextTick();
    assert.equal(readback.bytesRead, split.shardBytes(layout, 0) + split.batchBytes(14, 15));
    assert.equal(readback.complete, false);
    await shard2.ready(Int32Array.of(0));
    assert.equal(
      readback.bytesRead,
      split.shardBytes(layout, 0) + split.batchBytes(10, 11) + split.batchBytes(14, 15),
      'on demand after stop()',
    );
  });

  it('a record batch that fails its checksum: kept and thrown by the next ready(), its rows loaded or not', async () => {
    const dir = path.join(scratch, 'flipped');
    fs.cpSync(synthetic, dir, { recursive: true });
    const file = path.join(dir, 'train.arrow');
    // 20 record batches of one size between the 8-byte magic and the tail: batch 12 is in shard 2
    const tailOffset = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')).splits.train.tail.offset;
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.of(0xff), 0, 1, 8 + 12 * ((tailOffset - 8) / 20) + 300);
    fs.closeSync(fd);
    const broken = await Dataset.open(dir);
    try {
      const message = `${file}: corrupt: record batch 12 fails the manifest checksum`;
      const readback = new Readback(broken.train, broken.train.layout(4), [2]);
      const [shard] = readback.shards;
      await shard.ready(Int32Array.of(0));
      readback.startBackground();
      // the pass reads 11..14 at once and fails; until then, rows already loaded are ready
      let polls = 0;
      await assert.rejects(
        async () => {
          for (; ; ++polls) {
            await shard.ready(Int32Array.of(0));
            await nextTick();
          }
        },
        { name: 'DatasetError', message },
      );
      assert.ok(polls > 0);
      await assert.rejects(shard.ready(Int32Array.of(0)), { message });
      await assert.rejects(shard.ready(Int32Array.of(249)), { message });
      assert.equal(readback.bytesRead, broken.train.batchBytes(10, 11));
    } finally {
      await broken.close();
    }
  });
  it('a shard taken over goes into the memory kept for it: a block as large as the largest shard, the same data', async () => {
    const unequal = split.layout(3); // 6, 7 and 7 record batches: shards of 300, 350 and 350 rows
    const rows = Int32Array.of(0, 120, 299);
    const whole = await split.readShards(unequal, [0]);
    const fresh = new HeldShards(dataset, unequal, () => 0);
    const kept = new HeldShards(dataset, unequal, () => 0);
    kept.keepRoom(1);
    for (const held of [fresh, kept]) await held.readBackFirst([0], new Map([[0, rows]]));
    assert.equal(fresh.shard(0).features.buffer.byteLength, split.featureBytes(300));
    assert.equal(kept.shard(0).features.buffer.byteLength, split.featureBytes(350));
    assert.deepEqual(rowsOf(kept.shard(0), [...rows]), rowsOf(whole.get(0)!, [...rows]));
    await Promise.all([fresh.stop(), kept.stop()]);
  });

  it('the memory kept for a shard is in memory, its pages mapped, not just allocated; keeping none lets it go', async function () {
    if (!fs.existsSync('/proc/self/status')) this.skip();
    const large = path.join(scratch, 'large');
    await generateSynthetic(large, { ...small, shape: [1, 64, 64], trainRows: 2000, testRows: 100, rowsPerBatch: 100 });
    // in a process of its own, as for the sums' memory: a collection here could free another
    // test's garbage while the block is written
    const measure = `
      const { Dataset } = require(${JSON.stringify(require.resolve('../../src/data/dataset'))});
      const { HeldShards } = require(${JSON.stringify(require.resolve('../../src/protocol/shards'))});
      const { mappedAll } = require(${JSON.stringify(require.resolve('../../src/base/mapped-memory'))});
      const resident = () => Number(/VmRSS:\\s+(\\d+) kB/.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
      (async () => {
        const dataset = await Dataset.open(${JSON.stringify(large)});
        const layout = dataset.train.layout(1);
        const held = new HeldShards(dataset, layout, () => 0);
        const before = resident();
        held.keepRoom(1);
        await mappedAll();
        const grown = resident() - before;
        const bytes = dataset.train.featureBytes(layout.rows(0));
        held.keepRoom(0);
        // V8 frees a collected buffer's memory on a background thread: a bounded wait for it
        let released = Infinity;
        for (let tries = 0; tries < 100 && released >= bytes / 4; ++tries) {
          global.gc();
          await new Promise((resolve) => setTimeout(resolve, 20));
          released = resident() - before;
        }
        console.log(JSON.stringify({ grown, released, bytes }));
        await dataset.close();
      })();`;
    const child = spawnSync(process.execPath, ['--expose-gc', '-e', measure], { encoding: 'utf8' });
    assert.equal(child.status, 0, child.stderr);
    const { grown, released, bytes } = JSON.parse(child.stdout) as { grown: number; released: number; bytes: number };
    assert.equal(bytes, 2000 * 64 * 64);
    assert.ok(grown >= 0.75 * bytes, `resident memory grew by ${grown} bytes for a block of ${bytes}`);
    assert.ok(released < 0.25 * bytes, `resident memory stayed ${released} bytes above, the block let go`);
  });
});
