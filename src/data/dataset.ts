// A dataset directory: manifest.json plus one Arrow IPC file per split. Opening validates the
// manifest and opens both splits (sizes, footers, schemas); sample data is read only on demand.
import { readManifest, splitNames, type Manifest, type SplitName } from './manifest';
import { Split } from './split';

export class Dataset {
  private constructor(
    readonly dir: string,
    readonly manifest: Manifest,
    private readonly splits: Record<SplitName, Split>,
  ) {}

  static async open(dir: string): Promise<Dataset> {
    const manifest = readManifest(dir);
    const opened: Split[] = [];
    try {
      for (const name of splitNames) {
        opened.push(await Split.open(dir, name, manifest, manifest.splits[name]));
      }
    } catch (error) {
      await Promise.all(opened.map((s) => s.close()));
      throw error;
    }
    return new Dataset(dir, manifest, { train: opened[0], test: opened[1] });
  }

  get train(): Split {
    return this.splits.train;
  }

  get test(): Split {
    return this.splits.test;
  }

  /** [C, H, W] for images, [F] for feature vectors */
  get sampleShape(): number[] {
    return this.manifest.sample_shape;
  }

  get classes(): number {
    return this.manifest.classes;
  }

  /** Hashes every file against the manifest. */
  async verify(): Promise<void> {
    for (const name of splitNames) await this.splits[name].verify();
  }

  async close(): Promise<void> {
    await Promise.all(splitNames.map((name) => this.splits[name].close()));
  }
}
