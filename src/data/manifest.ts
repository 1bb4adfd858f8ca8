// The manifest of a dataset directory (manifest.json): what the Arrow files hold (schema, sample
// shape, feature type, classes, counts), the sha256 of every file, and a CRC-64 of each file's footer
// and of each record batch, so a rank that reads only its shards still verifies every byte it uses.
// Format /3 holds any fixed-size feature vector (`features`: uint8 or float32, divided by `divisor`
// when batched); format /2, the image datasets written before it, is read as uint8 images / 255.
// A text dataset (ft-data text) is format /3 with a `text` field: its tokens, context and vocabulary.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DatasetError } from './errors';

export const manifestFormat = 'ft-train-dataset/3';
/** Image datasets (column `image`, uint8 pixels / 255); the default datasets are still written so. */
export const imageManifestFormat = 'ft-train-dataset/2';
export const featureTypes = ['uint8', 'float32'] as const;
export type FeatureType = (typeof featureTypes)[number];
export const manifestFile = 'manifest.json';
export const splitNames = ['train', 'test'] as const;
export type SplitName = (typeof splitNames)[number];

export interface RecordBatchEntry {
  rows: number;
  /** CRC-64 of the batch's IPC block (metadata + body) as the footer locates it */
  crc64: string;
}

export interface SplitEntry {
  file: string;
  rows: number;
  bytes: number;
  sha256: string;
  /** samples per class, index = label */
  class_counts: number[];
  /** everything after the last record batch: end-of-stream marker, footer, magic */
  tail: { offset: number; crc64: string };
  record_batches: RecordBatchEntry[];
}

/**
 * How the test split was made: read from its own file, drawn from the input (class-stratified), or
 * cut by position (text: the last test_fraction of the tokens).
 */
export interface SplitMethod {
  method: 'given' | 'stratified' | 'position';
  /** stratified: the fraction of each class drawn into test; position: the fraction of the input at its end */
  test_fraction?: number;
  seed?: number;
}

/** Per-feature statistics of the train split; stored features are (raw - mean) / std. */
export interface Standardization {
  columns: string[];
  mean: number[];
  std: number[];
}

/** Token kinds of text datasets: Unicode code points, or the bytes of the UTF-8 text. */
export const textTokenKinds = ['char', 'byte'] as const;

/**
 * What a text dataset's samples are: windows of `context` + 1 token ids (the last one also the
 * label). `vocab` (char only) holds each token's one-code-point string, in id order (sorted by code
 * point); byte tokens are the 256 byte values.
 */
export interface TextInfo {
  tokens: 'char' | 'byte';
  context: number;
  vocab?: string[];
}

export interface Manifest {
  format: string;
  name: string;
  source: string;
  /** per-sample shape: [F] for feature vectors, [C, H, W] for images */
  sample_shape: number[];
  /** how each stored value is held (format /2: always uint8) */
  dtype: FeatureType;
  /** what gatherBatch divides each stored value by: 255 for pixels, 1 for float features (format /2: 255) */
  divisor: number;
  classes: number;
  class_names: string[];
  split?: SplitMethod;
  standardization?: Standardization;
  /** text datasets only (ft-data text): tokens, context, vocabulary */
  text?: TextInfo;
  /** Arrow field name -> Arrow type, as the files must hold them */
  schema: Record<string, string>;
  splits: Record<SplitName, SplitEntry>;
}

/** Values per sample. */
export function sampleSize(sampleShape: readonly number[]): number {
  return sampleShape.reduce((a, b) => a * b, 1);
}

/** The feature column's name in a manifest format's files. */
export function featureColumn(format: string): string {
  return format === imageManifestFormat ? 'image' : 'features';
}

/** The Arrow schema every split file holds, as field -> type text (apache-arrow's spelling). */
export function expectedSchema(format: string, sampleShape: readonly number[], dtype: FeatureType): Record<string, string> {
  const type = dtype === 'uint8' ? 'Uint8' : 'Float32';
  return { [featureColumn(format)]: `FixedSizeList[${sampleSize(sampleShape)}]<${type}>`, label: 'Int32' };
}

const sha256Text = /^[0-9a-f]{64}$/;
const crc64Text = /^[0-9a-f]{16}$/;

