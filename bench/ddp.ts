// bench/ddp: ft-train's exact mode against PyTorch DistributedDataParallel (gloo backend, Debian's
// python3-torch) at 2 ranks, 1 thread per rank, lenet and mlp at global batch 64 and 256, SGD with
// momentum on Fashion-MNIST. Per configuration the two alternate over rounds, so a shared machine's
// drift hits both. ft-train's step: the median step_ms after warm-up of a real 2-rank run
// (--on-failure exact); PyTorch's: bench/pytorch_ddp.py's median step (batch gather, forward,
// backward with DDP's allreduce, update) after as many warm-up steps. Prints a table, then one JSON
// line:
//   min_vs_ddp  worst configuration's median over rounds of DDP step time / ft-train step time
//               (target >= 1.5)
//   configs     per configuration: both step times (medians over rounds) and vs_ddp
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { trainCommand } from '../src/cli/mpirun';
import { debianSource } from '../datasets/fashion-mnist';
import { cpu } from '../src/nn/cpu';
import { modelSpecJson } from '../src/nn/export';
import { Net } from '../src/nn/net';
import { loadSpec } from '../src/nn/spec';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
const ranks = 2;
const models = ['lenet', 'mlp'];
const batches = [64, 256];
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const steps = Number(process.env.BENCH_STEPS ?? 100);
const warmup = 20;
const python = process.env.BENCH_PYTHON ?? '/usr/bin/python3';

/** Median step_ms after warm-up of a real 2-rank ft-train run in exact mode. */
function oursMs(model: string, batch: number, scratch: string): number {
  const runDir = path.join(scratch, `${model}-${batch}-${Date.now()}`);
  const { command, args, env } = trainCommand(ranks, [
    '--model',
    path.join('models', `${model}.json`),
    '--data',
    path.join('datasets', 'fashion-mnist'),
    '--run-dir',
    runDir,
    '--steps',
    String(steps),
    '--batch',
    String(batch),
    '--threads',
    '1',
    '--on-failure',
    'exact',
  ]);
  const result = spawnSync(command, args, { env, cwd: root, encoding: 'utf8', timeout: 600_000 });
  if (result.status !== 0) throw new Error(`ft-train ${model} batch ${batch} failed:\n${result.stdout}\n${result.stderr}`);
  const lines = fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  fs.rmSync(runDir, { recursive: true, force: true });
  return median(lines.map((l) => (JSON.parse(l) as { step_ms: number }).step_ms).slice(warmup));
}

/** Median step of PyTorch DDP on the same model spec (every default filled in, as ft-train exports it). */
function theirsMs(specFile: string, batch: number): number {
  const result = spawnSync(
    python,
    [path.join(root, 'bench', 'pytorch_ddp.py'), specFile, String(batch), String(steps), String(warmup), debianSource],
    { encoding: 'utf8', env: { ...process.env, OMP_NUM_THREADS: '1' }, timeout: 600_000 },
  );
  if (result.status !== 0) throw new Error(`PyTorch DDP run failed (${python}):\n${result.stderr}`);
  const last = result.stdout.trim().split('\n').pop()!;
  return (JSON.parse(last) as { step_ms: number }).step_ms;
}

function main(): void {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-ddp-'));
  const rows: { model: string; batch: number; ftTrainMs: number; ddpMs: number; vsDdp: number }[] = [];
  try {
    for (const model of models) {
      const specFile = path.join(scratch, `${model}.json`);
      fs.writeFileSync(specFile, modelSpecJson(new Net(loadSpec(path.join(root, 'models', `${model}.json`)), cpu)));
      for (const batch of batches) {
        const ours: number[] = [];
        const theirs: number[] = [];
        for (let round = 1; round <= rounds; ++round) {
          process.stderr.write(`[bench] ${model} batch ${batch}, round ${round}/${rounds}:`);
          // who goes first alternates too, so that neither always runs right after the other
          const order = round % 2 ? ['ft-train', 'ddp'] : ['ddp', 'ft-train'];
          for (const side of order) {
            process.stderr.write(` ${side} ...`);
            if (side === 'ft-train') ours.push(oursMs(model, batch, scratch));
            else theirs.push(theirsMs(specFile, batch));
          }
          process.stderr.write(' done\n');
        }
        rows.push({ model, batch, ftTrainMs: median(ours), ddpMs: median(theirs), vsDdp: median(ours.map((ms, i) => theirs[i] / ms)) });
      }
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(
    `${ranks} ranks, 1 thread each, ${steps} steps x ${rounds} rounds per side; step time: median over rounds of each run's median after ${warmup} warm-up steps; vs DDP: median of per-round ratios`,
  );
  console.log('model  global batch  ft-train ms  DDP ms  DDP / ft-train');
  for (const r of rows) {
    console.log(
      `${r.model.padEnd(5)}  ${String(r.batch).padStart(12)}  ${r.ftTrainMs.toFixed(3).padStart(11)}  ${r.ddpMs.toFixed(3).padStart(6)}  ${r.vsDdp.toFixed(3).padStart(14)}`,
    );
  }
  const round3 = (x: number) => Math.round(x * 1000) / 1000;
  console.log(
    JSON.stringify({
      min_vs_ddp: round3(Math.min(...rows.map((r) => r.vsDdp))),
      ranks,
      threads: 1,
      configs: Object.fromEntries(
        rows.map((r) => [
          `${r.model}_${r.batch}`,
          { ft_train_step_ms: round3(r.ftTrainMs), ddp_step_ms: round3(r.ddpMs), vs_ddp: round3(r.vsDdp) },
        ]),
      ),
    }),
  );
}

main();
