// A shipped model's kernel-only training step (forward, backward, SGD update) on a fixed batch, warmed
// up: what the throughput and kernel-level benchmarks time. A language model's: AdamW (decay on
// matrices only) on fixed token windows.
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Backend } from '../src/nn/backend';
import { cpu } from '../src/nn/cpu';
import { Net } from '../src/nn/net';
import { loadSpec } from '../src/nn/spec';
import { Stream, streamVector } from '../src/nn/stream-memory';
import { matrixRanges, Optimizer } from '../src/solver/optimizer';
import { ReplicatedState } from '../src/solver/replicated-state';

/** The AdamW settings both sides of the language-model benchmark train with. */
export const languageModelAdamw = { lr: 3e-4, weightDecay: 0.1 };

export const benchRoot = path.resolve(__dirname, '..', '..');

/** The shipped specs (models/*.json) by name, sorted: image models, and language models (a "context"). */
export function shippedModels(): { image: string[]; language: string[] } {
  const names = fs
    .readdirSync(path.join(benchRoot, 'models'))
    .filter((f) => f.endsWith('.json'))
    .map((f) => f.slice(0, -5))
    .sort();
  const isLanguage = (name: string): boolean =>
    'context' in JSON.parse(fs.readFileSync(path.join(benchRoot, 'models', `${name}.json`), 'utf8'));
  return { image: names.filter((name) => !isLanguage(name)), language: names.filter(isLanguage) };
}

/**
 * `backend` computes the net and the SGD update, as ft-train's trainer runs them with replicated
 * state (src/solver/replicated-state.ts): on a GPU the gradients come back to the host (where MPI
 * would sum them) and go up again for the update; the parameters and the velocity stay there.
 */
export function modelStep(name: string, batch: number, backend: Backend = cpu): { net: Net; step: () => void } {
  const net = new Net(loadSpec(path.join(benchRoot, 'models', `${name}.json`)), backend);
  net.init(1);
  const P = net.params.data.length;
  const sgd = { name: 'sgd' as const, momentum: 0.9, weightDecay: 5e-4, beta1: 0, beta2: 0, eps: 0 };
  const update = new ReplicatedState(new Optimizer(sgd, backend), backend, [streamVector(P, Stream.state)], net);
  // in the buffer the trainer would read batches into (page-locked where the net computes on a GPU)
  const x = net.inputBuffer(batch * net.inputSize);
  for (let i = 0; i < x.length; ++i) x[i] = (i % 97) / 97;
  const labels = Int32Array.from({ length: batch }, (_, i) => i % net.spec.classes);
  const step = (): void => {
    net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step: 0, shard: 0 });
    update.update(net.params.data, net.params.gradients, 0.01, 0);
  };
  for (let i = 0; i < 10; ++i) step();
  return { net, step };
}

/** As modelStep, a language model's with AdamW; on a GPU its update and state stay there too. */
export function languageModelStep(name: string, batch: number, backend: Backend = cpu): { net: Net; step: () => void } {
  const net = new Net(loadSpec(path.join(benchRoot, 'models', `${name}.json`)), backend);
  net.init(1);
  const P = net.params.data.length;
  const settings = {
    name: 'adamw' as const,
    momentum: 0,
    weightDecay: languageModelAdamw.weightDecay,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
  };
  const optimizer = new Optimizer(settings, backend, matrixRanges(net.params.views));
  const update = new ReplicatedState(optimizer, backend, [streamVector(P, Stream.state), streamVector(P, Stream.state + 1)], net);
  const x = net.inputBuffer(batch * net.inputSize);
  for (let i = 0; i < x.length; ++i) x[i] = (i * 7919) % net.spec.classes;
  const labels = new Int32Array(batch);
  let t = 0;
  const step = (): void => {
    net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step: t, shard: 0 });
    update.update(net.params.data, net.params.gradients, languageModelAdamw.lr, t++);
  };
  for (let i = 0; i < 3; ++i) step();
  return { net, step };
}
