// Arrow datasets on disk: the Fashion-MNIST conversion against Debian's IDX files, partial readback
// of shards (bytes counted), sample identity whichever rank reads a shard, the synthetic generator,
// and one clear error line for every kind of broken dataset.
import { RecordBatchReader, type RecordBatchFileReader } from 'apache-arrow';
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { convertFashionMnist, debianSource, readIdxSplit } from '../../datasets/fashion-mnist';
import { generateSynthetic, syntheticDefaults } from '../../datasets/synthetic';
import { Dataset } from '../../src/data/dataset';
import { gatherBatch, MicroBatches } from '../../src/data/micro-batches';
import { BatchLayouts, batchLayout, copyBatch } from '../../src/data/record-batch';
import { ShardMap } from '../../src/data/shard-map';
import { addonPart } from '../../src/base/addon';
import { writeDataset, type SplitSource } from '../../src/data/writer';
import type { ShardData } from '../../src/data/split';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-data-');
const fashion = path.join(scratch, 'fashion-mnist');
const small = {
  ...syntheticDefaults,
  shape: [1, 8, 8] as [number, number, number],
  classes: 4,
  trainRows: 1000,
  testRows: 200,
  rowsPerBatch: 50,
};

async function withDataset<T>(dir: string, use: (dataset: Dataset) => Promise<T>): Promise<T> {
  const dataset = await Dataset.open(dir);
  try {
    return await use(dataset);
  } finally {
    await dataset.close();
  }
}

/** A copy of the small synthetic dataset that a test may break. */
function copyOf(source: string, name: string): string {
  const dir = path.join(scratch, name);
  fs.cpSync(source, dir, { recursive: true });
  return dir;
}

function flipByte(file: string, position: number): void {
  const fd = fs.openSync(file, 'r+');
  const byte = Buffer.alloc(1);
  fs.readSync(fd, byte, 0, 1, position);
  byte[0] ^= 0x40;
  fs.writeSync(fd, byte, 0, 1, position);
  fs.closeSync(fd);
}

