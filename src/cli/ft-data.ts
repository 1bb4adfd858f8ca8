// ft-data: converts the data people bring (CSV, image folders, Parquet, Hugging Face save_to_disk
// directories, UTF-8 text for language models) into ft-train dataset directories. Usage errors exit
// 2, bad input exits 1, each with one line on stderr; progress goes to stderr.
import type { Argv } from 'yargs';
import { maxTestFraction } from '../data/convert/stratify';
import { convertCsv, headerModes, type HeaderMode } from '../data/convert/csv';
import { convertHf } from '../data/convert/hf';
import { convertImages, parseImageShape } from '../data/convert/images';
import { convertParquet } from '../data/convert/parquet';
import { convertText, fortunesDir, TextDatasetRefusal, textOptionProblem } from '../data/convert/text';
import { textTokenKinds, type Manifest, type TextInfo } from '../data/manifest';
import { commandLine, runMain, UsageError } from './command';
import type { CommonOptions } from '../data/convert/build';

/** 100 rows per record batch: shards are whole record batches, so small datasets still shard. */
const defaultRowsPerBatch = 100;

function common(args: Argv): Argv<CommonOptions> {
  return args
    .option('out', { type: 'string', demandOption: true, describe: 'dataset directory to write (written atomically)' })
    .option('force', { type: 'boolean', default: false, describe: 'replace --out if it exists' })
    .option('name', { type: 'string', describe: "dataset name in the manifest (default: the input's base name)" })
    .option('test', {
      type: 'string',
      describe: 'a separate input of the same kind as the test split (default: none, --test-fraction draws it)',
    })
    .option('test-fraction', {
      type: 'number',
      default: 0.2,
      describe: `fraction of each class drawn into test, in (0, ${maxTestFraction}] (seeded, stratified)`,
    })
    .option('seed', { type: 'number', default: 0, describe: 'seed of the test draw' })
    .option('rows-per-batch', {
      type: 'number',
      default: defaultRowsPerBatch,
      describe: 'samples per Arrow record batch (shards are whole batches)',
    })
    .check((parsed) => {
      const a = parsed as unknown as CommonOptions;
      if (!(a.testFraction > 0 && a.testFraction <= maxTestFraction))
        throw new Error(`--test-fraction expects a number in (0, ${maxTestFraction}], got ${a.testFraction}`);
      if (!Number.isSafeInteger(a.seed) || a.seed < 0) throw new Error(`--seed expects an integer >= 0, got ${a.seed}`);
      if (!Number.isSafeInteger(a.rowsPerBatch) || a.rowsPerBatch < 1)
        throw new Error(`--rows-per-batch expects an integer >= 1, got ${a.rowsPerBatch}`);
      return true;
    }) as unknown as Argv<CommonOptions>;
}

/** The common options alone, out of a subcommand's parsed arguments. */
function commonOf(a: CommonOptions): CommonOptions {
  return {
    out: a.out,
    force: a.force,
    name: a.name,
    test: a.test,
    testFraction: a.testFraction,
    seed: a.seed,
    rowsPerBatch: a.rowsPerBatch,
  };
}

/** ft-data text's flags: its own, not the class-stratified converters' (its split is by position). */
function textOptions(args: Argv) {
  return args
    .option('out', { type: 'string', demandOption: true, describe: 'dataset directory to write (written atomically)' })
    .option('from', {
      type: 'string',
      array: true,
      default: [fortunesDir],
      describe: `UTF-8 text files or directories (their regular files but *.dat and *.u8, sorted), concatenated in order; repeatable. Default: Debian's fortunes. A line holding only '%' (a fortune separator) becomes an empty line`,
    })
    .option('tokens', {
      choices: textTokenKinds,
      default: 'char' as TextInfo['tokens'],
      describe: "char: the text's distinct code points, sorted (the vocabulary goes in the manifest); byte: UTF-8 bytes (256 tokens)",
    })
    .option('context', {
      type: 'number',
      default: 256,
      describe: 'T: each sample is T + 1 consecutive token ids (the label: the last), consecutive samples sharing one token',
    })
    .option('test-fraction', {
      type: 'number',
      default: 0.1,
      describe: 'the fraction of the tokens, at the end of the text, that make the test split, in (0, 1)',
    })
    .option('force', { type: 'boolean', default: false, describe: 'replace --out if it exists' })
    .option('name', { type: 'string', describe: "dataset name in the manifest (default: --out's base name)" })
    .option('rows-per-batch', {
      type: 'number',
      default: defaultRowsPerBatch,
      describe: 'samples per Arrow record batch (shards are whole batches)',
    })
    .check((a) => {
      const problem = textOptionProblem(a.context, a['test-fraction']);
      if (problem) throw new Error(problem);
      if (!Number.isSafeInteger(a['rows-per-batch']) || a['rows-per-batch'] < 1)
        throw new Error(`--rows-per-batch expects an integer >= 1, got ${a['rows-per-batch']}`);
      return true;
    });
}

