// Text -> dataset for GPT-style language models (ft-data text): UTF-8 files (by default the fortune
// files of Debian's `fortunes` package) concatenated, tokenised as code points or bytes
// (text-tokens.ts), cut by position into train (the first 1 - F of the tokens) and test (the rest),
// and each split cut into windows of context + 1 token ids that overlap by one token: a model reads
// a window's first T tokens and predicts each next one, so every token is predicted once. The label
// is the window's last token id. Written under a temporary directory next to --out, then renamed.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncPath } from '../../base/atomic-write';
import { DatasetError } from '../errors';
import { splitNames, type Manifest, type SplitName, type TextInfo } from '../manifest';
import { charVocabularyOf, encodeTextIds, vocabularySize } from '../text-tokens';
import { makeStaging, writeDataset, type ProgressSink, type SplitSource } from '../writer';
import { ConversionProgress } from './progress';

/** Debian's `fortunes` package: ~2.6 MB of English quotations, jokes and poems (the default text). */
export const fortunesDir = '/usr/share/games/fortunes';

export interface TextOptions {
  out: string;
  /** replace `out` if it exists */
  force: boolean;
  /** default: out's base name */
  name?: string;
  /** files, or directories of them; default: fortunesDir */
  from?: string[];
  tokens: TextInfo['tokens'];
  /** T: a model reads T tokens and predicts the next one at each */
  context: number;
  /** the fraction of the tokens, at the end, that make the test split */
  testFraction: number;
  rowsPerBatch: number;
  /** the writer's lines (ft-data prefixes them) */
  progress?: ProgressSink;
}

/** Options or text that give no dataset: ft-data answers it as bad usage (exit 2); nothing is written. */
export class TextDatasetRefusal extends Error {
  override name = 'TextDatasetRefusal';
}

/** What is wrong with a context and test fraction, in ft-data's words, or undefined. */
export function textOptionProblem(context: number, testFraction: number): string | undefined {
  if (!(Number.isSafeInteger(context) && context >= 1)) return `--context expects an integer >= 1, got ${context}`;
  if (!(testFraction > 0 && testFraction < 1)) return `--test-fraction expects a number in (0, 1), got ${testFraction}`;
  return undefined;
}

/** Fortune files' metadata beside each text: strfile's index (.dat) and the UTF-8 link (.u8) to the same text. */
const notText = /\.(dat|u8)$/;

/** The text files `paths` name: files as given, directories' regular files (less *.dat, *.u8) sorted by name. */
export function textFiles(paths: readonly string[]): string[] {
  const stat = (file: string): fs.Stats => {
    try {
      return fs.statSync(file);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (file === fortunesDir && code === 'ENOENT') throw new DatasetError(file, "missing: install Debian's fortunes (launch/setup does)");
      throw new DatasetError(file, `cannot read (${code ?? (error as Error).message})`);
    }
  };
  return paths.flatMap((given) => {
    if (!stat(given).isDirectory()) return [given];
    return fs
      .readdirSync(given)
      .filter((name) => !notText.test(name))
      .sort()
      .map((name) => path.join(given, name))
      .filter((file) => stat(file).isFile());
  });
}

/** The offset of the first byte that does not start or continue a valid UTF-8 sequence, or -1. */
export function invalidUtf8Offset(bytes: Uint8Array): number {
  const continuation = (at: number, low = 0x80, high = 0xbf): boolean => at < bytes.length && bytes[at] >= low && bytes[at] <= high;
  for (let i = 0; i < bytes.length;) {
    const lead = bytes[i];
    let length = 0;
    if (lead < 0x80) length = 1;
    else if (lead >= 0xc2 && lead <= 0xdf) length = continuation(i + 1) ? 2 : 0;
    // the second byte's range rules out overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF (F4)
    else if (lead >= 0xe0 && lead <= 0xef) {
      const [low, high] = lead === 0xe0 ? [0xa0, 0xbf] : lead === 0xed ? [0x80, 0x9f] : [0x80, 0xbf];
      length = continuation(i + 1, low, high) && continuation(i + 2) ? 3 : 0;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      const [low, high] = lead === 0xf0 ? [0x90, 0xbf] : lead === 0xf4 ? [0x80, 0x8f] : [0x80, 0xbf];
      length = continuation(i + 1, low, high) && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
    }
    if (length === 0) return i;
    i += length;
  }
  return -1;
}

