// ft-data against real inputs: the CSVs Debian's python3-sklearn ships (exact counts, standardized
// train columns), a CSV far larger than the converter's heap, Parquet written by an independent
// writer from the same data (bit for bit the CSV's dataset), and one line per kind of bad input.
import { execFile } from 'node:child_process';
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { convertCsv, type CsvOptions } from '../../src/data/convert/csv';
import { Binary, Field, Float64, Int64, Schema, Struct, Table, tableToIPC, Utf8, vectorFromArray, type Vector } from 'apache-arrow';
import { PNG } from 'pngjs';
import sharp from 'sharp';
import { debianSource, readIdxSplit } from '../../datasets/fashion-mnist';
import { convertHf } from '../../src/data/convert/hf';
import { convertImages } from '../../src/data/convert/images';
import { convertParquet } from '../../src/data/convert/parquet';
import { Dataset } from '../../src/data/dataset';
import { makeScratch, removeScratch } from '../helpers/scratch';

const sklearnData = '/usr/lib/python3/dist-packages/sklearn/datasets/data';
/** JPEG photos python3-sklearn ships (427x640 RGB) */
const sklearnImages = '/usr/lib/python3/dist-packages/sklearn/datasets/images';
const ftData = path.join(__dirname, '..', '..', '..', 'launch', 'ft-data.js');
const scratch = makeScratch('ft-data-tool-');

const options = (out: string, extra: Partial<CsvOptions> = {}): CsvOptions => ({
  out: path.join(scratch, out),
  force: false,
  testFraction: 0.2,
  seed: 0,
  rowsPerBatch: 100,
  label: 'last',
  header: 'auto',
  ...extra,
});

/** Runs ft-data; resolves to its exit code and stderr. */
async function run(args: string[], nodeFlags: string[] = []): Promise<{ code: number; stderr: string }> {
  try {
    const { stderr } = await promisify(execFile)(process.execPath, [...nodeFlags, ftData, ...args], { maxBuffer: 1 << 24 });
    return { code: 0, stderr };
  } catch (error) {
    const failure = error as { code: number; stderr: string };
    return { code: failure.code, stderr: failure.stderr };
  }
}

async function readSplits(dir: string) {
  const dataset = await Dataset.open(dir);
  try {
    await dataset.verify();
    return { manifest: dataset.manifest, train: await dataset.train.readAll(), test: await dataset.test.readAll() };
  } finally {
    await dataset.close();
  }
}

/** Per column of [rows, F] values: mean and population standard deviation, in float64. */
function columnStats(typed: Float32Array | Uint8Array, features: number): { mean: number[]; std: number[] } {
  const values = Array.from(typed);
  const rows = values.length / features;
  const mean = Array.from({ length: features }, (_, j) => values.filter((_, i) => i % features === j).reduce((a, b) => a + b, 0) / rows);
  const std = mean.map((m, j) => Math.sqrt(values.filter((_, i) => i % features === j).reduce((a, b) => a + (b - m) ** 2, 0) / rows));
  return { mean, std };
}

function writeParquet(file: string, options: Parameters<typeof parquetWriteBuffer>[0]): void {
  fs.writeFileSync(file, new Uint8Array(parquetWriteBuffer(options)));
}

/**
 * A directory laid out as Hugging Face datasets 2.x's save_to_disk writes one split (built here with
 * apache-arrow, not by `datasets`, which Debian 12 does not ship): Arrow IPC stream files
 * data-0000K-of-0000N.arrow whose schema metadata "huggingface" holds the features, and
 * dataset_info.json and state.json naming them.
 */
