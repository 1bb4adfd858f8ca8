// Prepares the default datasets in datasets/ (called by launch/prepare): Fashion-MNIST from Debian's
// package, a synthetic 3x32x32 set for cifarnet, and text-char (Debian's fortunes as char tokens) for
// language models. A dataset whose manifest and files are in place is left alone; --force rewrites them.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { commandLine, runMain } from '../src/cli/command';
import { readManifest, splitNames } from '../src/data/manifest';
import { convertFashionMnist, debianSource } from './fashion-mnist';
import { generateSynthetic, syntheticDefaults } from './synthetic';
import { makeTextChar } from './text-char';

export interface DefaultDataset {
  dir: string;
  make: (dir: string) => Promise<unknown>;
}

export const defaultDatasets: DefaultDataset[] = [
  { dir: 'fashion-mnist', make: (dir) => convertFashionMnist(debianSource, dir, undefined, console.log) },
  { dir: 'synthetic-cifar', make: (dir) => generateSynthetic(dir, syntheticDefaults, console.log) },
  { dir: 'text-char', make: (dir) => makeTextChar(dir, console.log) },
];

/** Writes `dataset` under `root` unless it is complete there (or `force`); whether it wrote it. */
export async function prepareDataset(root: string, dataset: DefaultDataset, force = false): Promise<boolean> {
  const target = path.join(root, dataset.dir);
  if (!force && isComplete(target)) return false;
  console.log(`[prepare] writing dataset ${target}`);
  await dataset.make(target);
  return true;
}

/** True when the directory's manifest is valid and every file it names has the stated size. */
export function isComplete(dir: string): boolean {
  try {
    const manifest = readManifest(dir);
    return splitNames.every((name) => fs.statSync(path.join(dir, manifest.splits[name].file)).size === manifest.splits[name].bytes);
  } catch {
    return false;
  }
}

if (require.main === module) {
  runMain('prepare-datasets', async () => {
    const args = commandLine('prepare-datasets', '$0 [--force]\n\nWrites the default datasets under datasets/.')
      .option('force', { type: 'boolean', default: false, describe: 'rewrite datasets that are already complete' })
      .option('root', {
        type: 'string',
        default: path.join(__dirname, '..', '..', 'datasets'),
        describe: 'where the dataset directories go',
      })
      .parseSync();
    for (const dataset of defaultDatasets) await prepareDataset(args.root, dataset, args.force);
  });
}
