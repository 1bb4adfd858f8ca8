// bench/throughput: images/s of a full training step (forward, backward, SGD update) for lenet,
// lenet5 and mlp at batch 64 on one thread in one process, for this project and for PyTorch
// running the same model spec in the same run, with the GFLOP/s achieved; and a real ft-train run
// of each model at 1 rank (Fashion-MNIST, the whole step: batch, sum, vote, update, records),
// whose median step time is set against the kernel-only step's. Last line JSON:
//   lenet_vs_pytorch (target >= 1.5), <model>_vs_pytorch (target >= 1.0 each),
//   step_vs_kernels_1rank (the worst model's real step / kernel-only step; target <= 1.1), models.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { median } from './median';
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

/** Median ms of steps 50.. of a real 1-rank ft-train run of `name` (300 steps, batch 64). */
function realStepMs(name: string): number {
  const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-step-'));
  fs.rmdirSync(runDir);
  try {
    const result = spawnSync(path.join(root, 'launch', 'ft-run'), ['-n', '1', '--', '--model', path.join(root, 'models', `${name}.json`),
      '--data', path.join(root, 'datasets', 'fashion-mnist'), '--steps', '300', '--batch', String(batch), '--run-dir', runDir], { encoding: 'utf8', timeout: 300_000 });
    if (result.status !== 0) throw new Error(`ft-train run of ${name} failed:\n${result.stderr}`);
    const steps = fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step_ms: number });
    return median(steps.slice(50).map((s) => s.step_ms));
  } finally {
    fs.rmSync(runDir, { recursive: true, force: true });
  }
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
  const real = new Map(models.map((model) => {
    process.stderr.write(`[bench] ${model}: a real 1-rank ft-train run ...\n`);
    return [model, realStepMs(model)];
  }));
  process.stderr.write('[bench] PyTorch ...\n');
  const theirs = pytorch();
  const summary: Record<string, unknown> = {};
  console.log('model     ft-train img/s  GFLOP/s  PyTorch img/s  ratio  kernel ms  real step ms');
  const stepRatios: number[] = [];
  for (const row of rows) {
    const ratio = row.imagesPerS / theirs.get(row.model)!;
    const kernelMs = (1000 * batch) / row.imagesPerS;
    stepRatios.push(real.get(row.model)! / kernelMs);
    summary[`${row.model}_vs_pytorch`] = +ratio.toFixed(3);
    console.log(`${row.model.padEnd(9)} ${row.imagesPerS.toFixed(0).padStart(14)} ${row.gflops.toFixed(2).padStart(8)} ` +
      `${theirs.get(row.model)!.toFixed(0).padStart(14)} ${ratio.toFixed(3).padStart(6)} ${kernelMs.toFixed(2).padStart(10)} ${real.get(row.model)!.toFixed(2).padStart(13)}`);
  }
  console.log(JSON.stringify({
    ...summary, step_vs_kernels_1rank: +Math.max(...stepRatios).toFixed(3), batch, threads: 1,
    models: Object.fromEntries(rows.map((r) => [r.model, {
      images_per_s: +r.imagesPerS.toFixed(1), gflops: +r.gflops.toFixed(2),
      pytorch_images_per_s: +theirs.get(r.model)!.toFixed(1),
      kernel_step_ms: +((1000 * batch) / r.imagesPerS).toFixed(3), real_step_ms_1rank: +real.get(r.model)!.toFixed(3),
    }])),
  }));
}

main();