function writeHf(dir: string, features: Record<string, unknown>, files: Record<string, Vector>[][]): void {
  fs.mkdirSync(dir, { recursive: true });
  const names = files.map((_, k) => `data-${String(k).padStart(5, '0')}-of-${String(files.length).padStart(5, '0')}.arrow`);
  let rows = 0;
  files.forEach((batches, k) => {
    const tables = batches.map((columns) => new Table(columns));
    rows += tables.reduce((n, t) => n + t.numRows, 0);
    const schema = new Schema(tables[0].schema.fields, new Map([['huggingface', JSON.stringify({ info: { features } })]]));
    fs.writeFileSync(
      path.join(dir, names[k]),
      tableToIPC(
        new Table(
          schema,
          tables.flatMap((t) => t.batches),
        ),
        'stream',
      ),
    );
  });
  fs.writeFileSync(
    path.join(dir, 'dataset_info.json'),
    JSON.stringify({
      citation: '',
      description: '',
      features,
      homepage: '',
      license: '',
      splits: { train: { name: 'train', num_bytes: 0, num_examples: rows, dataset_name: null } },
    }),
  );
  fs.writeFileSync(
    path.join(dir, 'state.json'),
    JSON.stringify({
      _data_files: names.map((filename) => ({ filename })),
      _fingerprint: '0123456789abcdef',
      _format_columns: null,
      _format_kwargs: {},
      _format_type: null,
      _output_all_columns: false,
      _split: 'train',
    }),
  );
}

function sum(counts: number[], other: number[]): number[] {
  return counts.map((c, i) => c + other[i]);
}

