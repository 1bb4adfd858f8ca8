// Image folders -> dataset: DIR/<class>/<image> (PNG or JPEG, any size), one subfolder per class
// (classes in sorted order), decoded and resized with sharp to CxHxW (C = 1: grayscale, 3: RGB),
// stored as uint8 pixels [C, H, W] that training divides by 255. Images are read one at a time.
import * as fs from 'node:fs';
import * as path from 'node:path';
import sharp from 'sharp';
import { DatasetError } from '../errors';
import type { Manifest } from '../manifest';
import { buildDataset, splitMethod, type CommonOptions, type DatasetBuilder } from './build';
import { ConversionProgress } from './progress';

export interface ImageOptions extends CommonOptions {
  /** [C, H, W], C 1 or 3 */
  shape: [number, number, number];
}

const imageFile = /\.(png|jpe?g)$/i;

/** "3x32x32" -> [3, 32, 32]; C must be 1 or 3. */
export function parseImageShape(text: string): [number, number, number] {
  const dims = text.split('x').map(Number);
  if (dims.length !== 3 || !dims.every((d) => Number.isSafeInteger(d) && d >= 1) || (dims[0] !== 1 && dims[0] !== 3)) {
    throw new Error(`--shape expects CxHxW with C 1 (grayscale) or 3 (RGB) and positive H, W, got "${text}"`);
  }
  return dims as [number, number, number];
}

/** Decodes an encoded PNG/JPEG (a file's path or its bytes) into [C, H, W] uint8 pixels, resized to fill H x W. */
export async function decodeImage(input: string | Buffer, shape: [number, number, number], where: string, into: Uint8Array): Promise<void> {
  const [channels, height, width] = shape;
  let pixels: Buffer;
  try {
    let image = sharp(input).resize(width, height, { fit: 'fill' });
    image = channels === 1 ? image.grayscale() : image.removeAlpha().toColourspace('srgb');
    pixels = await image.raw().toBuffer();
  } catch (error) {
    throw new DatasetError(where, `not a readable PNG or JPEG image (${(error as Error).message})`);
  }
  const plane = height * width;
  // sharp gives interleaved [H, W, C]; a grayscale's buffer may still hold 3 channels
  const stride = pixels.length / plane;
  for (let c = 0; c < channels; ++c) for (let p = 0; p < plane; ++p) into[c * plane + p] = pixels[p * stride + c];
}

/** Class folders and their images, sorted; an empty class folder or a folder without classes is an error. */
function listClasses(dir: string): { name: string; files: string[] }[] {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch (error) {
    throw new DatasetError(dir, `cannot read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const classes = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  if (classes.length === 0) throw new DatasetError(dir, 'no class folders (expected DIR/<class>/<image>.png|jpg)');
  return classes.map((name) => {
    const folder = path.join(dir, name);
    const files = fs
      .readdirSync(folder)
      .filter((f) => imageFile.test(f))
      .sort()
      .map((f) => path.join(folder, f));
    if (files.length === 0) throw new DatasetError(folder, 'an empty class folder: no .png, .jpg or .jpeg images');
    return { name, files };
  });
}

async function feed(
  dir: string,
  shape: [number, number, number],
  builder: DatasetBuilder,
  split: 'train' | 'test' | undefined,
): Promise<void> {
  const classes = listClasses(dir);
  const total = classes.reduce((n, c) => n + c.files.length, 0);
  const progress = new ConversionProgress(dir, total, 'images');
  const pixels = new Uint8Array(shape[0] * shape[1] * shape[2]);
  let done = 0;
  try {
    for (const { name, files } of classes) {
      for (const file of files) {
        await decodeImage(file, shape, file, pixels);
        builder.add(name, pixels, split);
        progress.update(++done);
      }
    }
  } finally {
    progress.stop();
  }
}

export async function convertImages(dir: string, options: ImageOptions): Promise<Manifest> {
  const classNames = listClasses(dir).map((c) => c.name);
  if (options.test !== undefined) {
    const testNames = listClasses(options.test).map((c) => c.name);
    const unknown = testNames.filter((name) => !classNames.includes(name));
    if (unknown.length > 0) throw new DatasetError(options.test, `class folder "${unknown[0]}" is not one of ${dir}'s classes`);
  }
  return buildDataset(
    {
      out: options.out,
      force: options.force,
      name: options.name ?? path.basename(path.resolve(dir)),
      source: `ft-data images ${[dir, ...(options.test !== undefined ? [options.test] : [])].join(' + ')} at ${options.shape.join('x')}`,
      sampleShape: options.shape,
      dtype: 'uint8',
      divisor: 255,
      split: splitMethod(options),
      classNames,
      labelOrigin: `${dir}: class folders`,
      rowsPerBatch: options.rowsPerBatch,
      progress: (line) => console.error(`[ft-data] ${line}`),
    },
    async (builder) => {
      await feed(dir, options.shape, builder, options.test !== undefined ? 'train' : undefined);
      if (options.test !== undefined) await feed(options.test, options.shape, builder, 'test');
    },
  );
}
