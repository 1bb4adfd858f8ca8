// Text from a language model: each new token is drawn from the softmax of the last position's
// logits divided by the temperature (0: the most likely token), the model reading the last
// `context` tokens so far. Draws come from a stream seeded by the caller: the same model, prompt
// and seed give the same text on any machine (the logits' bits are the kernels' pinned ones).
import { stream } from '../base/random';
import type { Net } from './net';

export interface SampleSettings {
  /** token ids to continue (at least one) */
  prompt: readonly number[];
  /** how many tokens to add */
  tokens: number;
  /** 0: always the most likely token; 1: the model's distribution; above: flatter */
  temperature: number;
  seed: number;
  /** only ids below this are drawn (the dataset's vocabulary, where the model embeds more) */
  vocabulary: number;
  /** called after each token (a training rank tells its watchdog that it is alive) */
  afterToken?: () => void;
}

/** The prompt's continuation: `tokens` ids. */
export function sampleTokens(net: Net, settings: SampleSettings): number[] {
  const language = net.spec.language;
  if (!language) throw new Error(`${net.spec.name} is not a language model (its spec names no "context" and "vocab")`);
  if (settings.prompt.length === 0) throw new Error('sampling needs a prompt of at least one token');
  const { context: T, vocab: V } = language;
  const drawable = Math.min(settings.vocabulary, V);
  const next = stream(settings.seed);
  const tokens = [...settings.prompt];
  const window = new Float32Array(T + 1); // positions past the text are zeros: causal attention never reads them
  const probabilities = new Float64Array(drawable);
  for (let k = 0; k < settings.tokens; ++k) {
    const seen = tokens.slice(-T);
    window.fill(0);
    window.set(seen);
    const logits = net.forward(window, 1, false, { seed: 0, epoch: 0, step: 0, shard: 0 });
    const row = logits.subarray((seen.length - 1) * V, (seen.length - 1) * V + drawable);
    tokens.push(draw(row, settings.temperature, next, probabilities));
    settings.afterToken?.();
  }
  return tokens.slice(settings.prompt.length);
}

/** A token id from logits at `temperature` (0: the largest, the first of equals). */
function draw(logits: Float32Array, temperature: number, next: () => number, probabilities: Float64Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; ++i) if (logits[i] > logits[best]) best = i;
  if (temperature === 0) return best;
  let total = 0;
  for (let i = 0; i < logits.length; ++i) {
    probabilities[i] = Math.exp((logits[i] - logits[best]) / temperature);
    total += probabilities[i];
  }
  let u = next() * total;
  for (let i = 0; i < logits.length; ++i) {
    u -= probabilities[i];
    if (u < 0) return i;
  }
  return best; // u within rounding of the total
}