describe('ft-data', function () {
  this.timeout(120_000);
  after(() => removeScratch(scratch));

  describe('csv', () => {
    const cases = [
      { file: 'iris.csv', rows: 150, features: 4, classes: [50, 50, 50], names: ['setosa', 'versicolor', 'virginica'] },
      { file: 'wine_data.csv', rows: 178, features: 13, classes: [59, 71, 48], names: ['class_0', 'class_1', 'class_2'] },
      { file: 'breast_cancer.csv', rows: 569, features: 30, classes: [212, 357], names: ['malignant', 'benign'] },
      {
        file: 'digits.csv.gz',
        rows: 1797,
        features: 64,
        classes: [178, 182, 177, 183, 181, 182, 181, 179, 174, 180],
        names: ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'],
      },
    ];
    for (const c of cases) {
      it(`converts scikit-learn's ${c.file}: counts, classes, standardized train columns`, async () => {
        const manifest = await convertCsv(path.join(sklearnData, c.file), options(c.file));
        const { train, test } = await readSplits(path.join(scratch, c.file));
        assert.deepEqual(
          [manifest.sample_shape, manifest.dtype, manifest.divisor, manifest.class_names],
          [[c.features], 'float32', 1, c.names],
        );
        assert.equal(train.rows + test.rows, c.rows);
        assert.deepEqual(sum(manifest.splits.train.class_counts, manifest.splits.test.class_counts), c.classes);
        assert.deepEqual(manifest.split, { method: 'stratified', test_fraction: 0.2, seed: 0 });
        // every class's test share is within two rows of a fifth
        manifest.splits.test.class_counts.forEach((n, k) =>
          assert.ok(Math.abs(n - c.classes[k] * 0.2) < 2, `class ${k}: ${n} test rows of ${c.classes[k]}`),
        );
        const stats = columnStats(train.features, c.features);
        stats.mean.forEach((m, j) => assert.ok(Math.abs(m) < 1e-6, `column ${j} mean ${m}`));
        // a constant column (digits' first pixel is always 0) stays 0
        stats.std.forEach((s, j) =>
          assert.ok(Math.abs(s - 1) < 1e-6 || (s === 0 && manifest.standardization!.std[j] === 1), `column ${j} std ${s}`),
        );
      });
    }

    it('the same seed gives the same split; rows and values as the file holds them', async () => {
      const manifest = await convertCsv(path.join(sklearnData, 'iris.csv'), options('iris-again'));
      assert.deepEqual(
        [manifest.splits.train.class_counts, manifest.splits.test.class_counts],
        [
          [41, 41, 41],
          [9, 9, 9],
        ],
      );
      assert.equal(manifest.splits.train.sha256, (await readSplits(path.join(scratch, 'iris.csv'))).manifest.splits.train.sha256);
      const { train, test } = await readSplits(path.join(scratch, 'iris-again'));
      // iris's first row 5.1,3.5,1.4,0.2 (setosa) went to train or test: find it, un-standardized
      const { mean, std } = manifest.standardization!;
      const first = [5.1, 3.5, 1.4, 0.2].map((v, j) => Math.fround((Math.fround(v) - mean[j]) / std[j]));
      const rows = [
        ...Array.from({ length: train.rows }, (_, i) => Array.from(train.features.subarray(i * 4, i * 4 + 4))),
        ...Array.from({ length: test.rows }, (_, i) => Array.from(test.features.subarray(i * 4, i * 4 + 4))),
      ];
      assert.equal(rows.filter((r) => r.every((v, j) => v === first[j])).length, 1);
    });

    it('converts a CSV several times larger than its heap, in one pass with bounded memory', async () => {
      const file = path.join(scratch, 'big.csv');
      const fd = fs.openSync(file, 'w');
      fs.writeSync(fd, `${Array.from({ length: 16 }, (_, j) => `x${j}`).join(',')},kind\n`);
      const rows = 400_000;
      for (let first = 0; first < rows; first += 10_000) {
        const lines = [];
        for (let i = first; i < first + 10_000; ++i)
          lines.push(
            `${Array.from({ length: 16 }, (_, j) => ((i * (j + 7)) % 1000) / 8 + 100000).join(',')},${['cat', 'dog', 'eel'][i % 3]}\n`,
          );
        fs.writeSync(fd, lines.join(''));
      }
      fs.closeSync(fd);
      const size = fs.statSync(file).size;
      assert.ok(size > 60e6, `${size} bytes`);
      const out = path.join(scratch, 'big');
      const { code, stderr } = await run(
        ['csv', file, '--label', 'kind', '--out', out, '--rows-per-batch', '5000'],
        ['--max-old-space-size=24'],
      );
      assert.equal(code, 0, stderr);
      const manifest = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8'));
      assert.deepEqual(manifest.class_names, ['cat', 'dog', 'eel']);
      assert.equal(manifest.splits.train.rows + manifest.splits.test.rows, rows);
      assert.deepEqual(sum(manifest.splits.train.class_counts, manifest.splits.test.class_counts), [133334, 133333, 133333]);
      assert.deepEqual(
        manifest.standardization.columns,
        Array.from({ length: 16 }, (_, j) => `x${j}`),
      );
    });

    it('bad input: one line naming the file and the row, column or label, exit 1, nothing left behind', async () => {
      const write = (name: string, text: string) => {
        fs.writeFileSync(path.join(scratch, name), text);
        return path.join(scratch, name);
      };
      const good = 'a,b,label\n1,2,x\n3,4,y\n5,6,x\n7,8,y\n';
      const cases: [string[], string][] = [
        [
          ['csv', write('ragged.csv', 'a,b,label\n1,2,x\n3,y\n'), '--out', path.join(scratch, 'o')],
          `ft-data: ${path.join(scratch, 'ragged.csv')}: line 3: 2 cells, expected 3 (a ragged row)`,
        ],
        [
          ['csv', write('nan.csv', 'a,b,label\n1,2,x\n3,four,y\n'), '--out', path.join(scratch, 'o')],
          `ft-data: ${path.join(scratch, 'nan.csv')}: line 3, column "b": "four" is not a number`,
        ],
        [
          ['csv', write('good.csv', good), '--label', 'kind', '--out', path.join(scratch, 'o')],
          `ft-data: ${path.join(scratch, 'good.csv')}: no label column "kind" (it has 3 columns: a, b, label; or give a 0-based index, or "last")`,
        ],
        [
          ['csv', write('one.csv', 'a,b,label\n1,2,x\n3,4,x\n'), '--out', path.join(scratch, 'o')],
          `ft-data: ${path.join(scratch, 'one.csv')}: label column "label": only one class ("x"): a classifier needs two or more`,
        ],
        [
          // separated by semicolons: one column, the label alone (it converted to samples of no features)
          ['csv', write('semicolons.csv', 'a;b;label\n1;2;x\n3;4;y\n'), '--out', path.join(scratch, 'o')],
          `ft-data: ${path.join(scratch, 'semicolons.csv')}: one column ("a;b;label"): no features beside a label (columns are separated by commas)`,
        ],
        [
          ['csv', path.join(scratch, 'absent.csv'), '--out', path.join(scratch, 'o')],
          `ft-data: ${path.join(scratch, 'absent.csv')}: cannot read (ENOENT)`,
        ],
      ];
      for (const [args, line] of cases) {
        const { code, stderr } = await run(args);
        assert.deepEqual([code, stderr.trim().split('\n').pop()], [1, line]);
        assert.deepEqual(
          fs.readdirSync(scratch).filter((name) => name.startsWith('.o.') || name === 'o'),
          [],
          'a partial output was left',
        );
      }
      // --out where no directory can be made: named as --out, with the staging directory and the reason
      const file = write('good.csv', good);
      const { code, stderr } = await run(['csv', file, '--out', path.join(file, 'o')]);
      assert.equal(code, 1);
      const escaped = file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      assert.match(
        stderr.trim(),
        new RegExp(`^ft-data: ${escaped}/o: cannot be written: making ${escaped}/\\.o\\.partial-\\d+ failed \\(ENOTDIR\\)$`),
      );
    });

    it('usage errors exit 2 with one line; --help lists every flag with its default', async () => {
      assert.deepEqual(await run(['csv', 'x.csv']), { code: 2, stderr: 'ft-data: Missing required argument: out (see --help)\n' });
      assert.deepEqual(await run(['tsv', 'x']), { code: 2, stderr: 'ft-data: Unknown arguments: tsv, x (see --help)\n' });
      assert.deepEqual((await run(['csv', 'x.csv', '--out', 'o', '--test-fraction', '0.7'])).code, 2);
      const { stdout } = await promisify(execFile)(process.execPath, [ftData, 'csv', '--help']);
      for (const flag of ['--out', '--force', '--name', '--test ', '--test-fraction', '--seed', '--rows-per-batch', '--label', '--header'])
        assert.ok(stdout.includes(flag), flag);
      for (const fallback of ['[default: 0.2]', '[default: 0]', '[default: 100]', '[default: "last"]', '[default: "auto"]'])
        assert.ok(stdout.includes(fallback), fallback);
    });
  });

  describe('parquet', () => {
    for (const [csv, rowGroupSize] of [
      ['iris.csv', 40],
      ['wine_data.csv', 64],
    ] as const) {
      it(`${csv} written as Parquet by hyparquet-writer (row groups of ${rowGroupSize}) converts bit for bit as the CSV does`, async () => {
        const [header, ...lines] = fs.readFileSync(path.join(sklearnData, csv), 'utf8').trim().split('\n');
        const names = header.split(',').slice(2);
        const rows = lines.map((line) => line.split(',').map(Number));
        const features = rows[0].length - 1;
        const file = path.join(scratch, csv.replace('.csv', '.parquet'));
        writeParquet(file, {
          rowGroupSize,
          columnData: [
            ...Array.from({ length: features }, (_, j) => ({ name: `feature_${j}`, data: rows.map((r) => r[j]), type: 'DOUBLE' as const })),
            { name: 'target', data: rows.map((r) => names[r[features]]), type: 'STRING' as const },
          ],
        });
        const fromCsv = await convertCsv(path.join(sklearnData, csv), options(`${csv}-csv`));
        const fromParquet = await convertParquet(file, { ...options(`${csv}-parquet`), label: 'target' });
        assert.deepEqual([fromParquet.class_names, fromParquet.standardization], [fromCsv.class_names, fromCsv.standardization]);
        const a = await readSplits(path.join(scratch, `${csv}-csv`));
        const b = await readSplits(path.join(scratch, `${csv}-parquet`));
        for (const split of ['train', 'test'] as const) {
          assert.ok(Buffer.from(a[split].features.buffer).equals(Buffer.from(b[split].features.buffer)), `${split} features`);
          assert.deepEqual(b[split].labels, a[split].labels);
          assert.equal(
            b.manifest.splits[split].record_batches.map((r) => r.crc64).join(),
            a.manifest.splits[split].record_batches.map((r) => r.crc64).join(),
          );
        }
      });
    }

    it('a non-numeric feature column, an unknown label column or a label with no features is named', async () => {
      const file = path.join(scratch, 'text.parquet');
      writeParquet(file, {
        columnData: [
          { name: 'size', data: [1, 2], type: 'DOUBLE' },
          { name: 'colour', data: ['red', 'blue'], type: 'STRING' },
          { name: 'y', data: [0, 1], type: 'INT32' },
        ],
      });
      await assert.rejects(convertParquet(file, { ...options('text'), label: 'y' }), {
        message: `${file}: column "colour": BYTE_ARRAY is not numeric (features must be numbers)`,
      });
      await assert.rejects(convertParquet(file, { ...options('text'), label: 'kind' }), {
        message: `${file}: no label column "kind" (it has 3 columns: size, colour, y)`,
      });
      const labelOnly = path.join(scratch, 'label-only.parquet');
      writeParquet(labelOnly, { columnData: [{ name: 'y', data: [0, 1], type: 'INT32' }] });
      await assert.rejects(convertParquet(labelOnly, { ...options('text'), label: 'y' }), {
        message: `${labelOnly}: one column ("y"): no features beside a label`,
      });
    });
  });

  describe('images', () => {
    const fashion = readIdxSplit(debianSource, 't10k');
    const sample = (i: number) => fashion.images.subarray(i * 784, (i + 1) * 784);
    /** Fashion-MNIST test image i as a grayscale PNG, written by pngjs (RGBA, r = g = b) */
    const writePng = (file: string, i: number) => {
      const png = new PNG({ width: 28, height: 28 });
      sample(i).forEach((v, p) => png.data.set([v, v, v, 255], p * 4));
      fs.writeFileSync(file, PNG.sync.write(png));
    };
    const folder = (...parts: string[]) => {
      const dir = path.join(scratch, ...parts);
      fs.mkdirSync(dir, { recursive: true });
      return dir;
    };

    it('class folders of PNG and JPEG files: shape, counts per class, pixels as decoded independently', async () => {
      // train: 5 PNGs of class "garment" (test images 0..4), 3 JPEGs of class "photo" (sklearn's two photos and one Fashion-MNIST sample written by sharp)
      for (let i = 0; i < 5; ++i) writePng(path.join(folder('imgs', 'garment'), `g${i}.png`), i);
      fs.copyFileSync(path.join(sklearnImages, 'china.jpg'), path.join(folder('imgs', 'photo'), 'china.jpg'));
      fs.copyFileSync(path.join(sklearnImages, 'flower.jpg'), path.join(folder('imgs', 'photo'), 'flower.jpg'));
      await sharp(Buffer.from(sample(5)), { raw: { width: 28, height: 28, channels: 1 } })
        .jpeg({ quality: 95 })
        .toFile(path.join(folder('imgs', 'photo'), 'm5.jpeg'));
      writePng(path.join(folder('imgs-test', 'garment'), 't.png'), 6);
      fs.copyFileSync(path.join(sklearnImages, 'flower.jpg'), path.join(folder('imgs-test', 'photo'), 'f.jpg'));

      const manifest = await convertImages(path.join(scratch, 'imgs'), {
        ...options('imgs-out'),
        test: path.join(scratch, 'imgs-test'),
        shape: [1, 28, 28],
      });
      assert.deepEqual(
        [manifest.sample_shape, manifest.dtype, manifest.divisor, manifest.class_names, manifest.split],
        [[1, 28, 28], 'uint8', 255, ['garment', 'photo'], { method: 'given' }],
      );
      assert.deepEqual(
        [manifest.splits.train.class_counts, manifest.splits.test.class_counts],
        [
          [5, 3],
          [1, 1],
        ],
      );
      const { train, test } = await readSplits(path.join(scratch, 'imgs-out'));
      assert.deepEqual(Array.from(train.labels), [0, 0, 0, 0, 0, 1, 1, 1]);
      // lossless PNGs come back as the IDX bytes exactly
      for (let i = 0; i < 5; ++i)
        assert.ok(Buffer.from(train.features.subarray(i * 784, (i + 1) * 784)).equals(Buffer.from(sample(i))), `garment ${i}`);
      assert.ok(Buffer.from(test.features.subarray(0, 784)).equals(Buffer.from(sample(6))));
      // the JPEG of sample 5 decodes close to it (lossy)
      const jpeg = train.features.subarray(7 * 784, 8 * 784);
      assert.ok(
        jpeg.every((v, p) => Math.abs(v - sample(5)[p]) <= 40),
        'JPEG of sample 5',
      );

      // RGB: flower.jpg (train row 1 of "photo", after china.jpg) at 3x8x8 against sharp's own resize of the file
      const rgb = await convertImages(path.join(scratch, 'imgs'), {
        ...options('imgs-rgb'),
        test: path.join(scratch, 'imgs-test'),
        shape: [3, 8, 8],
      });
      assert.deepEqual(rgb.sample_shape, [3, 8, 8]);
      const flower = (await readSplits(path.join(scratch, 'imgs-rgb'))).train.features.subarray(6 * 192, 7 * 192);
      const expected = await sharp(path.join(sklearnImages, 'flower.jpg')).resize(8, 8, { fit: 'fill' }).raw().toBuffer();
      assert.deepEqual([flower[0], flower[64], flower[128 + 9]], [expected[0], expected[1], expected[9 * 3 + 2]]);
    });

    it('an unreadable image and an empty class folder are named', async () => {
      fs.writeFileSync(path.join(folder('bad', 'a'), 'x.png'), 'not an image\n');
      writePng(path.join(folder('bad', 'b'), 'y.png'), 0);
      await assert.rejects(convertImages(path.join(scratch, 'bad'), { ...options('bad-out'), shape: [1, 28, 28] }), {
        message: new RegExp(`^${path.join(scratch, 'bad', 'a', 'x.png')}: not a readable PNG or JPEG image \\(`),
      });
      folder('bad', 'c');
      const { code, stderr } = await run([
        'images',
        path.join(scratch, 'bad'),
        '--shape',
        '1x28x28',
        '--out',
        path.join(scratch, 'bad-out'),
      ]);
      assert.deepEqual(
        [code, stderr],
        [1, `ft-data: ${path.join(scratch, 'bad', 'c')}: an empty class folder: no .png, .jpg or .jpeg images\n`],
      );
      assert.equal(fs.existsSync(path.join(scratch, 'bad-out')), false);
    });
  });

  describe('hf (a save_to_disk layout built with apache-arrow, see writeHf)', () => {
    const fashion = readIdxSplit(debianSource, 't10k');
    const pngOf = (i: number) => {
      const png = new PNG({ width: 28, height: 28 });
      fashion.images.subarray(i * 784, (i + 1) * 784).forEach((v, p) => png.data.set([v, v, v, 255], p * 4));
      // grayscale (colour type 0), as the Hub's Fashion-MNIST images are
      return new Uint8Array(PNG.sync.write(png, { colorType: 0, inputHasAlpha: true }));
    };
    const imageType = new Struct([new Field('bytes', new Binary(), true), new Field('path', new Utf8(), true)]);
    const features = { image: { _type: 'Image' }, label: { names: ['T-shirt/top', 'Trouser', 'Pullover'], _type: 'ClassLabel' } };
    const columns = (rows: number[]) => ({
      image: vectorFromArray(
        rows.map((i) => ({ bytes: pngOf(i), path: `${i}.png` })),
        imageType,
      ),
      label: vectorFromArray(
        rows.map((i) => BigInt(fashion.labels[i])),
        new Int64(),
      ),
    });

    it('an Image and a ClassLabel column over two files of two record batches: shape, classes, pixels', async () => {
      const rows = Array.from(fashion.labels.keys())
        .filter((i) => fashion.labels[i] < 3)
        .slice(0, 36);
      writeHf(path.join(scratch, 'hf-train'), features, [
        [columns(rows.slice(0, 10)), columns(rows.slice(10, 20))],
        [columns(rows.slice(20, 30))],
      ]);
      writeHf(path.join(scratch, 'hf-test'), features, [[columns(rows.slice(30))]]);
      const manifest = await convertHf(path.join(scratch, 'hf-train'), {
        ...options('hf-out'),
        label: undefined,
        test: path.join(scratch, 'hf-test'),
      });
      assert.deepEqual(
        [manifest.sample_shape, manifest.dtype, manifest.divisor, manifest.class_names],
        [[1, 28, 28], 'uint8', 255, features.label.names],
      );
      const count = (list: number[]) => [0, 1, 2].map((c) => list.filter((i) => fashion.labels[i] === c).length);
      assert.deepEqual(
        [manifest.splits.train.class_counts, manifest.splits.test.class_counts],
        [count(rows.slice(0, 30)), count(rows.slice(30))],
      );
      const { train, test } = await readSplits(path.join(scratch, 'hf-out'));
      assert.ok(
        Buffer.from(train.features).equals(
          Buffer.from(rows.slice(0, 30).flatMap((i) => Array.from(fashion.images.subarray(i * 784, (i + 1) * 784)))),
        ),
      );
      assert.deepEqual(
        Array.from(test.labels),
        rows.slice(30).map((i) => fashion.labels[i]),
      );
    });

    it('numeric Value columns (iris) convert bit for bit as the CSV does', async () => {
      const [header, ...lines] = fs.readFileSync(path.join(sklearnData, 'iris.csv'), 'utf8').trim().split('\n');
      const rows = lines.map((line) => line.split(',').map(Number));
      const iris = {
        ...Object.fromEntries([0, 1, 2, 3].map((j) => [`feature_${j}`, { dtype: 'float64', _type: 'Value' }])),
        target: { names: header.split(',').slice(2), _type: 'ClassLabel' },
      };
      const table = (part: number[][]) => ({
        ...Object.fromEntries(
          [0, 1, 2, 3].map((j) => [
            `feature_${j}`,
            vectorFromArray(
              part.map((r) => r[j]),
              new Float64(),
            ),
          ]),
        ),
        target: vectorFromArray(
          part.map((r) => BigInt(r[4])),
          new Int64(),
        ),
      });
      writeHf(path.join(scratch, 'hf-iris'), iris, [[table(rows.slice(0, 70)), table(rows.slice(70))]]);
      const fromHf = await convertHf(path.join(scratch, 'hf-iris'), { ...options('hf-iris-out'), label: undefined });
      const fromCsv = await convertCsv(path.join(sklearnData, 'iris.csv'), options('hf-iris-csv'));
      assert.deepEqual(
        [fromHf.class_names, fromHf.standardization, fromHf.splits.train.class_counts],
        [fromCsv.class_names, fromCsv.standardization, fromCsv.splits.train.class_counts],
      );
      const [a, b] = [await readSplits(path.join(scratch, 'hf-iris-csv')), await readSplits(path.join(scratch, 'hf-iris-out'))];
      for (const split of ['train', 'test'] as const)
        assert.ok(
          Buffer.from(a[split].features.buffer).equals(Buffer.from(b[split].features.buffer)) &&
            Buffer.from(a[split].labels.buffer).equals(Buffer.from(b[split].labels.buffer)),
          split,
        );
    });

    it('a directory without state.json is named', async () => {
      fs.mkdirSync(path.join(scratch, 'not-hf'));
      await assert.rejects(convertHf(path.join(scratch, 'not-hf'), { ...options('hf-none'), label: undefined }), {
        message: `${path.join(scratch, 'not-hf', 'state.json')}: missing: not a datasets save_to_disk directory`,
      });
    });
  });
});
