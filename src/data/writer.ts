// Writes a dataset directory: one Arrow IPC file per split, streamed record batch by record batch
// (memory stays at one batch whatever the size), then the manifest with checksums of every file, of
// its footer and of each record batch. Files appear under their final names only when complete, and
// the manifest, which is what makes a directory a dataset, is removed first and renamed in last.
// Image datasets without a feature type are written as they always were (format /2, column
// `image`), byte for byte; a feature type gives format /3 (column `features`, uint8 or float32).
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  AsyncRecordBatchFileReader,
  Field,
  Float32,
  FixedSizeList,
  Int32,
  makeData,
  RecordBatch,
  RecordBatchFileWriter,
  RecordBatchReader,
  Schema,
  Struct,
  Uint8,
} from 'apache-arrow';
import { writeAtomically } from '../base/atomic-write';
import { DatasetError } from './errors';
import {
  expectedSchema,
  featureColumn,
  imageManifestFormat,
  manifestFile,
  manifestFormat,
  sampleSize,
  splitNames,
  type FeatureType,
  type Manifest,
  type SplitEntry,
  type SplitMethod,
  type SplitName,
  type Standardization,
  type TextInfo,
} from './manifest';
import { crc64 } from '../base/checksum';
import { makeDirectory } from '../base/make-directory';

export interface SplitSource {
  rows: number;
  /** Fills samples [first, first + labels.length): features [n, ...sampleShape] and labels. */
  fill(first: number, features: Uint8Array | Float32Array, labels: Int32Array): void;
}

export interface DatasetInfo {
  name: string;
  /** where the samples came from, for people reading the manifest */
  source: string;
  /** [C, H, W] for images, [F] for feature vectors */
  sampleShape: number[];
  classNames: string[];
  /** format /3's feature type and divisor; absent: a format /2 image dataset (uint8 pixels / 255) */
  features?: { dtype: FeatureType; divisor: number };
  split?: SplitMethod;
  standardization?: Standardization;
  /** a text dataset's tokens, context and vocabulary (ft-data text) */
  text?: TextInfo;
}

/**
 * Makes, empty, the directory a dataset is written into before it is renamed to `out`:
 * `.OUT.partial-PID` beside it. A place where it cannot be made is named as `out`'s.
 */
export function makeStaging(out: string): string {
  const staging = path.join(path.dirname(out), `.${path.basename(out)}.partial-${process.pid}`);
  try {
    fs.rmSync(staging, { recursive: true, force: true });
    makeDirectory(staging);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new DatasetError(out, `cannot be written: making ${staging} failed (${reason})`);
  }
  return staging;
}

/** Progress lines go here (for example console.log); called about every two seconds. */
export type ProgressSink = (line: string) => void;

export async function writeDataset(
  dir: string,
  info: DatasetInfo,
  sources: Record<SplitName, SplitSource>,
  rowsPerBatch: number,
  progress: ProgressSink = () => {},
): Promise<Manifest> {
  if (!Number.isSafeInteger(rowsPerBatch) || rowsPerBatch < 1)
    throw new RangeError(`rows per batch: expected an integer >= 1, got ${rowsPerBatch}`);
  makeDirectory(dir);
  fs.rmSync(path.join(dir, manifestFile), { force: true });
  const splits = {} as Record<SplitName, SplitEntry>;
  for (const name of splitNames) {
    splits[name] = await writeSplit(path.join(dir, `${name}.arrow`), name, info, sources[name], rowsPerBatch, progress);
  }
  const format = formatOf(info);
  const { dtype, divisor } = info.features ?? { dtype: 'uint8', divisor: 255 };
  const manifest = {
    format,
    name: info.name,
    source: info.source,
    sample_shape: info.sampleShape,
    ...(info.features ? { dtype, divisor } : {}),
    classes: info.classNames.length,
    class_names: info.classNames,
    ...(info.split ? { split: info.split } : {}),
    ...(info.standardization ? { standardization: info.standardization } : {}),
    ...(info.text ? { text: info.text } : {}),
    schema: expectedSchema(format, info.sampleShape, dtype),
    splits,
  };
  writeAtomically(path.join(dir, manifestFile), JSON.stringify(manifest, null, 1) + '\n');
  return { ...manifest, dtype, divisor };
}

function formatOf(info: DatasetInfo): string {
  return info.features ? manifestFormat : imageManifestFormat;
}

