// ft-sample: text from a trained language model. Reads a run's model.safetensors, the spec beside
// it (model.json) and the vocabulary the trainer stored with the weights, and prints the prompt's
// continuation (the prompt itself is not repeated). The same model, prompt, temperature and seed
// print the same text.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { decodeSafetensors } from '../checkpoint/safetensors';
import type { TextInfo } from '../data/manifest';
import { decodeTokens, encodeText, vocabularySize } from '../data/text-tokens';
import { cpu } from '../nn/cpu';
import { textMetadataKey } from '../nn/export';
import { Net } from '../nn/net';
import { sampleTokens } from '../nn/sample';
import { loadSpec } from '../nn/spec';
import { runFiles } from '../run/files';
import { commandLine, last, runMain, UsageError } from './command';

runMain('ft-sample', async () => {
  const args = commandLine(
    'ft-sample',
    '$0 --model RUN_DIR/model.safetensors [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]\n\nPrints text a trained language model writes after the prompt.',
  )
    .option('model', { type: 'string', demandOption: true, describe: "a language model's weights (a run's model.safetensors)" })
    .option('prompt', { type: 'string', default: '\n', describe: 'the text to continue (default: a new line)' })
    .option('tokens', { type: 'number', default: 200, describe: 'tokens to write' })
    .option('temperature', { type: 'number', default: 1, describe: '0: the most likely token each time; 1: the model as trained' })
    .option('seed', { type: 'number', default: 1, describe: 'seed of the draws' })
    .check((a) => {
      const tokens = last(a.tokens);
      if (!(Number.isSafeInteger(tokens) && tokens >= 0)) throw new Error(`--tokens expects a non-negative integer, got ${tokens}`);
      const temperature = last(a.temperature);
      if (!(Number.isFinite(temperature) && temperature >= 0)) throw new Error(`--temperature expects a number >= 0, got ${temperature}`);
      const seed = last(a.seed);
      if (!(Number.isSafeInteger(seed) && seed >= 0)) throw new Error(`--seed expects a non-negative integer, got ${seed}`);
      return true;
    })
    .parseSync();
  const weights = last(args.model);
  if (fs.existsSync(weights) && fs.statSync(weights).isDirectory())
    throw new UsageError(`ft-sample: --model ${weights}: is a directory (give its ${runFiles.model})`);
  const { net, text } = loadLanguageModel(weights);
  const prompt = encodeText(text, last(args.prompt));
  if (prompt.length === 0) throw new UsageError('ft-sample: --prompt is empty: give at least one character');
  const ids = sampleTokens(net, {
    prompt,
    tokens: last(args.tokens),
    temperature: last(args.temperature),
    seed: last(args.seed),
    vocabulary: vocabularySize(text),
  });
  process.stdout.write(`${decodeTokens(text, ids)}\n`);
});

/** The net of `weights` (its spec from model.json beside it) and the tokenisation stored with it. */
function loadLanguageModel(weights: string): { net: Net; text: TextInfo } {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(weights);
  } catch (error) {
    throw new Error(`${weights}: cannot read the model (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`, {
      cause: error,
    });
  }
  const { tensors, metadata } = decodeSafetensors(bytes, weights);
  if (metadata[textMetadataKey] === undefined)
    throw new Error(`${weights}: holds no vocabulary: not a language model trained on a text dataset (ft-data text)`);
  const text = JSON.parse(metadata[textMetadataKey]) as TextInfo;
  const net = new Net(loadSpec(path.join(path.dirname(weights), runFiles.modelSpec)), cpu);
  const byName = new Map(tensors.map((tensor) => [tensor.name, tensor]));
  for (const view of net.params.views) {
    const tensor = byName.get(view.name);
    if (!tensor || tensor.data.length !== view.length)
      throw new Error(`${weights}: tensor ${view.name} is missing or of another size than model.json says`);
    net.params.param(view).set(tensor.data);
  }
  return { net, text };
}
