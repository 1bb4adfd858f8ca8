// Seeded synthetic image datasets of any shape, class count and size: each class is a pattern of
// plane waves (its own frequencies and phase per channel); a sample is its class's pattern, shifted,
// at a random contrast, mixed with uniform noise. Sample i of a split is a pure function of
// (seed, split, i), so any size can be generated in pieces and regenerated bit for bit.
//   node dist/datasets/synthetic.js --out DIR [--shape 3x32x32] [--classes 10] [--train N] [--test N] [--seed S]
import { commandLine, runMain } from '../src/cli/command';
import type { Manifest } from '../src/data/manifest';
import { writeDataset, type ProgressSink, type SplitSource } from '../src/data/writer';
import { hashKeys, stream } from '../src/base/random';

export interface SyntheticOptions {
  /** [C, H, W] */
  shape: [number, number, number];
  classes: number;
  trainRows: number;
  testRows: number;
  seed: number;
  rowsPerBatch: number;
}

export const syntheticDefaults: SyntheticOptions = {
  shape: [3, 32, 32],
  classes: 10,
  trainRows: 10000,
  testRows: 2000,
  seed: 1,
  rowsPerBatch: 100,
};

/** "3x32x32" -> [3, 32, 32] */
export function parseShape(text: string): [number, number, number] {
  const dims = text.split('x').map(Number);
  if (dims.length !== 3 || !dims.every((d) => Number.isSafeInteger(d) && d >= 1)) {
    throw new Error(`--shape expects CxHxW with positive integers, got "${text}"`);
  }
  return dims as [number, number, number];
}

function splitSource(options: SyntheticOptions, splitId: number, rows: number): SplitSource {
  const [channels, height, width] = options.shape;
  const plane = height * width;
  // per class and channel: wave numbers along x and y (1..4) and a phase
  const waves = Array.from({ length: options.classes * channels }, (_, k) => {
    const next = stream(hashKeys(options.seed, 0xc1a55, k));
    return { fx: 1 + Math.floor(next() * 4), fy: 1 + Math.floor(next() * 4), phase: next() * 2 * Math.PI };
  });
  return {
    rows,
    fill(first, images, labels) {
      for (let i = 0; i < labels.length; ++i) {
        const next = stream(hashKeys(options.seed, splitId, first + i));
        const label = Math.floor(next() * options.classes);
        const contrast = 0.3 + 0.4 * next();
        const dx = Math.floor(next() * (width / 4 + 1));
        const dy = Math.floor(next() * (height / 4 + 1));
        labels[i] = label;
        for (let c = 0; c < channels; ++c) {
          const { fx, fy, phase } = waves[label * channels + c];
          for (let y = 0; y < height; ++y) {
            for (let x = 0; x < width; ++x) {
              const wave = 0.5 + 0.5 * Math.sin(2 * Math.PI * ((fx * (x + dx)) / width + (fy * (y + dy)) / height) + phase);
              const value = contrast * wave + (1 - contrast) * next();
              images[(i * channels + c) * plane + y * width + x] = Math.min(255, Math.floor(256 * value));
            }
          }
        }
      }
    },
  };
}

export function generateSynthetic(outDir: string, options: SyntheticOptions, progress?: ProgressSink): Promise<Manifest> {
  const name = `synthetic-${options.shape.join('x')}-c${options.classes}-s${options.seed}`;
  return writeDataset(
    outDir,
    {
      name,
      source: `datasets/synthetic.js seed ${options.seed}: plane-wave class patterns, random shift and contrast, uniform noise`,
      sampleShape: options.shape,
      classNames: Array.from({ length: options.classes }, (_, c) => `class-${c}`),
    },
    { train: splitSource(options, 1, options.trainRows), test: splitSource(options, 2, options.testRows) },
    options.rowsPerBatch,
    progress,
  );
}

if (require.main === module) {
  runMain('synthetic', async () => {
    const d = syntheticDefaults;
    const args = commandLine('synthetic', '$0 --out DIR [options]\n\nWrites a seeded synthetic image dataset (Arrow dataset directory).')
      .option('out', { type: 'string', demandOption: true, describe: 'dataset directory to write' })
      .option('shape', { type: 'string', default: d.shape.join('x'), coerce: parseShape, describe: 'sample shape CxHxW' })
      .option('classes', { type: 'number', default: d.classes, describe: 'number of classes (>= 2)' })
      .option('train', { type: 'number', default: d.trainRows, describe: 'training samples' })
      .option('test', { type: 'number', default: d.testRows, describe: 'test samples' })
      .option('seed', { type: 'number', default: d.seed, describe: 'seed: same seed, same bytes' })
      .option('rows-per-batch', {
        type: 'number',
        default: d.rowsPerBatch,
        describe: 'samples per Arrow record batch (shards are whole batches)',
      })
      .check((a) => {
        for (const [flag, min] of [
          ['classes', 2],
          ['train', 1],
          ['test', 1],
          ['seed', 0],
          ['rows-per-batch', 1],
        ] as const) {
          const value = a[flag] as number;
          if (!Number.isSafeInteger(value) || value < min) throw new Error(`--${flag} expects an integer >= ${min}, got ${value}`);
        }
        return true;
      })
      .parseSync();
    const options = {
      shape: args.shape,
      classes: args.classes,
      trainRows: args.train,
      testRows: args.test,
      seed: args.seed,
      rowsPerBatch: args.rowsPerBatch,
    };
    await generateSynthetic(args.out, options, console.log);
  });
}
