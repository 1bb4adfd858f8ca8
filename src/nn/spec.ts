// Model specs: a JSON file with the per-sample input shape, the class count and a Caffe-like list
// of layers. A layer takes the previous layer's output (the first: the model input) unless it names
// its inputs ("inputs": ["conv1"], "input" being the model input), which makes the list a graph;
// only earlier layers may be named, so the list order is a topological order and cycles cannot be
// written. The model's output is the last layer. Every problem is reported before any work, as one
// line naming the file, the layer and the problem.
// A language model names its "context" T and "vocab" V instead of "input" and "classes": its input
// is a window of T + 1 token ids, its output [T, V] logits, the loss the mean cross-entropy of each
// position's logits against the next token.
import * as fs from 'node:fs';

/** Set only where the spec file names the inputs: a chain spec parses to the same objects as before graphs. */
export interface Inputs {
  inputs?: string[];
}

/** One layer of a model spec, every default filled in (see the README's layer types). */
export type LayerSpec = Inputs &
  (
    | { type: 'conv'; name: string; filters: number; kernel: number; stride: number; pad: number }
    | { type: 'maxpool' | 'avgpool'; name: string; kernel: number; stride: number; pad: number }
    | { type: 'linear'; name: string; outputs: number }
    | { type: 'relu' | 'flatten' | 'globalavgpool' | 'add' | 'concat'; name: string }
    | { type: 'dropout'; name: string; p: number }
    | { type: 'batchnorm'; name: string; momentum: number; eps: number }
    | { type: 'layernorm'; name: string; eps: number }
    | { type: 'embedding'; name: string; dim: number }
    | { type: 'attention'; name: string; heads: number }
    | { type: 'gelu'; name: string }
    | { type: 'lmhead'; name: string; embedding: string }
  );

/** What a language model's spec names instead of an input shape and classes. */
export interface LanguageModel {
  /** T: positions each sequence predicts (its window holds T + 1 tokens). */
  context: number;
  /** V: the token ids the model embeds and predicts, [0, V). */
  vocab: number;
}

/** A model: the input shape, the classes and the layers (a graph in topological order). */
export interface ModelSpec {
  /** Where it came from, for messages. */
  file: string;
  /** The model's name (default: the file). */
  name: string;
  /** Per-sample input shape: [F] or [C, H, W]. */
  input: number[];
  /** Classes of the softmax cross-entropy on top (a language model's: its vocabulary). */
  classes: number;
  layers: LayerSpec[];
  /** Set for a language model: input is then [context + 1] and classes the vocabulary. */
  language?: LanguageModel;
}

/** The name by which layers take the model input. */
export const modelInput = 'input';

export class SpecError extends Error {
  override name = 'SpecError';
}

type Raw = Record<string, unknown>;
type Check = (value: unknown) => string | undefined;

const positive: Check = (v) => (Number.isInteger(v) && (v as number) > 0 ? undefined : 'a positive integer');
const nonNegative: Check = (v) => (Number.isInteger(v) && (v as number) >= 0 ? undefined : 'a non-negative integer');
const probability: Check = (v) => (typeof v === 'number' && v >= 0 && v < 1 ? undefined : 'in [0, 1)');
const fraction: Check = (v) => (typeof v === 'number' && v >= 0 && v <= 1 ? undefined : 'in [0, 1]');
const positiveNumber: Check = (v) => (typeof v === 'number' && v > 0 && Number.isFinite(v) ? undefined : 'a positive number');

