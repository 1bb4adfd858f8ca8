// A shipped model's kernel-only training step (forward, backward, SGD update) on a fixed batch, warmed
// up: what the throughput and kernel-level benchmarks time.
import * as path from 'node:path';
import { cpu } from '../src/nn/cpu';
import { Net } from '../src/nn/net';
import { loadSpec } from '../src/nn/spec';
import { Stream, streamVector } from '../src/nn/stream-memory';

export const benchRoot = path.resolve(__dirname, '..', '..');

export function modelStep(name: string, batch: number): { net: Net; step: () => void } {
  const net = new Net(loadSpec(path.join(benchRoot, 'models', `${name}.json`)), cpu);
  net.init(1);
  const velocity = streamVector(net.params.data.length, Stream.state);
  const x = Float32Array.from({ length: batch * net.inputSize }, (_, i) => (i % 97) / 97);
  const labels = Int32Array.from({ length: batch }, (_, i) => i % net.spec.classes);
  const step = (): void => {
    net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step: 0, shard: 0 });
    cpu.sgdUpdate(net.params.data, net.params.gradients, velocity, 0.01, 0.9, 5e-4);
  };
  for (let i = 0; i < 10; ++i) step();
  return { net, step };
}
