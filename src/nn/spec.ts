// Model specs: a JSON file with the per-sample input shape, the class count and a Caffe-like list
// of layers. Every problem is reported before any work, as one line naming the file, the layer
// and the problem.
import * as fs from 'node:fs';

export type LayerSpec =
  | { type: 'conv'; name: string; filters: number; kernel: number; stride: number; pad: number }
  | { type: 'maxpool' | 'avgpool'; name: string; kernel: number; stride: number; pad: number }
  | { type: 'linear'; name: string; outputs: number }
  | { type: 'relu' | 'flatten'; name: string }
  | { type: 'dropout'; name: string; p: number };

export interface ModelSpec {
  /** Where it came from, for messages. */
  file: string;
  name: string;
  /** Per-sample input shape [C, H, W]. */
  input: [number, number, number];
  classes: number;
  layers: LayerSpec[];
}

export class SpecError extends Error {
  override name = 'SpecError';
}

type Raw = Record<string, unknown>;

// Each layer type's fields: required ones have no default.
const fields: Record<LayerSpec['type'], Record<string, number | undefined>> = {
  conv: { filters: undefined, kernel: undefined, stride: 1, pad: 0 },
  maxpool: { kernel: undefined, stride: undefined, pad: 0 },
  avgpool: { kernel: undefined, stride: undefined, pad: 0 },
  linear: { outputs: undefined },
  relu: {},
  flatten: {},
  dropout: { p: undefined },
};

function isObject(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function positiveInt(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) > 0;
}

export function parseSpec(file: string, text: string): ModelSpec {
  const fail = (problem: string): never => { throw new SpecError(`${file}: ${problem}`); };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    return fail(`not valid JSON (${(error as Error).message})`);
  }
  if (!isObject(raw)) return fail('expected a JSON object with "input", "classes" and "layers"');
  for (const key of Object.keys(raw)) {
    if (!['name', 'input', 'classes', 'layers'].includes(key)) fail(`unknown field "${key}"`);
  }
  const input = raw.input;
  if (!Array.isArray(input) || (input.length !== 1 && input.length !== 3) || !input.every(positiveInt)) {
    fail('"input" must be [F] or [C, H, W], one or three positive integers');
  }
  if (!positiveInt(raw.classes) || raw.classes < 2) fail('"classes" must be an integer >= 2');
  if (!Array.isArray(raw.layers) || raw.layers.length === 0) fail('"layers" must be a non-empty array');
  const layers = (raw.layers as unknown[]).map((entry, index): LayerSpec => {
    const where = (name: string): string => `layer ${index + 1}${name ? ` (${name})` : ''}`;
    if (!isObject(entry)) return fail(`${where('')}: expected an object with a "type"`);
    const name = typeof entry.name === 'string' ? entry.name : `${String(entry.type)}${index + 1}`;
    const type = entry.type as LayerSpec['type'];
    if (typeof entry.type !== 'string' || !(entry.type in fields)) {
      return fail(`${where(name)}: unknown type ${JSON.stringify(entry.type)}; expected one of ${Object.keys(fields).join(', ')}`);
    }
    const layer: Raw = { type, name };
    for (const key of Object.keys(entry)) {
      if (key !== 'type' && key !== 'name' && !(key in fields[type])) fail(`${where(name)}: unknown field "${key}" for ${type}`);
    }
    for (const [key, fallback] of Object.entries(fields[type])) {
      const value = entry[key] ?? (key === 'stride' && fallback === undefined ? entry.kernel : fallback);
      if (value === undefined) fail(`${where(name)}: missing field "${key}"`);
      if (type === 'dropout') {
        if (typeof value !== 'number' || !(value >= 0 && value < 1)) fail(`${where(name)}: "p" must be in [0, 1), got ${JSON.stringify(value)}`);
      } else if (key === 'pad' ? !(Number.isInteger(value) && (value as number) >= 0) : !positiveInt(value)) {
        fail(`${where(name)}: "${key}" must be a ${key === 'pad' ? 'non-negative' : 'positive'} integer, got ${JSON.stringify(value)}`);
      }
      layer[key] = value;
    }
    return layer as LayerSpec;
  });
  return {
    file, name: typeof raw.name === 'string' ? raw.name : file, input: input as [number, number, number],
    classes: raw.classes as number, layers,
  };
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
