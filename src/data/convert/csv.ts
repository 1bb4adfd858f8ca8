// CSV (optionally gzip'd) -> dataset: numeric feature columns and one label column (integers or
// names), streamed once; features stored float32, standardized with the train split's statistics.
// Header lines: `names` (column names), `none` (data from the first line; columns feature_0...),
// `sklearn` (scikit-learn's bundled CSVs: "n_samples,n_features,class names...", labels are class
// indices), or `auto`: sklearn when the first line starts with two integers, the second of them one
// less than the columns of the next line; none when the first line is all numbers; names otherwise.
import { parse } from 'csv-parse';
import * as fs from 'node:fs';
import * as readline from 'node:readline';
import type { Readable } from 'node:stream';
import * as zlib from 'node:zlib';
import { DatasetError } from '../errors';
import type { Manifest } from '../manifest';
import { buildDataset, splitMethod, type CommonOptions, type DatasetBuilder } from './build';
import { ConversionProgress } from './progress';

export const headerModes = ['auto', 'names', 'none', 'sklearn'] as const;
export type HeaderMode = (typeof headerModes)[number];

export interface CsvOptions extends CommonOptions {
  /** a column name, a 0-based column index, or "last" */
  label: string;
  header: HeaderMode;
}

/** What a CSV file's first lines say about its columns. */
interface CsvLayout {
  /** lines before the data */
  headerLines: number;
  columns: string[];
  /** sklearn: the class names that label indices stand for, and the row count the header states */
  classNames?: string[];
  rows?: number;
}

const isNumber = (cell: string): boolean => cell.trim() !== '' && Number.isFinite(Number(cell));