async function writeSplit(
  file: string,
  name: SplitName,
  info: DatasetInfo,
  source: SplitSource,
  rowsPerBatch: number,
  progress: ProgressSink,
): Promise<SplitEntry> {
  const size = sampleSize(info.sampleShape);
  const float = info.features?.dtype === 'float32';
  const valueType = float ? new Float32() : new Uint8();
  const featureType: FixedSizeList = new FixedSizeList(size, new Field(info.features ? 'value' : 'pixel', valueType, false));
  const schema = new Schema([new Field(featureColumn(formatOf(info)), featureType, false), new Field('label', new Int32(), false)]);
  const classCounts = new Array<number>(info.classNames.length).fill(0);
  const partial = `${file}.partial`;
  const fd = fs.openSync(partial, 'w');
  try {
    const writer = new RecordBatchFileWriter();
    writer.reset(undefined, schema);
    const drained = (async () => {
      for await (const chunk of writer) fs.writeSync(fd, chunk);
    })();
    let lastReport = Date.now();
    for (let first = 0; first < source.rows; first += rowsPerBatch) {
      const rows = Math.min(rowsPerBatch, source.rows - first);
      const features = float ? new Float32Array(rows * size) : new Uint8Array(rows * size);
      const labels = new Int32Array(rows);
      source.fill(first, features, labels);
      for (const label of labels) {
        if (!(label >= 0 && label < classCounts.length)) throw new DatasetError(file, `label ${label} outside [0, ${classCounts.length})`);
        classCounts[label] += 1;
      }
      const values = float
        ? makeData({ type: new Float32(), length: features.length, data: features as Float32Array })
        : makeData({ type: new Uint8(), length: features.length, data: features as Uint8Array });
      const feature = makeData({ type: featureType, length: rows, nullCount: 0, child: values });
      const label = makeData({ type: new Int32(), length: rows, data: labels });
      writer.write(
        new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: rows, nullCount: 0, children: [feature, label] })),
      );
      await new Promise(setImmediate); // lets the drain loop write this batch before the next is built
      if (Date.now() - lastReport > 2000) {
        progress(`[${info.name}] ${name}: ${first + rows}/${source.rows} samples written`);
        lastReport = Date.now();
      }
    }
    writer.finish();
    writer.close();
    await drained;
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  const entry = await describeSplit(partial, path.basename(file), source.rows, rowsPerBatch, classCounts);
  fs.renameSync(partial, file);
  progress(
    `[${info.name}] ${name}: ${source.rows} samples, ${entry.record_batches.length} record batches, ${entry.bytes} bytes -> ${file}`,
  );
  return entry;
}

/** The manifest entry of a freshly written file: checksums of the file, its batches and its tail. */
async function describeSplit(file: string, name: string, rows: number, rowsPerBatch: number, classCounts: number[]): Promise<SplitEntry> {
  const handle = await fs.promises.open(file, 'r');
  try {
    const reader = await RecordBatchReader.from(handle);
    await reader.open();
    if (!(reader instanceof AsyncRecordBatchFileReader)) throw new Error(`${file}: apache-arrow did not write an IPC file`);
    const footer = reader.footer!;
    const bytes = (await handle.stat()).size;
    const read = async (start: number, end: number): Promise<Buffer> => {
      const buffer = Buffer.alloc(end - start);
      await handle.read(buffer, 0, buffer.length, start);
      return buffer;
    };
    const batches = [];
    let tailOffset = 0;
    for (let i = 0; i < footer.numRecordBatches; ++i) {
      const block = footer.getRecordBatch(i)!;
      const start = Number(block.offset);
      tailOffset = start + block.metaDataLength + Number(block.bodyLength);
      batches.push({ start, end: tailOffset });
    }
    const record_batches = [];
    for (let i = 0; i < batches.length; ++i) {
      const batchRows = Math.min(rowsPerBatch, rows - i * rowsPerBatch);
      record_batches.push({ rows: batchRows, crc64: crc64(await read(batches[i].start, batches[i].end)) });
    }
    return {
      file: name,
      rows,
      bytes,
      sha256: await hashFile(file),
      class_counts: classCounts,
      tail: { offset: tailOffset, crc64: crc64(await read(tailOffset, bytes)) },
      record_batches,
    };
  } finally {
    await handle.close();
  }
}

async function hashFile(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