function report(manifest: Manifest, out: string): void {
  const { train, test } = manifest.splits;
  console.error(
    `[ft-data] ${out}: ${train.rows} train + ${test.rows} test samples of shape [${manifest.sample_shape.join(', ')}] (${manifest.dtype}), ${manifest.classes} classes`,
  );
}

async function main(): Promise<void> {
  let work: Promise<void> | undefined;
  commandLine('ft-data', '$0 <command> INPUT --out DIR [options]\n\nConverts your data into an ft-train dataset directory.')
    .command(
      'csv FILE',
      "numeric columns and a label column (gzip read too); features standardized with the train split's statistics",
      (y) =>
        common(y)
          .positional('FILE', { type: 'string', describe: 'the CSV file (.csv or .csv.gz)' })
          .option('label', { type: 'string', default: 'last', describe: 'label column: a name, a 0-based index, or "last"' })
          .option('header', {
            choices: headerModes,
            default: 'auto' as HeaderMode,
            describe: 'first line: names, none, sklearn (n_samples,n_features,class names), or auto',
          }),
      (a) => {
        work = convertCsv(a.FILE as string, { ...commonOf(a), label: a.label, header: a.header as HeaderMode }).then((m) =>
          report(m, a.out),
        );
      },
    )
    .command(
      'images DIR',
      'one subfolder per class of PNG/JPEG images, resized to --shape; stored uint8, divided by 255 in training',
      (y) =>
        common(y)
          .positional('DIR', { type: 'string', describe: 'the folder of class folders' })
          .option('shape', { type: 'string', demandOption: true, coerce: parseImageShape, describe: 'CxHxW: C 1 (grayscale) or 3 (RGB)' }),
      (a) => {
        work = convertImages(a.DIR as string, { ...commonOf(a), shape: a.shape as unknown as [number, number, number] }).then((m) =>
          report(m, a.out),
        );
      },
    )
    .command(
      'parquet FILE',
      'numeric columns and a label column, read one row group at a time; features standardized as for csv',
      (y) =>
        common(y)
          .positional('FILE', { type: 'string', describe: 'the Parquet file' })
          .option('label', { type: 'string', demandOption: true, describe: 'label column name' }),
      (a) => {
        work = convertParquet(a.FILE as string, { ...commonOf(a), label: a.label }).then((m) => report(m, a.out));
      },
    )
    .command(
      'hf DIR',
      'a Hugging Face datasets save_to_disk directory: ClassLabel label, an Image column or numeric Value columns',
      (y) =>
        common(y)
          .positional('DIR', { type: 'string', describe: 'the directory (state.json, dataset_info.json, data-*.arrow)' })
          .option('label', { type: 'string', describe: 'label column (default: the ClassLabel feature)' })
          .option('shape', {
            type: 'string',
            coerce: parseImageShape,
            describe: "CxHxW for an Image column (default: the first image's size)",
          }),
      (a) => {
        work = convertHf(a.DIR as string, { ...commonOf(a), label: a.label, shape: a.shape as [number, number, number] | undefined }).then(
          (m) => report(m, a.out),
        );
      },
    )
    .command(
      'text',
      "UTF-8 text (default: Debian's fortunes) as windows of --context + 1 char or byte token ids, for language models",
      textOptions,
      (a) => {
        work = convertText({
          out: a.out,
          force: a.force,
          name: a.name,
          from: a.from,
          tokens: a.tokens,
          context: a.context,
          testFraction: a.testFraction,
          rowsPerBatch: a.rowsPerBatch,
          progress: (line) => console.error(`[ft-data] ${line}`),
        }).then(
          (m) => report(m, a.out),
          (error: unknown) => {
            // no dataset can come of these flags and this text: bad usage, as a flag out of range is
            throw error instanceof TextDatasetRefusal ? new UsageError(`ft-data: ${error.message}`) : error;
          },
        );
      },
    )
    .demandCommand(1, 'expected a command: csv, images, parquet, hf or text')
    .parseSync();
  await work;
}

runMain('ft-data', main);