/** The file's text (gunzipped if it is gzip), and its raw stream (to count bytes read). */
function open(file: string): { raw: fs.ReadStream; text: Readable } {
  let magic = Buffer.alloc(2);
  try {
    const fd = fs.openSync(file, 'r');
    magic = magic.subarray(0, fs.readSync(fd, magic, 0, 2, 0));
    fs.closeSync(fd);
  } catch (error) {
    throw new DatasetError(file, `cannot read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const raw = fs.createReadStream(file);
  return { raw, text: magic[0] === 0x1f && magic[1] === 0x8b ? raw.pipe(zlib.createGunzip()) : raw };
}

async function firstLines(file: string, count: number): Promise<string[][]> {
  const lines: string[][] = [];
  const { raw, text } = open(file);
  for await (const line of readline.createInterface({ input: text, crlfDelay: Infinity })) {
    lines.push(line.split(',').map((cell) => cell.trim().replace(/^"(.*)"$/, '$1')));
    if (lines.length === count) break;
  }
  raw.destroy();
  return lines;
}

async function layoutOf(file: string, mode: HeaderMode): Promise<CsvLayout> {
  const [first, second] = await firstLines(file, 2);
  if (!first) throw new DatasetError(file, 'empty: no lines');
  const sklearnLike =
    second !== undefined && /^\d+$/.test(first[0]) && /^\d+$/.test(first[1] ?? '') && Number(first[1]) + 1 === second.length;
  const chosen = mode !== 'auto' ? mode : sklearnLike ? 'sklearn' : first.every(isNumber) ? 'none' : 'names';
  const numbered = (n: number) => Array.from({ length: n }, (_, j) => `feature_${j}`);
  switch (chosen) {
    case 'names':
      return { headerLines: 1, columns: first };
    case 'none':
      return { headerLines: 0, columns: numbered(first.length) };
    case 'sklearn': {
      if (!sklearnLike)
        throw new DatasetError(file, 'line 1: not a scikit-learn header "n_samples,n_features,class names..." matching line 2');
      const features = Number(first[1]);
      return { headerLines: 1, columns: [...numbered(features), 'target'], classNames: first.slice(2), rows: Number(first[0]) };
    }
  }
}

function labelIndex(file: string, layout: CsvLayout, label: string): number {
  // one column, the label alone: no features to learn from (a file separated by something other than commas?)
  if (layout.columns.length < 2)
    throw new DatasetError(
      file,
      `one column (${JSON.stringify(layout.columns[0]?.slice(0, 40))}): no features beside a label (columns are separated by commas)`,
    );
  if (label === 'last') return layout.columns.length - 1;
  const named = layout.columns.indexOf(label);
  if (named >= 0) return named;
  if (/^\d+$/.test(label) && Number(label) < layout.columns.length) return Number(label);
  throw new DatasetError(
    file,
    `no label column "${label}" (it has ${layout.columns.length} columns: ${layout.columns.slice(0, 8).join(', ')}${layout.columns.length > 8 ? ', ...' : ''}; or give a 0-based index, or "last")`,
  );
}

/** Streams the data rows of one CSV file into the builder (all into `split` when given). */
async function feed(
  file: string,
  layout: CsvLayout,
  labelAt: number,
  builder: DatasetBuilder,
  split: 'train' | 'test' | undefined,
  progress: ConversionProgress,
): Promise<void> {
  const width = layout.columns.length;
  const values = new Float32Array(width - 1);
  const { raw, text } = open(file);
  let bytes = 0;
  raw.on('data', (chunk) => (bytes += chunk.length));
  let row = 0;
  const parser = text.pipe(parse({ from_line: layout.headerLines + 1, relax_column_count: true, skip_empty_lines: true, trim: true }));
  for await (const record of parser as AsyncIterable<string[]>) {
    row += 1;
    const line = row + layout.headerLines;
    if (record.length !== width) throw new DatasetError(file, `line ${line}: ${record.length} cells, expected ${width} (a ragged row)`);
    let k = 0;
    for (let j = 0; j < width; ++j) {
      if (j === labelAt) continue;
      const cell = record[j];
      if (!isNumber(cell))
        throw new DatasetError(file, `line ${line}, column ${JSON.stringify(layout.columns[j])}: ${JSON.stringify(cell)} is not a number`);
      values[k++] = Number(cell);
    }
    let label = record[labelAt];
    if (layout.classNames) {
      const index = Number(label);
      if (!(Number.isSafeInteger(index) && index >= 0 && index < layout.classNames.length)) {
        throw new DatasetError(
          file,
          `line ${line}, column ${JSON.stringify(layout.columns[labelAt])}: ${JSON.stringify(label)} is not a class index below ${layout.classNames.length}`,
        );
      }
      label = layout.classNames[index];
    } else if (label === '') {
      throw new DatasetError(file, `line ${line}, column ${JSON.stringify(layout.columns[labelAt])}: an empty label`);
    }
    builder.add(label, values, split);
    if ((row & 1023) === 0) progress.update(bytes);
  }
  if (layout.rows !== undefined && layout.rows !== row)
    throw new DatasetError(file, `${row} data rows, but its header says ${layout.rows}`);
  if (row === 0) throw new DatasetError(file, 'no data rows');
}

export async function convertCsv(file: string, options: CsvOptions): Promise<Manifest> {
  const layout = await layoutOf(file, options.header);
  const labelAt = labelIndex(file, layout, options.label);
  const testLayout = options.test !== undefined ? await layoutOf(options.test, options.header) : undefined;
  if (testLayout && testLayout.columns.join(',') !== layout.columns.join(',')) {
    throw new DatasetError(
      options.test!,
      `its columns (${testLayout.columns.join(', ')}) differ from ${file}'s (${layout.columns.join(', ')})`,
    );
  }
  const columns = layout.columns.filter((_, j) => j !== labelAt);
  const inputs = [file, ...(options.test !== undefined ? [options.test] : [])];
  return buildDataset(
    {
      out: options.out,
      force: options.force,
      name: options.name ?? baseName(file),
      source: `ft-data csv ${inputs.join(' + ')}`,
      sampleShape: [columns.length],
      dtype: 'float32',
      divisor: 1,
      standardize: columns,
      split: splitMethod(options),
      classNames: layout.classNames,
      labelOrigin: `${file}: label column ${JSON.stringify(layout.columns[labelAt])}`,
      rowsPerBatch: options.rowsPerBatch,
      progress: (line) => console.error(`[ft-data] ${line}`),
    },
    async (builder) => {
      for (const [input, split, inputLayout] of [
        [file, options.test !== undefined ? 'train' : undefined, layout],
        [options.test, 'test', testLayout],
      ] as const) {
        if (input === undefined) continue;
        const progress = new ConversionProgress(input, fs.statSync(input).size, 'bytes');
        try {
          await feed(input, inputLayout!, labelAt, builder, split, progress);
        } finally {
          progress.stop();
        }
      }
    },
  );
}

/** "data/iris.csv.gz" -> "iris" */
export function baseName(file: string): string {
  return (
    file
      .replace(/\/+$/, '')
      .split('/')
      .pop()!
      .replace(/(\.(csv|parquet))?(\.gz)?$/, '') || 'dataset'
  );
}