/** A file's text: UTF-8 (an invalid sequence is an error naming the file and byte offset), a leading BOM dropped. */
export function readUtf8(file: string): string {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (error) {
    throw new DatasetError(file, `cannot read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const bad = invalidUtf8Offset(bytes);
  if (bad >= 0) {
    const shown = [...bytes.subarray(bad, bad + 4)].map((b) => `0x${b.toString(16).padStart(2, '0')}`).join(' ');
    throw new DatasetError(file, `not UTF-8 text: an invalid byte sequence at byte offset ${bad} (${shown})`);
  }
  return new TextDecoder('utf-8').decode(bytes);
}

/**
 * A file's text as the dataset holds it: each fortune separator (a line holding only '%') made an
 * empty line, and a final newline added if missing, so that the next file starts on a line of its own.
 */
export function datasetText(text: string): string {
  const separated = text.replace(/(^|\n)%(?=\r?\n|$)/g, '$1');
  return separated === '' || separated.endsWith('\n') ? separated : `${separated}\n`;
}

/** Complete windows of context + 1 tokens, consecutive ones sharing one token, in `tokens` tokens. */
export function windowCount(tokens: number, context: number): number {
  return tokens > context ? Math.floor((tokens - 1) / context) : 0;
}

export async function convertText(options: TextOptions): Promise<Manifest> {
  const { out, context, testFraction } = options;
  const problem = textOptionProblem(context, testFraction);
  if (problem) throw new TextDatasetRefusal(problem);
  if (fs.existsSync(out) && !options.force) throw new DatasetError(out, 'already exists (--force replaces it)');
  const from = options.from && options.from.length > 0 ? options.from : [fortunesDir];
  const files = textFiles(from);

  const sizes = files.map((file) => fs.statSync(file).size);
  const reading = new ConversionProgress(
    `reading ${files.length} text file${files.length === 1 ? '' : 's'}`,
    sizes.reduce((a, b) => a + b, 0),
    'bytes',
  );
  const parts: string[] = [];
  try {
    let done = 0;
    files.forEach((file, i) => {
      parts.push(datasetText(readUtf8(file)));
      reading.update((done += sizes[i]));
    });
  } finally {
    reading.stop();
  }
  const text = parts.join('');
  if (text === '') throw new TextDatasetRefusal(`${from.join(', ')}: no text (${files.length === 0 ? 'no text files' : 'empty files'})`);

  const info: TextInfo = { tokens: options.tokens, context, ...(options.tokens === 'char' ? { vocab: charVocabularyOf(text) } : {}) };
  const ids = encodeTextIds(info, text, 'the text');
  const trainTokens = Math.round((1 - testFraction) * ids.length);
  const splitTokens: Record<SplitName, Uint32Array> = { train: ids.subarray(0, trainTokens), test: ids.subarray(trainTokens) };
  for (const name of splitNames) {
    const tokens = splitTokens[name].length;
    if (windowCount(tokens, context) === 0) {
      const remedy = name === 'test' ? 'raise --test-fraction or lower --context' : 'lower --context or --test-fraction';
      throw new TextDatasetRefusal(
        `the ${name} split has ${tokens} of the text's ${ids.length} tokens, too few for one window of ${context + 1} (--context ${context} + 1): ${remedy}`,
      );
    }
  }

  const classes = vocabularySize(info);
  const sources = Object.fromEntries(splitNames.map((name) => [name, windows(splitTokens[name], context)])) as Record<
    SplitName,
    SplitSource
  >;
  const temp = makeStaging(out);
  try {
    const manifest = await writeDataset(
      temp,
      {
        name: options.name ?? path.basename(path.resolve(out)),
        source: `ft-data text --tokens ${options.tokens} --context ${context} --test-fraction ${testFraction} of ${describeFiles(files)}`,
        sampleShape: [context + 1],
        classNames: info.vocab ?? Array.from({ length: classes }, (_, byte) => `0x${byte.toString(16).padStart(2, '0')}`),
        // exact ids in the trainer's floats (divisor 1); uint8 while they fit, float32 holds any code point's id exactly
        features: { dtype: classes <= 256 ? 'uint8' : 'float32', divisor: 1 },
        split: { method: 'position', test_fraction: testFraction },
        text: info,
      },
      sources,
      options.rowsPerBatch,
      options.progress,
    );
    if (options.force) fs.rmSync(out, { recursive: true, force: true });
    fs.renameSync(temp, out);
    syncPath(path.dirname(out));
    return manifest;
  } catch (error) {
    fs.rmSync(temp, { recursive: true, force: true });
    throw error;
  }
}

/** "DIR: a, b; DIR2: c (3 files)": the files in order, each run of one directory's under its name. */
function describeFiles(files: string[]): string {
  const runs: { dir: string; names: string[] }[] = [];
  for (const file of files) {
    const dir = path.dirname(file);
    if (runs.at(-1)?.dir !== dir) runs.push({ dir, names: [] });
    runs.at(-1)!.names.push(path.basename(file));
  }
  return `${runs.map(({ dir, names }) => `${dir}: ${names.join(', ')}`).join('; ')} (${files.length} file${files.length === 1 ? '' : 's'})`;
}

/** Sample i of a split: its tokens [i*T, i*T + T + 1), labelled with the last of them. */
function windows(tokens: Uint32Array, context: number): SplitSource {
  const width = context + 1;
  return {
    rows: windowCount(tokens.length, context),
    fill(first, features, labels) {
      for (let row = 0; row < labels.length; ++row) {
        const start = (first + row) * context;
        features.set(tokens.subarray(start, start + width), row * width);
        labels[row] = tokens[start + context];
      }
    },
  };
}