// Each layer type's fields: [check, default]; required ones have no default.
const fields: Record<LayerSpec['type'], Record<string, [Check, number | undefined]>> = {
  conv: { filters: [positive, undefined], kernel: [positive, undefined], stride: [positive, 1], pad: [nonNegative, 0] },
  maxpool: { kernel: [positive, undefined], stride: [positive, undefined], pad: [nonNegative, 0] },
  avgpool: { kernel: [positive, undefined], stride: [positive, undefined], pad: [nonNegative, 0] },
  linear: { outputs: [positive, undefined] },
  relu: {},
  flatten: {},
  dropout: { p: [probability, undefined] },
  batchnorm: { momentum: [fraction, 0.1], eps: [positiveNumber, 1e-5] },
  layernorm: { eps: [positiveNumber, 1e-5] },
  embedding: { dim: [positive, undefined] },
  attention: { heads: [positive, undefined] },
  gelu: {},
  lmhead: {},
  globalavgpool: {},
  add: {},
  concat: {},
};

/** Layer types that take several inputs. */
const merging: ReadonlySet<string> = new Set(['add', 'concat']);

function isObject(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function positiveInt(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) > 0;
}

export function parseSpec(file: string, text: string): ModelSpec {
  const fail = (problem: string): never => {
    throw new SpecError(`${file}: ${problem}`);
  };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    return fail(`not valid JSON (${(error as Error).message})`);
  }
  if (!isObject(raw)) return fail('expected a JSON object with "input", "classes" and "layers"');
  for (const key of Object.keys(raw)) {
    if (!['name', 'input', 'classes', 'context', 'vocab', 'layers'].includes(key)) fail(`unknown field "${key}"`);
  }
  const language = parseLanguage(raw, fail);
  const input = language ? [language.context + 1] : raw.input;
  if (!language) {
    if (!Array.isArray(input) || (input.length !== 1 && input.length !== 3) || !input.every(positiveInt)) {
      fail('"input" must be [F] or [C, H, W], positive integers (or a language model\'s "context" and "vocab")');
    }
    if (!positiveInt(raw.classes) || raw.classes < 2) fail('"classes" must be an integer >= 2');
  }
  if (!Array.isArray(raw.layers) || raw.layers.length === 0) fail('"layers" must be a non-empty array');
  const position = new Map<string, number>(); // layer name -> index
  const names = (raw.layers as unknown[]).map((entry, index) =>
    isObject(entry) && typeof entry.name === 'string' ? entry.name : `${isObject(entry) ? String(entry.type) : 'layer'}${index + 1}`,
  );
  names.forEach((name, index) => {
    if (!position.has(name)) position.set(name, index);
  });
  const layers = (raw.layers as unknown[]).map((entry, index): LayerSpec => {
    const name = names[index];
    const where = `layer ${index + 1}${isObject(entry) ? ` (${name})` : ''}`;
    if (!isObject(entry)) return fail(`${where}: expected an object with a "type"`);
    const type = entry.type as LayerSpec['type'];
    if (typeof entry.type !== 'string' || !(entry.type in fields)) {
      return fail(`${where}: unknown type ${JSON.stringify(entry.type)}; expected one of ${Object.keys(fields).join(', ')}`);
    }
    if (name === modelInput) fail(`${where}: the name "${modelInput}" is the model input's`);
    if (position.get(name) !== index) fail(`${where}: the name is already layer ${position.get(name)! + 1}'s`);
    const layer: Raw = { type, name };
    for (const key of Object.keys(entry)) {
      if (key !== 'type' && key !== 'name' && key !== 'inputs' && !(key in fields[type]) && !(type === 'lmhead' && key === 'embedding'))
        fail(`${where}: unknown field "${key}" for ${type}`);
    }
    if (type === 'lmhead')
      layer.embedding = embeddingName(entry.embedding, names.slice(0, index), raw.layers as Raw[], (p) => fail(`${where}: ${p}`));
    if (!language && (type === 'embedding' || type === 'lmhead'))
      fail(`${where}: ${type} belongs to a language model (a spec with "context" and "vocab")`);
    for (const [key, [check, fallback]] of Object.entries(fields[type])) {
      const value = entry[key] ?? (key === 'stride' && fallback === undefined ? entry.kernel : fallback);
      if (value === undefined) fail(`${where}: missing field "${key}"`);
      const expected = check(value);
      if (expected) fail(`${where}: "${key}" must be ${expected}, got ${JSON.stringify(value)}`);
      layer[key] = value;
    }
    if (entry.inputs !== undefined) layer.inputs = parseInputs(entry.inputs, index, position, (p) => fail(`${where}: ${p}`));
    const count = (entry.inputs as unknown[] | undefined)?.length ?? 1;
    if (merging.has(type) && count < 2) fail(`${where}: ${type} needs "inputs" naming at least two layers`);
    if (!merging.has(type) && count !== 1) fail(`${where}: ${type} takes one input, got ${count}`);
    return layer as unknown as LayerSpec;
  });
  checkAllUsed(layers, (p) => fail(p));
  const name = typeof raw.name === 'string' ? raw.name : file;
  if (language) return { file, name, input: input as number[], classes: language.vocab, layers, language };
  return { file, name, input: input as number[], classes: raw.classes as number, layers };
}