describe('Arrow datasets', function () {
  this.timeout(60_000);
  const synthetic = path.join(scratch, 'synthetic');

  before(async () => {
    await convertFashionMnist(debianSource, fashion);
    await generateSynthetic(synthetic, small);
  });
  after(() => removeScratch(scratch));

  it('converts Fashion-MNIST byte for byte, with its counts and checksums', async () => {
    await withDataset(fashion, async (dataset) => {
      assert.deepEqual(dataset.sampleShape, [1, 28, 28]);
      assert.equal(dataset.manifest.class_names[9], 'Ankle boot');
      assert.deepEqual(dataset.manifest.splits.train.class_counts, new Array(10).fill(6000));
      assert.deepEqual([dataset.train.rows, dataset.test.rows, dataset.train.recordBatchRows.length], [60000, 10000, 600]);
      // the bytes every earlier version wrote (format /2): the quickstart's results depend on them
      assert.equal(dataset.manifest.format, 'ft-train-dataset/2');
      assert.equal(dataset.manifest.splits.train.sha256, '4de582e231fbf71133341218d02ff3f6946e507ecb47d786cc4dcb25f42f34cc');
      await dataset.verify();
      for (const [split, idxName] of [
        [dataset.train, 'train'],
        [dataset.test, 't10k'],
      ] as const) {
        const idx = readIdxSplit(debianSource, idxName);
        const all = await split.readAll();
        assert.ok(Buffer.from(all.features).equals(Buffer.from(idx.images)), `${idxName} pixels differ`);
        assert.deepEqual(Array.from(all.labels), Array.from(idx.labels));
      }
      // Fashion-MNIST's first training labels, as published
      assert.deepEqual(Array.from((await dataset.train.readAll()).labels.subarray(0, 10)), [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]);
    });
  });

  it('reads back one shard with at most its share of the file plus one record batch', async () => {
    for (const S of [2, 4, 7, 64]) {
      for (const k of [0, Math.floor(S / 2), S - 1]) {
        await withDataset(fashion, async (dataset) => {
          const layout = dataset.train.layout(S);
          const before = dataset.train.bytesRead;
          const shard = (await dataset.train.readShards(layout, [k])).get(k)!;
          const read = dataset.train.bytesRead - before;
          const bound = (dataset.train.bytes / S) * 1.1 + dataset.train.largestBatchBytes;
          assert.ok(read <= bound, `S=${S} shard ${k}: read ${read} bytes, bound ${bound}`);
          assert.ok(read >= shard.rows * 784, `S=${S} shard ${k}: read ${read} bytes for ${shard.rows} images`);
          const all = await dataset.train.readAll();
          const first = layout.firstRow(k);
          assert.ok(Buffer.from(shard.features).equals(Buffer.from(all.features.subarray(first * 784, (first + shard.rows) * 784))));
        });
      }
    }
  });

  it("reads the test split's first N samples (--eval-samples) from the record batches holding them alone", async () => {
    await withDataset(fashion, async (dataset) => {
      const test = dataset.test;
      const all = await test.readAll();
      const batchRows = test.recordBatchRows;
      for (const rows of [0, 1, batchRows[0] - 1, batchRows[0], batchRows[0] + 1, test.rows - 1, test.rows]) {
        let end = 0;
        for (let covered = 0; covered < rows; covered += batchRows[end++]);
        const before = test.bytesRead;
        const first = await test.readFirst(rows);
        assert.equal(test.bytesRead - before, end === 0 ? 0 : test.batchBytes(0, end), `${rows} rows`);
        assert.equal(first.rows, rows);
        assert.deepEqual(first.labels, all.labels.subarray(0, rows));
        assert.ok(Buffer.from(first.features).equals(Buffer.from(all.features.subarray(0, rows * 784))), `${rows} rows`);
      }
      for (const rows of [-1, 1.5, test.rows + 1])
        await assert.rejects(test.readFirst(rows), { message: `${test.path}: expected 0 to ${test.rows} rows to read, got ${rows}` });
    });
  });

  it('puts a shard read for training on huge pages where the kernel has them (each step gathers its rows at random)', function () {
    const setting = '/sys/kernel/mm/transparent_hugepage/enabled';
    if (!fs.existsSync(setting) || fs.readFileSync(setting, 'utf8').includes('[never]')) this.skip();
    // in a fresh process, as a rank reads its shards: memory a process already wrote is not remapped
    const child = spawnSync(process.execPath, [path.join(__dirname, '..', 'helpers', 'shard-pages.js'), fashion], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(child.status, 0, child.stderr);
    const { bytes, huge } = JSON.parse(child.stdout) as { bytes: number; huge: number };
    // most of its 47 MB (here all but the unaligned ends; without the advice none), leaving room
    // for a kernel short of free 2 MiB blocks
    assert.ok(bytes === 47_040_000 && huge >= bytes / 2, `${huge} bytes on huge pages of ${bytes}`);
  });

  it('gives the same micro-batches whichever rank reads a shard, before or after a failure', async () => {
    const S = 8;
    const batch = 64;
    const gather = (data: ShardData, plan: MicroBatches, s: number, epoch: number, t: number) => {
      const rows = plan.rows(s, epoch, t);
      const x = new Float32Array(rows.length * 784);
      const labels = new Int32Array(rows.length);
      gatherBatch(data, rows, x, labels);
      return { x: Buffer.from(x.buffer), labels: Array.from(labels) };
    };
    const before = ShardMap.initial(S, [0, 1, 2, 3]);
    const after = before.without([2], [0, 1, 3]);
    // rank 2 at start, and the survivor that reads its shards back, each in its own process image
    const original = await withDataset(fashion, (d) => d.train.readShards(d.train.layout(S), before.shardsOf(2)));
    const readBack = await withDataset(fashion, async (d) => {
      const moved = before.movedTo(after);
      return (await Promise.all([...moved].map(([, shards]) => d.train.readShards(d.train.layout(S), shards)))).reduce(
        (all, m) => new Map([...all, ...m]),
      );
    });
    assert.deepEqual([...readBack.keys()].sort(), before.shardsOf(2));
    await withDataset(fashion, async (d) => {
      const plan = new MicroBatches(d.train.layout(S), batch, 3);
      for (const s of before.shardsOf(2)) {
        for (const [epoch, t] of [
          [0, 0],
          [0, 57],
          [2, 116],
        ]) {
          assert.deepEqual(gather(readBack.get(s)!, plan, s, epoch, t), gather(original.get(s)!, plan, s, epoch, t));
        }
      }
    });
  });

  it('one epoch of micro-batches over the real file is the training set exactly once', async () => {
    await withDataset(fashion, async (dataset) => {
      const S = 7;
      const layout = dataset.train.layout(S);
      const shards = await dataset.train.readShards(layout, [0, 1, 2, 3, 4, 5, 6]);
      const all = await dataset.train.readAll();
      const plan = new MicroBatches(layout, 100, 11);
      const seen = new Uint8Array(all.rows);
      for (let t = 0; t < plan.stepsPerEpoch; ++t) {
        for (let s = 0; s < S; ++s) {
          for (const row of plan.rows(s, 1, t)) {
            const global = layout.firstRow(s) + row;
            seen[global] += 1;
            assert.equal(shards.get(s)!.labels[row], all.labels[global]);
          }
        }
      }
      assert.ok(seen.every((n) => n === 1));
    });
  });

  it('generates the same synthetic bytes from the same seed, and classes that can be told apart', async () => {
    const again = path.join(scratch, 'synthetic-again');
    const other = path.join(scratch, 'synthetic-other');
    await generateSynthetic(again, small);
    await generateSynthetic(other, { ...small, seed: 2 });
    const hashes = [synthetic, again, other].map(
      (dir) => JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')).splits.train.sha256,
    );
    assert.equal(hashes[0], hashes[1]);
    assert.notEqual(hashes[0], hashes[2]);
    await withDataset(synthetic, async (dataset) => {
      assert.deepEqual(dataset.sampleShape, [1, 8, 8]);
      assert.equal(dataset.classes, 4);
      // nearest class mean, trained on train, scored on test: well above chance (25%), below perfect
      const train = await dataset.train.readAll();
      const test = await dataset.test.readAll();
      const means = Array.from({ length: 4 }, () => new Float64Array(64));
      const counts = new Array(4).fill(0);
      for (let i = 0; i < train.rows; ++i) {
        counts[train.labels[i]] += 1;
        for (let j = 0; j < 64; ++j) means[train.labels[i]][j] += train.features[i * 64 + j];
      }
      means.forEach((m, c) => m.forEach((v, j) => (m[j] = v / counts[c])));
      let correct = 0;
      for (let i = 0; i < test.rows; ++i) {
        const distance = means.map((m) => m.reduce((sum, v, j) => sum + (v - test.features[i * 64 + j]) ** 2, 0));
        if (distance.indexOf(Math.min(...distance)) === test.labels[i]) correct += 1;
      }
      const accuracy = correct / test.rows;
      assert.ok(accuracy > 0.4 && accuracy < 1, `nearest-mean accuracy ${accuracy}`);
      assert.ok(
        counts.every((n) => n > 150),
        `class counts ${counts}`,
      );
    });
  });

  describe('errors', () => {
    const expectError = async (dir: string, message: string | RegExp, use: (d: Dataset) => Promise<unknown> = async () => {}) => {
      await assert.rejects(
        () => withDataset(dir, use),
        (error: Error) => {
          assert.equal(error.name, 'DatasetError');
          if (typeof message === 'string') assert.equal(error.message, message);
          else assert.match(error.message, message);
          assert.ok(!error.message.includes('\n'), 'one line');
          return true;
        },
      );
    };

    it('a missing directory, manifest or file', async () => {
      await expectError(path.join(scratch, 'nowhere'), `${path.join(scratch, 'nowhere')}: no such dataset directory`);
      const empty = path.join(scratch, 'empty');
      fs.mkdirSync(empty);
      await expectError(empty, `${path.join(empty, 'manifest.json')}: missing: not a dataset directory (or its conversion did not finish)`);
      const noTrain = copyOf(synthetic, 'no-train');
      fs.rmSync(path.join(noTrain, 'train.arrow'));
      await expectError(noTrain, `${path.join(noTrain, 'train.arrow')}: missing`);
    });

    it('a malformed or inconsistent manifest', async () => {
      const bad = copyOf(synthetic, 'bad-json');
      fs.writeFileSync(path.join(bad, 'manifest.json'), '{"format": ');
      await expectError(bad, new RegExp(`^${path.join(bad, 'manifest.json')}: not valid JSON \\(`));
      const wrong = copyOf(synthetic, 'bad-field');
      const manifest = JSON.parse(fs.readFileSync(path.join(wrong, 'manifest.json'), 'utf8'));
      manifest.splits.train.rows = 999;
      fs.writeFileSync(path.join(wrong, 'manifest.json'), JSON.stringify(manifest));
      await expectError(
        wrong,
        `${path.join(wrong, 'manifest.json')}: splits.train.class_counts: expected counts summing to 999, got [${manifest.splits.train.class_counts}]`,
      );
    });

    it("a file whose schema is not the manifest's", async () => {
      const dir = copyOf(synthetic, 'wrong-schema');
      const file = path.join(dir, 'manifest.json');
      const manifest = JSON.parse(fs.readFileSync(file, 'utf8'));
      manifest.sample_shape = [1, 8, 9];
      manifest.schema = { image: 'FixedSizeList[72]<Uint8>', label: 'Int32' };
      fs.writeFileSync(file, JSON.stringify(manifest));
      await expectError(
        dir,
        `${path.join(dir, 'train.arrow')}: wrong schema: expected image: FixedSizeList[72]<Uint8>, label: Int32, got image: FixedSizeList[64]<Uint8>, label: Int32`,
      );
    });

    it('a truncated file', async () => {
      const dir = copyOf(synthetic, 'truncated');
      const file = path.join(dir, 'train.arrow');
      const size = fs.statSync(file).size;
      fs.truncateSync(file, size - 1000);
      await expectError(dir, `${file}: truncated: ${size - 1000} bytes, the manifest says ${size}`);
    });

    it("a flipped byte in a record batch: its shard's read and the full check fail, other shards read", async () => {
      const dir = copyOf(synthetic, 'flipped');
      const file = path.join(dir, 'train.arrow');
      // 20 record batches of 50 samples, all of one size, between the 8-byte magic and the tail
      const tailOffset = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')).splits.train.tail.offset;
      const offset = 8 + 7 * ((tailOffset - 8) / 20); // batch 7, in shard 1 (batches 5..9) of 4
      flipByte(file, offset + 300);
      await expectError(dir, `${file}: corrupt: record batch 7 fails the manifest checksum`, (d) =>
        d.train.readShards(d.train.layout(4), [1]),
      );
      await expectError(dir, `${file}: corrupt: the file fails the manifest checksum`, (d) => d.verify());
      await withDataset(dir, async (d) => assert.equal((await d.train.readShards(d.train.layout(4), [0, 2, 3])).size, 3));
    });

    it('a flipped byte in the footer', async () => {
      const dir = copyOf(synthetic, 'flipped-footer');
      const file = path.join(dir, 'train.arrow');
      flipByte(file, fs.statSync(file).size - 40);
      await expectError(dir, `${file}: corrupt: its footer fails the manifest checksum`);
    });

    it("a record batch whose bytes do not hold the schema's columns, its checksum aside", async () => {
      const file = path.join(synthetic, 'train.arrow');
      const reader = RecordBatchReader.from(fs.readFileSync(file)) as RecordBatchFileReader;
      reader.open();
      const { offset, metaDataLength, bodyLength } = reader.footer!.getRecordBatch(3)!;
      const block = fs.readFileSync(file).subarray(Number(offset), Number(offset) + metaDataLength + Number(bodyLength));
      const layout = batchLayout(block, metaDataLength, 64, 1);
      assert.equal(layout.rows, 50);
      const images = new Uint8Array(50 * 64);
      const labels = new Int32Array(50);
      copyBatch(block, layout, 64, images, labels, 0);
      await withDataset(synthetic, async (d) => {
        const shard = (await d.train.readShards(d.train.layout(20), [3])).get(3)!;
        assert.deepEqual(images, shard.features);
        assert.deepEqual(labels, shard.labels);
      });
      assert.throws(() => batchLayout(block, metaDataLength, 63, 1), {
        message: 'its columns are not 50 samples of 63 values and 50 labels',
      });
      assert.throws(() => batchLayout(block.subarray(0, metaDataLength + 100), metaDataLength, 64, 1), {
        message: `its body of ${Number(bodyLength)} bytes overruns its block`,
      });
      assert.throws(() => batchLayout(block, block.length + 8, 64, 1), {
        message: `its metadata length ${block.length + 8} does not fit its ${block.length} bytes`,
      });
      assert.throws(() => batchLayout(block.subarray(metaDataLength), 16, 64, 1), { message: /^its metadata/ });
    });

    it("batch layouts decoded once per distinct metadata: another batch's same bytes share it, other bytes are decoded (and refused) again", () => {
      const file = path.join(synthetic, 'train.arrow');
      const bytes = fs.readFileSync(file);
      const reader = RecordBatchReader.from(bytes) as RecordBatchFileReader;
      reader.open();
      const blockOf = (i: number) => {
        const { offset, metaDataLength, bodyLength } = reader.footer!.getRecordBatch(i)!;
        return { block: bytes.subarray(Number(offset), Number(offset) + metaDataLength + Number(bodyLength)), metaDataLength };
      };
      const [third, fourth] = [blockOf(3), blockOf(4)];
      const layouts = new BatchLayouts(64, 1);
      const layout = layouts.of(third.block, third.metaDataLength);
      assert.deepEqual(layout, batchLayout(third.block, third.metaDataLength, 64, 1));
      assert.equal(layouts.of(fourth.block, fourth.metaDataLength), layout);
      const altered = Buffer.from(fourth.block);
      altered[0] ^= 0xff; // no continuation marker (-1) but -256, read as the metadata's length
      assert.throws(() => layouts.of(altered, fourth.metaDataLength), { message: 'its metadata claims -256 bytes' });
      assert.throws(() => layouts.of(fourth.block.subarray(0, fourth.metaDataLength + 100), fourth.metaDataLength), {
        message: /^its body of \d+ bytes overruns its block$/,
      });
    });

    it('float32 feature vectors (format /3): stored, checked and batched exactly, divisor 1', async () => {
      const dir = path.join(scratch, 'float-features');
      const value = (row: number, j: number) => Math.fround(((row - 7.25) * (j + 1)) / 3);
      const source = (offset: number, rows: number): SplitSource => ({
        rows,
        fill(first, features, labels) {
          for (let i = 0; i < labels.length; ++i) {
            labels[i] = (offset + first + i) % 3;
            for (let j = 0; j < 5; ++j) features[i * 5 + j] = value(offset + first + i, j);
          }
        },
      });
      const info = {
        name: 'floats',
        source: 'test',
        sampleShape: [5],
        classNames: ['a', 'b', 'c'],
        features: { dtype: 'float32' as const, divisor: 1 },
        split: { method: 'given' as const },
      };
      await writeDataset(dir, info, { train: source(0, 23), test: source(100, 7) }, 4);
      await withDataset(dir, async (d) => {
        assert.equal(d.manifest.format, 'ft-train-dataset/3');
        assert.deepEqual([d.sampleShape, d.manifest.dtype, d.manifest.divisor, d.manifest.split], [[5], 'float32', 1, { method: 'given' }]);
        assert.deepEqual(d.manifest.schema, { features: 'FixedSizeList[5]<Float32>', label: 'Int32' });
        assert.deepEqual(
          [d.train.recordBatchRows, d.manifest.splits.train.class_counts],
          [
            [4, 4, 4, 4, 4, 3],
            [8, 8, 7],
          ],
        );
        await d.verify();
        const shard = (await d.train.readShards(d.train.layout(3), [1])).get(1)!;
        assert.ok(shard.features instanceof Float32Array);
        const x = new Float32Array(10);
        const labels = new Int32Array(2);
        gatherBatch(shard, Int32Array.from([0, 7]), x, labels);
        // rows sharing memory with x would be read after x is written over them
        const memory = new ArrayBuffer(64);
        assert.throws(
          () =>
            addonPart<{ gatherRows(...args: unknown[]): void }>().gatherRows(
              shard.features,
              5,
              new Int32Array(memory, 0, 2),
              1,
              new Float32Array(memory, 4, 10),
            ),
          { name: 'TypeError', message: 'gatherRows: expected x to be memory apart from rows, got a view overlapping rows' },
        );
        // shard 1 of 3 over 6 batches holds batches 2 and 3: rows 8..15
        assert.deepEqual(Array.from(x), [0, 1, 2, 3, 4].map((j) => value(8, j)).concat([0, 1, 2, 3, 4].map((j) => value(15, j))));
        assert.deepEqual(Array.from(labels), [2, 0]);
        const test = await d.test.readAll();
        assert.equal(test.features[34], value(106, 4));
      });
    });

    it('more shards than the data allows', async () => {
      await expectError(
        synthetic,
        `${path.join(synthetic, 'train.arrow')}: 21 shards asked, but it has 20 record batches: at most 20 shards`,
        async (d) => d.train.layout(21),
      );
    });
  });
});
