// Builds a dataset directory from rows a converter streams in once: each row goes to its split's
// spill on disk (the split decided as it comes: given, or stratified), the train split's feature
// statistics are kept as it goes, and finish() writes the Arrow files from the spills (standardized
// with those statistics, classes in sorted order) through the dataset writer. Everything is written
// under a temporary directory next to the target, manifest last, then renamed into place: a target
// directory that exists is complete.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { syncPath } from '../../base/atomic-write';
import { DatasetError } from '../errors';
import { sampleSize, splitNames, type FeatureType, type Manifest, type SplitMethod, type SplitName } from '../manifest';
import { makeStaging, writeDataset, type ProgressSink, type SplitSource } from '../writer';
import { Spill } from './spill';
import { FeatureStats } from './stats';
import { StratifiedSplit } from './stratify';

export interface BuildOptions {
  out: string;
  /** replace `out` if it exists */
  force: boolean;
  name: string;
  source: string;
  sampleShape: number[];
  dtype: FeatureType;
  divisor: number;
  /** feature names, when the features are to be standardized with the train split's statistics (float32 only) */
  standardize?: string[];
  /** given (each row says its split) or stratified (test_fraction and seed) */
  split: SplitMethod;
  /** the class names in label order, when the input fixes them; otherwise the labels seen, sorted */
  classNames?: string[];
  /** what the labels come from, for messages (for example "iris.csv: label column 4") */
  labelOrigin: string;
  rowsPerBatch: number;
  progress: ProgressSink;
}

export class DatasetBuilder {
  private readonly temp: string;
  private readonly spills: Record<SplitName, Spill>;
  private readonly stats?: FeatureStats;
  private readonly stratified?: StratifiedSplit;
  private readonly classIds = new Map<string, number>();

  constructor(private readonly options: BuildOptions) {
    const { out } = options;
    if (fs.existsSync(out) && !options.force) throw new DatasetError(out, 'already exists (--force replaces it)');
    this.temp = makeStaging(out);
    const size = sampleSize(options.sampleShape);
    const valueBytes = options.dtype === 'float32' ? 4 : 1;
    this.spills = {
      train: new Spill(path.join(this.temp, 'train.spill'), size, valueBytes),
      test: new Spill(path.join(this.temp, 'test.spill'), size, valueBytes),
    };
    if (options.standardize) this.stats = new FeatureStats(size);
    if (options.split.method === 'stratified') this.stratified = new StratifiedSplit(options.split.test_fraction!, options.split.seed!);
  }

  /** One row: its class (a name, or with fixed class names one of them), its values, and its split unless stratified. */
  add(label: string, values: Float32Array | Uint8Array, split?: SplitName): void {
    const name = split ?? (this.stratified!.isTest(label) ? 'test' : 'train');
    let id = this.classIds.get(label);
    if (id === undefined) {
      if (this.options.classNames && !this.options.classNames.includes(label))
        throw new DatasetError(this.options.labelOrigin, `label "${label}" is not one of its ${this.options.classNames.length} classes`);
      id = this.classIds.size;
      this.classIds.set(label, id);
    }
    if (name === 'train') this.stats?.add(values);
    this.spills[name].append(id, values);
  }

  /** Writes the dataset and moves it into place. */
  async finish(): Promise<Manifest> {
    const { options } = this;
    const classNames = options.classNames ?? sortedLabels([...this.classIds.keys()]);
    if (classNames.length < 2)
      throw new DatasetError(
        options.labelOrigin,
        `only one class (${JSON.stringify(classNames[0] ?? '')}): a classifier needs two or more`,
      );
    const sortedId = new Int32Array(this.classIds.size);
    for (const [label, id] of this.classIds) sortedId[id] = classNames.indexOf(label);
    for (const name of splitNames) {
      this.spills[name].flush();
      if (this.spills[name].rows === 0)
        throw new DatasetError(
          options.source,
          `no ${name} rows${options.split.method === 'stratified' ? ' (too few rows for --test-fraction)' : ''}`,
        );
    }
    const statistics = this.stats?.result();
    const sources = Object.fromEntries(splitNames.map((name) => [name, this.source(this.spills[name], sortedId, statistics)])) as Record<
      SplitName,
      SplitSource
    >;
    const manifest = await writeDataset(
      this.temp,
      {
        name: options.name,
        source: options.source,
        sampleShape: options.sampleShape,
        classNames,
        features: { dtype: options.dtype, divisor: options.divisor },
        split: options.split,
        standardization: statistics && { columns: options.standardize!, ...statistics },
      },
      sources,
      options.rowsPerBatch,
      options.progress,
    );
    for (const name of splitNames) this.spills[name].close();
    if (options.force) fs.rmSync(options.out, { recursive: true, force: true });
    fs.renameSync(this.temp, options.out);
    syncPath(path.dirname(options.out));
    return manifest;
  }

  /** Removes the temporary directory (after a failure). */
  abort(): void {
    for (const name of splitNames) {
      try {
        this.spills[name].close();
      } catch {
        // already closed by finish()
      }
    }
    fs.rmSync(this.temp, { recursive: true, force: true });
  }

  private source(spill: Spill, sortedId: Int32Array, statistics?: { mean: number[]; std: number[] }): SplitSource {
    return {
      rows: spill.rows,
      fill(first, features, labels) {
        spill.read(first, labels, features);
        for (let i = 0; i < labels.length; ++i) labels[i] = sortedId[labels[i]];
        if (!statistics) return;
        const { mean, std } = statistics;
        for (let i = 0; i < features.length; ++i) {
          const j = i % mean.length;
          features[i] = (features[i] - mean[j]) / std[j];
        }
      },
    };
  }
}

/** Integer labels in numeric order, any others in code-unit order. */
function sortedLabels(labels: string[]): string[] {
  return labels.every((l) => /^-?\d+$/.test(l)) ? labels.sort((a, b) => Number(a) - Number(b)) : labels.sort();
}

/** What every converter takes from the command line. */
export interface CommonOptions {
  out: string;
  force: boolean;
  name?: string;
  /** a separate input of the same kind as the test split; otherwise a stratified draw of testFraction */
  test?: string;
  testFraction: number;
  seed: number;
  rowsPerBatch: number;
}

/** The split a converter's rows get: given by --test, or stratified. */
export function splitMethod(common: CommonOptions): SplitMethod {
  return common.test !== undefined ? { method: 'given' } : { method: 'stratified', test_fraction: common.testFraction, seed: common.seed };
}

/** Builds a dataset from what `feed` adds; a failure removes everything written so far. */
export async function buildDataset(options: BuildOptions, feed: (builder: DatasetBuilder) => Promise<void>): Promise<Manifest> {
  const builder = new DatasetBuilder(options);
  try {
    await feed(builder);
    return await builder.finish();
  } catch (error) {
    builder.abort();
    throw error;
  }
}