/** A language model's context and vocabulary, or undefined for a spec that names neither. */
function parseLanguage(raw: Raw, fail: (problem: string) => never): LanguageModel | undefined {
  if (raw.context === undefined && raw.vocab === undefined) return undefined;
  if (raw.input !== undefined || raw.classes !== undefined)
    fail('a language model names "context" and "vocab" instead of "input" and "classes", not both');
  if (!positiveInt(raw.context)) fail('"context" must be a positive integer (the positions a sequence predicts)');
  if (!positiveInt(raw.vocab) || raw.vocab < 2) fail('"vocab" must be an integer >= 2 (the token ids, 0 to vocab - 1)');
  return { context: raw.context as number, vocab: raw.vocab as number };
}

/** The lmhead's "embedding": the name of an earlier embedding layer, whose token table it shares. */
function embeddingName(value: unknown, earlier: string[], layers: Raw[], fail: (problem: string) => never): string {
  if (typeof value !== 'string') return fail('missing field "embedding" (the name of the embedding layer whose token table it shares)');
  const at = earlier.indexOf(value);
  if (at < 0) return fail(`"embedding": "${value}" is no earlier layer's name`);
  if (layers[at].type !== 'embedding') return fail(`"embedding": "${value}" is a ${String(layers[at].type)} layer, not an embedding`);
  return value;
}

function parseInputs(value: unknown, index: number, position: Map<string, number>, fail: (problem: string) => never): string[] {
  if (!Array.isArray(value) || value.length === 0 || !value.every((v) => typeof v === 'string')) {
    return fail('"inputs" must be a non-empty array of layer names');
  }
  for (const input of value as string[]) {
    if (input === modelInput) continue;
    const at = position.get(input);
    if (at === undefined) fail(`input "${input}" is no layer's name`);
    if (at! >= index) {
      fail(
        at === index
          ? 'takes its own output as input (a cycle)'
          : `input "${input}" is layer ${at! + 1}, not an earlier layer (a forward reference or a cycle)`,
      );
    }
  }
  return value as string[];
}

/** The index of the node each input of layer `index` names: -1 for the model input. */
export function inputIndices(spec: ModelSpec, index: number): number[] {
  const names = spec.layers[index].inputs;
  if (!names) return [index - 1];
  return names.map((name) => (name === modelInput ? -1 : spec.layers.findIndex((l) => l.name === name)));
}

/** Every layer's output but the last one's (the model output) must feed some layer. */
function checkAllUsed(layers: LayerSpec[], fail: (problem: string) => never): void {
  const used = new Set<string>();
  layers.forEach((layer, index) => {
    for (const name of layer.inputs ?? [index === 0 ? modelInput : layers[index - 1].name]) used.add(name);
  });
  layers.slice(0, -1).forEach((layer, index) => {
    if (!used.has(layer.name))
      fail(`layer ${index + 1} (${layer.name}): its output is used by no layer (only the last layer, the model output, may be)`);
  });
}

export function loadSpec(file: string): ModelSpec {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new SpecError(`${file}: cannot read the model spec (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  return parseSpec(file, text);
}
