// bench/ft-overhead: what fault tolerance costs per step. Runs ft-train on lenet + Fashion-MNIST in
// exact mode, shrink mode and the plain-allreduce baseline (--on-failure none: no agree, no
// shard-ordered sum), alternating rounds so a shared machine's drift hits all three, at 2 and 4
// ranks. Step time = median step_ms over the steps after warm-up; each overhead is the median over
// rounds of that round's ratio, so drift between rounds cancels. Prints a table, then one JSON line:
//   exact_overhead   exact / baseline - 1, worst rank count
//   exact_overhead_2, exact_overhead_4: the same at 2 ranks (target <= 0.03) and 4 (target <= 0.05)
//   shrink_overhead  shrink / baseline - 1, worst rank count (target <= 0.01)
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { trainCommand } from '../src/cli/mpirun';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
const modes = ['none', 'exact', 'shrink'] as const;
const rankCounts = [2, 4];
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const steps = Number(process.env.BENCH_STEPS ?? 200);
const warmup = 20;

/** step_ms of every step after warm-up, from one ft-train run. */
function stepTimes(ranks: number, mode: string, scratch: string): number[] {
  const runDir = path.join(scratch, `${mode}-${ranks}-${Date.now()}`);
  const { command, args, env } = trainCommand(ranks, [
    '--model',
    'models/lenet.json',
    '--data',
    'datasets/fashion-mnist',
    '--run-dir',
    runDir,
    '--steps',
    String(steps),
    '--batch',
    '64',
    '--on-failure',
    mode,
  ]);
  const result = spawnSync(command, args, { env, cwd: root, encoding: 'utf8', timeout: 600_000 });
  if (result.status !== 0) throw new Error(`ft-train ${mode} on ${ranks} ranks failed:\n${result.stdout}\n${result.stderr}`);
  const lines = fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  return lines.map((l) => (JSON.parse(l) as { step_ms: number }).step_ms).slice(warmup);
}

function main(): void {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-overhead-'));
  const rows: {
    ranks: number;
    baseline_ms: number;
    exact_ms: number;
    shrink_ms: number;
    exact_overhead: number;
    shrink_overhead: number;
  }[] = [];
  try {
    for (const ranks of rankCounts) {
      const perRound: Record<string, number[]> = { none: [], exact: [], shrink: [] };
      for (let round = 1; round <= rounds; ++round) {
        process.stderr.write(`[bench] ${ranks} ranks, round ${round}/${rounds}:`);
        for (const mode of modes) {
          process.stderr.write(` ${mode} ...`);
          perRound[mode].push(median(stepTimes(ranks, mode, scratch)));
        }
        process.stderr.write(' done\n');
      }
      const overhead = (mode: string) => median(perRound[mode].map((ms, i) => ms / perRound.none[i] - 1));
      const [baseline, exact, shrink] = modes.map((m) => median(perRound[m]));
      rows.push({
        ranks,
        baseline_ms: baseline,
        exact_ms: exact,
        shrink_ms: shrink,
        exact_overhead: overhead('exact'),
        shrink_overhead: overhead('shrink'),
      });
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(
    `lenet, global batch 64, ${steps} steps x ${rounds} rounds per mode; step time: median over rounds of each run's median after ${warmup} warm-up steps; overhead: median of per-round ratios`,
  );
  console.log('ranks  baseline ms  exact ms  shrink ms  exact overhead  shrink overhead');
  for (const r of rows) {
    console.log(
      `${String(r.ranks).padStart(5)}  ${r.baseline_ms.toFixed(3).padStart(11)}  ${r.exact_ms.toFixed(3).padStart(8)}  ${r.shrink_ms.toFixed(3).padStart(9)}  ${(r.exact_overhead * 100).toFixed(1).padStart(13)}%  ${(r.shrink_overhead * 100).toFixed(1).padStart(14)}%`,
    );
  }
  const round3 = (x: number) => Math.round(x * 1000) / 1000;
  console.log(
    JSON.stringify({
      exact_overhead: round3(Math.max(...rows.map((r) => r.exact_overhead))),
      ...Object.fromEntries(rows.map((r) => [`exact_overhead_${r.ranks}`, round3(r.exact_overhead)])),
      shrink_overhead: round3(Math.max(...rows.map((r) => r.shrink_overhead))),
      by_ranks: Object.fromEntries(
        rows.map((r) => [
          r.ranks,
          {
            baseline_ms: round3(r.baseline_ms),
            exact_ms: round3(r.exact_ms),
            shrink_ms: round3(r.shrink_ms),
            exact_overhead: round3(r.exact_overhead),
            shrink_overhead: round3(r.shrink_overhead),
          },
        ]),
      ),
    }),
  );
}

main();
