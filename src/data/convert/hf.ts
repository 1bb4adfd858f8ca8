// Hugging Face `datasets` save_to_disk directory -> dataset: `state.json` lists the data files
// (`data-0000K-of-0000N.arrow`, Arrow IPC streams, read one record batch at a time) and
// `dataset_info.json` the features. The label is the ClassLabel column (its names are the classes)
// or --label; an Image column ({bytes, path} structs of encoded PNG/JPEG) is decoded as the images
// converter does (uint8 / 255, --shape defaulting to the first image's size); otherwise every
// numeric Value column is a feature, stored float32 and standardized as the CSV converter does.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { RecordBatchReader, type RecordBatch } from 'apache-arrow';
import sharp from 'sharp';
import { DatasetError } from '../errors';
import type { Manifest } from '../manifest';
import { buildDataset, splitMethod, type CommonOptions, type DatasetBuilder } from './build';
import { decodeImage } from './images';
import { ConversionProgress } from './progress';

export interface HfOptions extends CommonOptions {
  /** the label column, when not the ClassLabel one */
  label?: string;
  /** [C, H, W] for an image dataset; default: the first image's size (C 1 for grayscale, 3 otherwise) */
  shape?: [number, number, number];
}

interface Feature {
  _type: string;
  dtype?: string;
  names?: string[];
}

interface HfSplit {
  dir: string;
  files: string[];
  features: Record<string, Feature>;
  rows: number;
}

const numericDtypes = new Set([
  'bool',
  'int8',
  'int16',
  'int32',
  'int64',
  'uint8',
  'uint16',
  'uint32',
  'uint64',
  'float16',
  'float32',
  'float64',
]);

function readJson(file: string): Record<string, unknown> {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new DatasetError(
      file,
      code === 'ENOENT' ? 'missing: not a datasets save_to_disk directory' : `not readable JSON (${code ?? (error as Error).message})`,
    );
  }
}

function openSplit(dir: string): HfSplit {
  const state = readJson(path.join(dir, 'state.json'));
  const info = readJson(path.join(dir, 'dataset_info.json'));
  const dataFiles = state._data_files;
  if (!Array.isArray(dataFiles) || dataFiles.length === 0)
    throw new DatasetError(path.join(dir, 'state.json'), '_data_files: expected a list of {filename}');
  const files = dataFiles.map((entry: { filename?: unknown }) => {
    if (typeof entry?.filename !== 'string' || entry.filename.includes('/'))
      throw new DatasetError(path.join(dir, 'state.json'), `_data_files: bad entry ${JSON.stringify(entry)}`);
    return path.join(dir, entry.filename);
  });
  const features = info.features;
  if (typeof features !== 'object' || features === null)
    throw new DatasetError(path.join(dir, 'dataset_info.json'), 'features: expected an object');
  const rows = Object.values((info.splits ?? {}) as Record<string, { num_examples?: number }>).reduce(
    (n, s) => n + (s.num_examples ?? 0),
    0,
  );
  return { dir, files, features: features as Record<string, Feature>, rows };
}

async function* batches(file: string): AsyncGenerator<RecordBatch> {
  let reader;
  try {
    reader = await RecordBatchReader.from(fs.createReadStream(file));
  } catch (error) {
    throw new DatasetError(file, `not a readable Arrow stream (${(error as Error).message})`);
  }
  yield* reader;
}

/** Which columns are the label, the image, and the numeric features. */
function columnsOf(split: HfSplit, label?: string): { label: string; names?: string[]; image?: string; numeric: string[] } {
  const where = path.join(split.dir, 'dataset_info.json');
  const entries = Object.entries(split.features);
  const labelName = label ?? entries.find(([, f]) => f._type === 'ClassLabel')?.[0];
  if (labelName === undefined) throw new DatasetError(where, 'no ClassLabel feature: give --label COLUMN');
  const labelFeature = split.features[labelName];
  if (!labelFeature) throw new DatasetError(where, `no label column "${labelName}" (it has ${entries.map(([n]) => n).join(', ')})`);
  const image = entries.find(([name, f]) => name !== labelName && f._type === 'Image')?.[0];
  const numeric = image
    ? []
    : entries
        .filter(([name]) => name !== labelName)
        .map(([name, f]) => {
          if (f._type !== 'Value' || !numericDtypes.has(f.dtype ?? ''))
            throw new DatasetError(where, `column "${name}": ${f._type}${f.dtype ? ` ${f.dtype}` : ''} is neither numeric nor an Image`);
          return name;
        });
  return { label: labelName, names: labelFeature._type === 'ClassLabel' ? labelFeature.names : undefined, image, numeric };
}

