// The default text dataset, datasets/text-char: Debian's fortunes (~2.6 MB of English text) as
// char tokens, windows of 257 ids (context 256) for a GPT-style character model, the last tenth of
// the text the test split. What `ft-data text --out datasets/text-char` writes; prepare.ts makes it.
import type { Manifest } from '../src/data/manifest';
import { convertText, fortunesDir } from '../src/data/convert/text';
import type { ProgressSink } from '../src/data/writer';

export const textCharDefaults = { from: [fortunesDir], tokens: 'char', context: 256, testFraction: 0.1, rowsPerBatch: 100 } as const;

/** Writes datasets/text-char's content into `dir` (replacing what is there), atomically. */
export function makeTextChar(dir: string, progress?: ProgressSink): Promise<Manifest> {
  return convertText({ ...textCharDefaults, from: [...textCharDefaults.from], out: dir, force: true, name: 'text-char', progress });
}
