// The bits of the CPU kernels at one instruction-set level, computed in a child process (a process
// pins one level for its life): `node dist/test/helpers/kernel-bits.js LEVEL` pins LEVEL ('-': the
// host's, by the first kernel), runs nets forward and backward on fixed inputs and prints one JSON
// line: the kernels' settings and sha256s of what they computed. Values recorded from it name their level.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import type { CpuLevel, KernelSettings } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import { Net } from '../../src/nn/net';
import { loadSpec, parseSpec } from '../../src/nn/spec';
import { randomTensor } from './gradcheck';

const key = { seed: 7, epoch: 1, step: 3, shard: 2 };

export interface KernelBits {
  kernels: KernelSettings;
  /** resnet8 and a mix of normalisation, pooling and merge layers at odd sizes (direct convolutions): sha256 of two steps' gradients, statistics, losses */
  norm: Record<string, string>;
  /** lenet and cifarnet: loss and sha256 of parameters, gradients and loss */
  chain: Record<string, [number, string]>;
}

function batchFor(net: Net, batch: number, seed: number): { x: Float32Array; labels: Int32Array } {
  const labels = Int32Array.from({ length: batch }, (_, i) => (i * 7 + seed) % net.spec.classes);
  return { x: randomTensor(batch * net.inputSize, seed), labels };
}

// channel, sample and feature counts that are not multiples of any vector width or block size
const normMix = {
  input: [3, 9, 9],
  classes: 5,
  layers: [
    { type: 'conv', name: 'c1', filters: 11, kernel: 3, pad: 1 },
    { type: 'batchnorm', name: 'bn1' },
    { type: 'relu', name: 'r1' },
    { type: 'conv', name: 'c2', filters: 13, kernel: 3 },
    { type: 'layernorm', name: 'ln2' },
    { type: 'conv', name: 'c3', filters: 13, kernel: 1, inputs: ['r1'] },
    { type: 'avgpool', name: 'p3', kernel: 3, stride: 1 },
    { type: 'add', name: 'sum', inputs: ['ln2', 'p3'] },
    { type: 'concat', name: 'cat', inputs: ['sum', 'p3'] },
    { type: 'globalavgpool', name: 'gap' },
    { type: 'linear', name: 'fc1', outputs: 19 },
    { type: 'batchnorm', name: 'bnf' },
    { type: 'layernorm', name: 'lnf' },
    { type: 'concat', name: 'feat', inputs: ['lnf', 'gap'] },
    { type: 'linear', name: 'fc2', outputs: 5 },
  ],
};

function normBits(): Record<string, string> {
  const nets: Record<string, Net> = {
    resnet8: new Net(loadSpec('models/resnet8.json'), cpu),
    'norm mix': new Net(parseSpec('g.json', JSON.stringify(normMix)), cpu),
  };
  cpu.setWinograd(false);
  const hashes: Record<string, string> = {};
  for (const [name, net] of Object.entries(nets)) {
    const batch = 11;
    net.init(1);
    for (const view of net.params.views) {
      if (/(ln|bn).*\.(weight|bias)$/.test(view.name)) net.params.param(view).set(randomTensor(view.length, view.offset + 1));
    }
    const hash = createHash('sha256');
    const add = (a: Float32Array | Float64Array): void => void hash.update(Buffer.from(a.buffer, a.byteOffset, a.byteLength));
    for (const step of [0, 1]) {
      const { x, labels } = batchFor(net, batch, 3 + step);
      const { loss } = net.lossAndGradient(x, labels, batch, { ...key, step }, 20);
      [net.params.gradients, net.statistics, Float64Array.of(loss)].forEach(add);
      net.updateBuffers(net.statistics);
      add(net.buffers);
    }
    const { x, labels } = batchFor(net, batch, 9);
    add(Float64Array.of(net.evaluate(x, labels, batch).loss));
    hashes[name] = hash.digest('hex');
  }
  cpu.setWinograd(true);
  return hashes;
}

function chainBits(): Record<string, [number, string]> {
  const result: Record<string, [number, string]> = {};
  for (const name of ['lenet', 'cifarnet']) {
    const net = new Net(loadSpec(`models/${name}.json`), cpu);
    net.init(1);
    const x = randomTensor(8 * net.inputSize, 5);
    const labels = Int32Array.from({ length: 8 }, (_, i) => (i * 7 + 5) % 10);
    const { loss } = net.lossAndGradient(x, labels, 8, key, 32);
    const hash = createHash('sha256');
    const bytes = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    hash.update(bytes(net.params.dataWithTail));
    hash.update(bytes(net.params.gradients));
    hash.update(Buffer.from(Float64Array.of(loss).buffer));
    result[name] = [loss, hash.digest('hex')];
  }
  return result;
}

/** Runs this file in a child process at `level` ('-': the host's) with `env` added to (or, undefined, removed from) the environment. */
export function kernelBits(level: CpuLevel | '-', env: Record<string, string | undefined> = {}): KernelBits {
  const childEnv = { ...process.env, ...env };
  for (const [name, value] of Object.entries(env)) if (value === undefined) delete childEnv[name];
  const run = spawnSync(process.execPath, [__filename, level], {
    env: childEnv,
    encoding: 'utf8',
    timeout: 120_000,
    cwd: path.join(__dirname, '..', '..', '..'),
  });
  if (run.status !== 0)
    throw new Error(`kernel-bits at ${level} ${JSON.stringify(env)}: exit ${run.status} ${run.signal ?? ''}\n${run.stderr}`);
  return JSON.parse(run.stdout) as KernelBits;
}

if (require.main === module) {
  const level = process.argv[2];
  if (level !== '-') cpu.pinLevel(level as CpuLevel);
  const bits: KernelBits = { kernels: cpu.kernelSettings(), norm: normBits(), chain: chainBits() };
  process.stdout.write(`${JSON.stringify(bits)}\n`);
}
