// Parquet -> dataset with hyparquet (pure JS), one row group at a time: numeric feature columns and
// one label column (integers or strings), stored float32 and standardized with the train split's
// statistics, exactly as the CSV converter stores the same table.
import * as fs from 'node:fs';
import { parquetMetadataAsync, parquetRead, parquetSchema, type AsyncBuffer } from 'hyparquet';
import { DatasetError } from '../errors';
import type { Manifest } from '../manifest';
import { buildDataset, splitMethod, type CommonOptions, type DatasetBuilder } from './build';
import { baseName } from './csv';
import { ConversionProgress } from './progress';

export interface ParquetOptions extends CommonOptions {
  /** the label column's name */
  label: string;
}

const numericTypes = new Set(['INT32', 'INT64', 'FLOAT', 'DOUBLE', 'BOOLEAN']);

/** Reads byte ranges of the file as hyparquet asks (the footer, then each row group's column chunks). */
function fileBuffer(file: string): AsyncBuffer {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (error) {
    throw new DatasetError(file, `cannot read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const byteLength = fs.fstatSync(fd).size;
  return {
    byteLength,
    slice(start: number, end = byteLength): ArrayBuffer {
      const bytes = new Uint8Array(end - start);
      fs.readSync(fd, bytes, 0, bytes.length, start);
      return bytes.buffer;
    },
  };
}

interface Table {
  file: string;
  buffer: AsyncBuffer;
  metadata: Awaited<ReturnType<typeof parquetMetadataAsync>>;
  columns: string[];
}

async function openTable(file: string, label: string): Promise<Table> {
  const buffer = fileBuffer(file);
  let metadata;
  try {
    metadata = await parquetMetadataAsync(buffer);
  } catch (error) {
    throw new DatasetError(file, `not a readable Parquet file (${(error as Error).message})`);
  }
  const fields = parquetSchema(metadata).children;
  const columns = fields.map((f) => f.element.name);
  if (columns.length < 2) throw new DatasetError(file, `one column ("${columns[0]}"): no features beside a label`);
  if (!columns.includes(label))
    throw new DatasetError(
      file,
      `no label column "${label}" (it has ${columns.length} columns: ${columns.slice(0, 8).join(', ')}${columns.length > 8 ? ', ...' : ''})`,
    );
  for (const field of fields) {
    if (field.element.name !== label && (field.children.length > 0 || !numericTypes.has(field.element.type ?? ''))) {
      throw new DatasetError(
        file,
        `column "${field.element.name}": ${field.element.type ?? 'a nested group'} is not numeric (features must be numbers)`,
      );
    }
  }
  return { file, buffer, metadata, columns };
}

/** Streams a table's rows into the builder, one row group at a time. */
async function feed(table: Table, label: string, builder: DatasetBuilder, split: 'train' | 'test' | undefined): Promise<void> {
  const labelAt = table.columns.indexOf(label);
  const values = new Float32Array(table.columns.length - 1);
  const total = Number(table.metadata.num_rows);
  const progress = new ConversionProgress(table.file, total, 'rows');
  try {
    let rowStart = 0;
    for (const group of table.metadata.row_groups) {
      const rowEnd = rowStart + Number(group.num_rows);
      let rows: unknown[][] = [];
      await parquetRead({ file: table.buffer, rowStart, rowEnd, onComplete: (data) => (rows = data as unknown[][]) });
      rows.forEach((row, r) => {
        let k = 0;
        for (let j = 0; j < row.length; ++j) {
          if (j === labelAt) continue;
          const cell = row[j];
          if (cell === null || cell === undefined)
            throw new DatasetError(table.file, `row ${rowStart + r}, column "${table.columns[j]}": missing value`);
          values[k++] = Number(cell);
        }
        const name = row[labelAt];
        if (name === null || name === undefined || name === '')
          throw new DatasetError(table.file, `row ${rowStart + r}, column "${label}": missing label`);
        builder.add(String(name), values, split);
      });
      rowStart = rowEnd;
      progress.update(rowStart);
    }
  } finally {
    progress.stop();
  }
}

export async function convertParquet(file: string, options: ParquetOptions): Promise<Manifest> {
  const table = await openTable(file, options.label);
  const testTable = options.test !== undefined ? await openTable(options.test, options.label) : undefined;
  if (testTable && testTable.columns.join(',') !== table.columns.join(',')) {
    throw new DatasetError(
      options.test!,
      `its columns (${testTable.columns.join(', ')}) differ from ${file}'s (${table.columns.join(', ')})`,
    );
  }
  const columns = table.columns.filter((name) => name !== options.label);
  return buildDataset(
    {
      out: options.out,
      force: options.force,
      name: options.name ?? baseName(file),
      source: `ft-data parquet ${[file, ...(options.test !== undefined ? [options.test] : [])].join(' + ')}`,
      sampleShape: [columns.length],
      dtype: 'float32',
      divisor: 1,
      standardize: columns,
      split: splitMethod(options),
      labelOrigin: `${file}: label column "${options.label}"`,
      rowsPerBatch: options.rowsPerBatch,
      progress: (line) => console.error(`[ft-data] ${line}`),
    },
    async (builder) => {
      await feed(table, options.label, builder, testTable ? 'train' : undefined);
      if (testTable) await feed(testTable, options.label, builder, 'test');
    },
  );
}
