// bench/throughput: images/s of a full training step (forward, backward, SGD update) for lenet,
// lenet5 and mlp at batch 64 on one thread in one process, for this project and for PyTorch
// running the same model spec in the same run, with the GFLOP/s achieved. Last line JSON:
//   lenet_vs_pytorch (target >= 1.5), <model>_vs_pytorch (target >= 1.0 each), models.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { cpu } from '../src/nn/cpu';
import { Net } from '../src/nn/net';
import { loadSpec } from '../src/nn/spec';

const models = ['lenet', 'lenet5', 'mlp'];
const batch = 64;
const seconds = Number(process.env.BENCH_SECONDS ?? 4);
const root = path.resolve(__dirname, '..', '..');
const python = process.env.BENCH_PYTHON ?? '/usr/bin/python3';

/** Multiply-adds x 2 of one forward pass of `net` over a batch; a training step is about 3x. */
function forwardFlops(net: Net): number {
  let flops = 0;
  for (const view of net.params.views) {
    if (!view.name.endsWith('.weight')) continue;
    const layer = net.layers.find((l) => `${l.name}.weight` === view.name)!;
    const outputsPerFilter = layer.outShape.length === 3 ? layer.outShape[1] * layer.outShape[2] : 1;
    flops += 2 * view.length * outputsPerFilter * batch;
  }
  return flops;
}

function ours(name: string): { imagesPerS: number; gflops: number } {
  const net = new Net(loadSpec(path.join(root, 'models', `${name}.json`)), cpu);
  net.init(1);
  const velocity = new Float32Array(net.params.data.length);
  const x = Float32Array.from({ length: batch * net.inputSize }, (_, i) => (i % 97) / 97);
  const labels = Int32Array.from({ length: batch }, (_, i) => i % net.spec.classes);
  const step = (): void => {
    net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step: 0, shard: 0 });
    cpu.sgdUpdate(net.params.data, net.params.gradients, velocity, 0.01, 0.9, 5e-4);
  };
  for (let i = 0; i < 10; ++i) step();
  let steps = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < seconds) {
    step();
    steps += 1;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  return { imagesPerS: (steps * batch) / elapsed, gflops: (3 * forwardFlops(net) * steps) / elapsed / 1e9 };
}

function pytorch(): Map<string, number> {
  const result = spawnSync(python, [path.join(root, 'bench', 'pytorch_throughput.py'), String(batch),
    String(seconds), ...models.map((m) => path.join(root, 'models', `${m}.json`))],
  { encoding: 'utf8', env: { ...process.env, OMP_NUM_THREADS: '1' } });
  if (result.status !== 0) throw new Error(`PyTorch run failed (${python}):\n${result.stderr}`);
  const lines = result.stdout.trim().split('\n').map((l) => JSON.parse(l) as { model: string; images_per_s: number });
  return new Map(lines.map((l) => [l.model, l.images_per_s]));
}

function main(): void {
  cpu.setThreads(1);
  const rows = models.map((model) => {
    process.stderr.write(`[bench] ${model}: ft-train ...\n`);
    return { model, ...ours(model) };
  });
  process.stderr.write('[bench] PyTorch ...\n');
  const theirs = pytorch();
  const summary: Record<string, unknown> = {};
  console.log('model     ft-train img/s  GFLOP/s  PyTorch img/s  ratio');
  for (const row of rows) {
    const ratio = row.imagesPerS / theirs.get(row.model)!;
    summary[`${row.model}_vs_pytorch`] = +ratio.toFixed(3);
    console.log(`${row.model.padEnd(9)} ${row.imagesPerS.toFixed(0).padStart(14)} ${row.gflops.toFixed(2).padStart(8)} ` +
      `${theirs.get(row.model)!.toFixed(0).padStart(14)} ${ratio.toFixed(3).padStart(6)}`);
  }
  console.log(JSON.stringify({
    ...summary, batch, threads: 1,
    models: Object.fromEntries(rows.map((r) => [r.model, {
      images_per_s: +r.imagesPerS.toFixed(1), gflops: +r.gflops.toFixed(2),
      pytorch_images_per_s: +theirs.get(r.model)!.toFixed(1),
    }])),
  }));
}

main();