/** The size of the first image of the split: [C, H, W]. */
async function firstImageShape(split: HfSplit, image: string): Promise<[number, number, number]> {
  for (const file of split.files) {
    for await (const batch of batches(file)) {
      if (batch.numRows === 0) continue;
      const bytes = batch.getChild(image)!.get(0)?.bytes as Uint8Array | undefined;
      if (!bytes) throw new DatasetError(file, `row 0, column "${image}": no image bytes`);
      const meta = await sharp(bytes)
        .metadata()
        .catch((error: Error) => {
          throw new DatasetError(file, `row 0, column "${image}": not a readable PNG or JPEG image (${error.message})`);
        });
      return [meta.channels !== undefined && meta.channels <= 2 ? 1 : 3, meta.height!, meta.width!];
    }
  }
  throw new DatasetError(split.dir, 'no rows');
}

async function feed(
  split: HfSplit,
  columns: ReturnType<typeof columnsOf>,
  shape: number[],
  builder: DatasetBuilder,
  into: 'train' | 'test' | undefined,
): Promise<void> {
  const progress = new ConversionProgress(split.dir, split.rows, 'rows');
  const values = columns.image ? new Uint8Array(shape.reduce((a, b) => a * b, 1)) : new Float32Array(columns.numeric.length);
  let done = 0;
  try {
    for (const file of split.files) {
      let row = 0;
      for await (const batch of batches(file)) {
        const labels = batch.getChild(columns.label);
        const image = columns.image !== undefined ? batch.getChild(columns.image) : null;
        const numeric = columns.numeric.map((name) => batch.getChild(name));
        if (!labels || (columns.image && !image) || numeric.some((c) => !c))
          throw new DatasetError(file, `its columns (${batch.schema.fields.map((f) => f.name).join(', ')}) are not dataset_info.json's`);
        for (let i = 0; i < batch.numRows; ++i, ++row) {
          const where = (column: string) => `${file}: row ${row}, column "${column}"`;
          const raw = labels.get(i);
          if (raw === null || raw === undefined) throw new DatasetError(where(columns.label), 'missing label');
          const label = columns.names ? columns.names[Number(raw)] : String(raw);
          if (label === undefined)
            throw new DatasetError(where(columns.label), `class index ${raw} outside its ${columns.names!.length} names`);
          if (image) {
            const bytes = image.get(i)?.bytes as Uint8Array | undefined;
            if (!bytes) throw new DatasetError(where(columns.image!), 'no image bytes');
            await decodeImage(Buffer.from(bytes), shape as [number, number, number], where(columns.image!), values as Uint8Array);
          } else {
            numeric.forEach((column, j) => (values[j] = Number(column!.get(i))));
          }
          builder.add(label, values, into);
          progress.update(++done);
        }
      }
    }
  } finally {
    progress.stop();
  }
}

export async function convertHf(dir: string, options: HfOptions): Promise<Manifest> {
  const split = openSplit(dir);
  const testSplit = options.test !== undefined ? openSplit(options.test) : undefined;
  const columns = columnsOf(split, options.label);
  const shape = columns.image ? (options.shape ?? (await firstImageShape(split, columns.image))) : [columns.numeric.length];
  return buildDataset(
    {
      out: options.out,
      force: options.force,
      name: options.name ?? path.basename(path.resolve(dir)),
      source: `ft-data hf ${[dir, ...(options.test !== undefined ? [options.test] : [])].join(' + ')}`,
      sampleShape: shape,
      dtype: columns.image ? 'uint8' : 'float32',
      divisor: columns.image ? 255 : 1,
      standardize: columns.image ? undefined : columns.numeric,
      split: splitMethod(options),
      classNames: columns.names,
      labelOrigin: `${path.join(dir, 'dataset_info.json')}: label column "${columns.label}"`,
      rowsPerBatch: options.rowsPerBatch,
      progress: (line) => console.error(`[ft-data] ${line}`),
    },
    async (builder) => {
      await feed(split, columns, shape, builder, testSplit ? 'train' : undefined);
      if (testSplit) await feed(testSplit, columnsOf(testSplit, columns.label), shape, builder, 'test');
    },
  );
}