/** Reads and validates `dir/manifest.json`; every problem is one DatasetError line. */
export function readManifest(dir: string): Manifest {
  if (!fs.existsSync(dir)) throw new DatasetError(dir, 'no such dataset directory');
  if (!fs.statSync(dir).isDirectory()) throw new DatasetError(dir, 'not a directory');
  const file = path.join(dir, manifestFile);
  if (!fs.existsSync(file)) {
    throw new DatasetError(file, 'missing: not a dataset directory (or its conversion did not finish)');
  }
  let json: unknown;
  try {
    json = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (error) {
    throw new DatasetError(file, `not valid JSON (${(error as Error).message})`);
  }
  return validate(file, json);
}

function validate(file: string, json: unknown): Manifest {
  const fail = (field: string, what: string, got: unknown): never => {
    throw new DatasetError(file, `${field}: expected ${what}, got ${JSON.stringify(got) ?? 'nothing'}`);
  };
  const object = (value: unknown, field: string): Record<string, unknown> =>
    typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : fail(field, 'an object', value);
  const count = (value: unknown, field: string, min = 0): number =>
    Number.isSafeInteger(value) && (value as number) >= min ? (value as number) : fail(field, `an integer >= ${min}`, value);
  const text = (value: unknown, field: string, pattern?: RegExp): string =>
    typeof value === 'string' && (!pattern || pattern.test(value))
      ? value
      : fail(field, pattern ? `text matching ${pattern}` : 'text', value);
  const list = (value: unknown, field: string): unknown[] => (Array.isArray(value) ? value : fail(field, 'a list', value));

  const numbers = (value: unknown, field: string, length: number): void => {
    const values = list(value, field);
    if (values.length !== length || !values.every((v) => typeof v === 'number' && Number.isFinite(v)))
      fail(field, `${length} finite numbers`, value);
  };

  const top = object(json, 'manifest');
  const format = top.format;
  if (format === imageManifestFormat) {
    const shape = list(top.sample_shape, 'sample_shape');
    if (shape.length !== 3) fail('sample_shape', '[C, H, W]', shape);
    top.dtype = 'uint8';
    top.divisor = 255;
  } else if (format !== manifestFormat) {
    fail('format', `"${manifestFormat}" (or "${imageManifestFormat}")`, format);
  }
  const shape = list(top.sample_shape, 'sample_shape');
  if (shape.length === 0) fail('sample_shape', 'a non-empty list', shape);
  shape.forEach((d, i) => count(d, `sample_shape[${i}]`, 1));
  if (!featureTypes.includes(top.dtype as FeatureType)) fail('dtype', featureTypes.map((t) => `"${t}"`).join(' or '), top.dtype);
  if (!(typeof top.divisor === 'number' && top.divisor > 0 && Number.isFinite(top.divisor)))
    fail('divisor', 'a positive number', top.divisor);
  const classes = count(top.classes, 'classes', 1);
  const names = list(top.class_names, 'class_names');
  if (names.length !== classes) fail('class_names', `${classes} names`, names.length);
  names.forEach((n, i) => text(n, `class_names[${i}]`));
  if (top.split !== undefined) {
    const split = object(top.split, 'split');
    if (split.method !== 'given' && split.method !== 'stratified' && split.method !== 'position')
      fail('split.method', '"given", "stratified" or "position"', split.method);
    if (split.method !== 'given') {
      const f = split.test_fraction;
      if (!(typeof f === 'number' && f > 0 && f < 1)) fail('split.test_fraction', 'a number in (0, 1)', f);
    }
    if (split.method === 'stratified') count(split.seed, 'split.seed');
  }
  if (top.standardization !== undefined) {
    const standardization = object(top.standardization, 'standardization');
    const columns = list(standardization.columns, 'standardization.columns');
    columns.forEach((c, i) => text(c, `standardization.columns[${i}]`));
    if (columns.length !== sampleSize(shape as number[]))
      fail('standardization.columns', `${sampleSize(shape as number[])} columns`, columns.length);
    numbers(standardization.mean, 'standardization.mean', columns.length);
    numbers(standardization.std, 'standardization.std', columns.length);
  }
  if (top.text !== undefined) validateText(object(top.text, 'text'), top, classes, fail);
  const schema = object(top.schema, 'schema');
  const expected = expectedSchema(format as string, shape as number[], top.dtype as FeatureType);
  if (JSON.stringify(schema) !== JSON.stringify(expected)) fail('schema', JSON.stringify(expected), schema);
  const splits = object(top.splits, 'splits');
  for (const name of splitNames) {
    const at = `splits.${name}`;
    const split = object(splits[name], at);
    text(split.file, `${at}.file`, /^[^/\\]+$/);
    const rows = count(split.rows, `${at}.rows`, 1);
    const bytes = count(split.bytes, `${at}.bytes`, 1);
    text(split.sha256, `${at}.sha256`, sha256Text);
    const counts = list(split.class_counts, `${at}.class_counts`);
    if (counts.length !== classes) fail(`${at}.class_counts`, `${classes} counts`, counts.length);
    if (counts.reduce((sum: number, c, i) => sum + count(c, `${at}.class_counts[${i}]`), 0) !== rows) {
      fail(`${at}.class_counts`, `counts summing to ${rows}`, counts);
    }
    const tail = object(split.tail, `${at}.tail`);
    if (count(tail.offset, `${at}.tail.offset`, 8) >= bytes) fail(`${at}.tail.offset`, `less than ${bytes}`, tail.offset);
    text(tail.crc64, `${at}.tail.crc64`, crc64Text);
    const batches = list(split.record_batches, `${at}.record_batches`);
    if (batches.length === 0) fail(`${at}.record_batches`, 'at least one', batches);
    let total = 0;
    batches.forEach((b, i) => {
      const batch = object(b, `${at}.record_batches[${i}]`);
      total += count(batch.rows, `${at}.record_batches[${i}].rows`, 1);
      text(batch.crc64, `${at}.record_batches[${i}].crc64`, crc64Text);
    });
    if (total !== rows) fail(`${at}.record_batches`, `rows summing to ${rows}`, total);
  }
  return top as unknown as Manifest;
}

/**
 * A text dataset's `text` field against the rest of the manifest: every sample is context + 1 exact
 * token ids (divisor 1, uint8 only while the ids fit), one class per token.
 */
function validateText(
  text: Record<string, unknown>,
  top: Record<string, unknown>,
  classes: number,
  fail: (field: string, what: string, got: unknown) => never,
): void {
  if (top.format !== manifestFormat) fail('format', `"${manifestFormat}" for a text dataset`, top.format);
  if (!textTokenKinds.includes(text.tokens as TextInfo['tokens'])) fail('text.tokens', '"char" or "byte"', text.tokens);
  const context = text.context;
  if (!(Number.isSafeInteger(context) && (context as number) >= 1)) fail('text.context', 'an integer >= 1', context);
  if (JSON.stringify(top.sample_shape) !== JSON.stringify([(context as number) + 1]))
    fail('sample_shape', `[${(context as number) + 1}] (text.context + 1)`, top.sample_shape);
  if (top.divisor !== 1) fail('divisor', '1 (token ids stored exactly)', top.divisor);
  if (text.tokens === 'byte') {
    if (text.vocab !== undefined) fail('text.vocab', 'nothing for byte tokens', text.vocab);
    if (classes !== 256) fail('classes', '256 (byte tokens)', classes);
  } else {
    const vocab = text.vocab;
    if (!Array.isArray(vocab) || vocab.length !== classes) fail('text.vocab', `a list of ${classes} characters (one per class)`, vocab);
    let previous = -1;
    (vocab as unknown[]).forEach((token, i) => {
      // one code point each, in increasing code point order: ids follow the sorted vocabulary
      const codePoint = typeof token === 'string' && [...token].length === 1 ? token.codePointAt(0)! : -1;
      if (codePoint <= previous)
        fail(`text.vocab[${i}]`, i === 0 ? 'one character' : `one character after ${JSON.stringify((vocab as string[])[i - 1])}`, token);
      previous = codePoint;
    });
  }
  if (top.dtype === 'uint8' && classes > 256) fail('dtype', `"float32" for ${classes} token ids`, top.dtype);
}
