// bench/kernel-level: what pinning the CPU kernels' level costs. Every shipped image model's kernel-only
// training step (forward, backward, SGD update; batch 64, one thread) is timed in a child process
// pinned at the host's level (what --isa auto gives a job of alike hosts) and in one left to choose
// ('native': oneDNN and OpenBLAS pick by the CPU and the environment), the order alternating from
// round to round; per model the median of the rounds' ratios. Last line JSON:
//   level, onednn_isa {pinned, native}, openblas_core {pinned, native},
//   pinned_vs_native (the worst model: pinned step speed / native; 1 = pinning costs nothing), models.
import { spawnSync } from 'node:child_process';
import { median } from '../src/base/median';
import { modelStep, shippedModels } from './model-step';
import type { CpuLevel, KernelSettings } from '../src/nn/backend';
import { cpu } from '../src/nn/cpu';

const batch = 64;
const seconds = Number(process.env.BENCH_SECONDS ?? 0.5);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const models = shippedModels().image;

interface Timing {
  kernels: KernelSettings;
  msPerStep: number;
}

/** In a child: `model`'s step at `level`, warmed up, then timed for `seconds`. */
function timeStep(model: string, level: CpuLevel): Timing {
  cpu.pinLevel(level);
  const { step } = modelStep(model, batch);
  let steps = 0;
  const start = performance.now();
  while (performance.now() - start < seconds * 1000) {
    step();
    steps += 1;
  }
  return { kernels: cpu.kernelSettings(), msPerStep: (performance.now() - start) / steps };
}

function inChild(model: string, level: CpuLevel): Timing {
  const run = spawnSync(process.execPath, [__filename, '--child', model, level], { encoding: 'utf8', timeout: 120_000 });
  if (run.status !== 0) throw new Error(`${model} at ${level}: exit ${run.status}\n${run.stderr}`);
  return JSON.parse(run.stdout) as Timing;
}

function main(): void {
  const level = cpu.hostLevel();
  const ratios: Record<string, number[]> = Object.fromEntries(models.map((m) => [m, []]));
  let settings: Record<'pinned' | 'native', KernelSettings> | undefined;
  for (let round = 0; round < rounds; ++round) {
    for (const model of models) {
      const order: Array<'pinned' | 'native'> = round % 2 === 0 ? ['pinned', 'native'] : ['native', 'pinned'];
      const timed = Object.fromEntries(order.map((side) => [side, inChild(model, side === 'pinned' ? level : 'native')])) as Record<
        'pinned' | 'native',
        Timing
      >;
      settings ??= { pinned: timed.pinned.kernels, native: timed.native.kernels };
      ratios[model].push(timed.native.msPerStep / timed.pinned.msPerStep);
      console.error(
        `round ${round + 1}/${rounds} ${model}: pinned ${timed.pinned.msPerStep.toFixed(2)} ms, native ${timed.native.msPerStep.toFixed(2)} ms`,
      );
    }
  }
  const perModel = Object.fromEntries(models.map((m) => [m, Number(median(ratios[m]).toFixed(3))]));
  console.log(
    JSON.stringify({
      level,
      onednn_isa: { pinned: settings!.pinned.onednnIsa, native: settings!.native.onednnIsa },
      openblas_core: { pinned: settings!.pinned.openblasCore, native: settings!.native.openblasCore },
      pinned_vs_native: Math.min(...Object.values(perModel)),
      models: perModel,
    }),
  );
}

if (process.argv[2] === '--child') {
  process.stdout.write(JSON.stringify(timeStep(process.argv[3], process.argv[4] as CpuLevel)));
} else {
  main();
}
