// bench/straggler: what --rebalance auto wins back from a slow rank. 2 ranks, --threads 1, S = 8,
// mlp and lenet on Fashion-MNIST; after a warm-up, rank 1 is slowed to 1/F of its speed from
// outside (launch/drill's --slow: SIGSTOP/SIGCONT duty cycling of the real process, 5 ms cycles), once with
// --rebalance off and once with auto, the runs of a round alternating. Per model:
//   healthy_ms: the median step before the slowdown (both runs); slowed_off_ms: the median step
//   once slowed, rebalance off; slowed_auto_ms: the median step with auto once it has settled
//   (from --slow-steps after its last rebalance); ideal_ms = healthy x N / (N - 1 + 1/F), what the
//   step would take with the work spread in proportion to speed; straggler_recovered =
//   (slowed_off - slowed_auto) / (slowed_off - ideal), target >= 0.8; detect_steps: steps from the
//   first slowed step to the rebalance, target <= 5; params_equal: the two runs' bits agree.
// With whole shards the best split of S = 8 at F = 2 is 5 + 3 (rank 1's three take as long as
// six): its step is 1.5 x healthy against the ideal's 1.33, so a perfect rebalance of compute
// alone recovers 0.75; the rest of the step (the sum, the update) is where more can come from.
// Prints a table, then one JSON line.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runDrill } from '../src/cli/fault-drill';
import { median } from '../src/base/median';
import { runRecords, type RunRecords } from './run-records';

const rounds = Number(process.env.BENCH_ROUNDS ?? 1);
const steps = Number(process.env.BENCH_STEPS ?? 240);
const factor = Number(process.env.BENCH_FACTOR ?? 2);
// ms of each SIGSTOP/SIGCONT cycle: short against the step, so that the rank is slow all through it rather than stopped for whole steps
const period = Number(process.env.BENCH_PERIOD ?? 5);
const slowFrom = 60;
const settle = 3; // --slow-steps' default
const ranks = 2;
const models = ['mlp', 'lenet'];

type Run = RunRecords;

async function train(model: string, rebalance: 'off' | 'auto', runDir: string): Promise<Run> {
  const args = [
    ...['--model', `models/${model}.json`, '--data', 'datasets/fashion-mnist', '--run-dir', runDir],
    ...['--steps', String(steps), '--shards', '8', '--threads', '1', '--batch', '256', '--rebalance', rebalance],
  ];
  const outcome = await runDrill(ranks, [], args, [{ rank: 1, step: slowFrom, factor }], period);
  if (!outcome.passed) throw new Error(`${model} --rebalance ${rebalance}: the run failed (mpirun exit ${outcome.code})`);
  return runRecords(runDir);
}

const stepMs = (run: Run, from: number, to = steps): number[] =>
  run.metrics.filter((m) => m.step >= from && m.step < to).map((m) => m.step_ms);

async function main(): Promise<void> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-straggler-'));
  const round3 = (x: number): number => Math.round(x * 1000) / 1000;
  const results: Record<string, Record<string, unknown>> = {};
  try {
    for (const model of models) {
      const healthy: number[] = [];
      const off: number[] = [];
      const auto: number[] = [];
      const detect: number[] = [];
      let equal = true;
      for (let round = 1; round <= rounds; ++round) {
        process.stderr.write(
          `[bench] ${model} round ${round}/${rounds}: rank 1 ${factor}x slower from step ${slowFrom}, --rebalance off ...`,
        );
        const plain = await train(model, 'off', path.join(scratch, `${model}-off-${round}`));
        process.stderr.write(' auto ...');
        const balanced = await train(model, 'auto', path.join(scratch, `${model}-auto-${round}`));
        process.stderr.write(' done\n');
        equal &&= plain.summary.params_sha256 === balanced.summary.params_sha256;
        healthy.push(...stepMs(plain, 10, slowFrom), ...stepMs(balanced, 10, slowFrom));
        // the drill slows the rank once the metrics show step slowFrom: from the step after it
        off.push(...stepMs(plain, slowFrom + 1 + 2 * settle));
        const moves = balanced.events.filter((e) => e.event === 'rebalance' && e.step! > slowFrom);
        if (moves.length === 0) throw new Error(`${model}: --rebalance auto did not move a shard`);
        detect.push(moves[0].step! - (slowFrom + 1));
        auto.push(...stepMs(balanced, moves[moves.length - 1].step! + settle));
      }
      const [h, o, a] = [median(healthy), median(off), median(auto)];
      const ideal = (h * ranks) / (ranks - 1 + 1 / factor);
      results[model] = {
        healthy_ms: round3(h),
        slowed_off_ms: round3(o),
        slowed_auto_ms: round3(a),
        ideal_ms: round3(ideal),
        straggler_recovered: round3((o - a) / (o - ideal)),
        detect_steps: Math.max(...detect),
        params_equal: equal,
      };
      console.log(
        `${model}: healthy ${h.toFixed(2)} ms/step; rank 1 ${factor}x slower: ${o.toFixed(2)} (off), ${a.toFixed(2)} (auto), ideal ${ideal.toFixed(2)}: recovered ${((o - a) / (o - ideal)).toFixed(3)}, found in ${Math.max(...detect)} steps`,
      );
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(JSON.stringify({ ranks, shards: 8, threads: 1, batch: 256, factor, period_ms: period, rounds, ...results }));
}

void main().catch((error: Error) => {
  console.error(`bench/straggler: ${error.message}`);
  process.exitCode = 1;
});
