// bench/sdc: the check for silent data corruption (--verify-every), on lenet + Fashion-MNIST.
// - Overhead: 2 ranks, --threads 1, the default K. Within each run, checked and unchecked steps
//   alternate: a check's cost is its step's step_ms less the median of the 10 unchecked steps around
//   it, and verify_overhead is the mean check cost over K median steps. The drift between runs on a
//   shared machine is larger than that (seen here: +-5%), so the runs with K = 0, alternating with
//   the checked ones, are reported beside it (run_ratio_overhead), not used for it.
// - Detection and repair: 3 ranks, a faulty core (--drill action=corrupt) on rank 1 from a step
//   between checks, at compute (a gradient) and at update (the parameters). Steps from the first
//   corrupted one to the check that names the rank, and the repair: from the corruption event to
//   the commit of the first replayed step, less that step's own step_ms.
// - The chance that a one-off flip of a gradient is caught: the share of (rank, step) where such a
//   flip lands on the step and shard the rotation recomputes, counted over the real rotation
//   (protocol/verification.ts) for whole rotation periods.
// Prints a table, then one JSON line:
//   verify_overhead (target <= 0.02), corruption_detect_steps (target <= K), corruption_repair_ms,
//   and the details behind them.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultVerifyEvery } from '../src/api/train-settings';
import { trainCommand } from '../src/cli/mpirun';
import { ShardMap } from '../src/data/shard-map';
import { spotAssignments } from '../src/protocol/verification';
import type { EventRecord, StepRecord } from '../src/run/records';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const steps = Number(process.env.BENCH_STEPS ?? 4 * defaultVerifyEvery);
const warmup = 20;
const K = defaultVerifyEvery;

interface RunFiles {
  metrics: StepRecord[];
  events: EventRecord[];
}

function train(ranks: number, scratch: string, name: string, extra: string[]): RunFiles {
  const runDir = path.join(scratch, name);
  const { command, args, env } = trainCommand(ranks, [
    ...['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--run-dir', runDir, '--batch', '64', '--threads', '1'],
    ...extra,
  ]);
  const result = spawnSync(command, args, { env, cwd: root, encoding: 'utf8', timeout: 600_000 });
  if (result.status !== 0) throw new Error(`ft-train ${extra.join(' ')} on ${ranks} ranks failed:\n${result.stdout}\n${result.stderr}`);
  const read = <T>(file: string): T[] =>
    fs
      .readFileSync(path.join(runDir, file), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as T);
  return { metrics: read<StepRecord>('metrics.jsonl'), events: read<EventRecord>('events.jsonl') };
}

/** What each check after warm-up added to its step: its step_ms less the median of the 10 unchecked steps around it. */
function checkCosts(run: RunFiles): { extra: number[]; step: number } {
  const ms = new Map(run.metrics.map((m) => [m.step, m.step_ms]));
  // (the last step is checked too)
  const unchecked = (from: number, to: number) =>
    run.metrics.filter((m) => m.step >= from && m.step <= to && m.step % K !== 0 && m.step !== steps - 1).map((m) => m.step_ms);
  const extra: number[] = [];
  for (let step = K; step < steps; step += K) if (step >= warmup) extra.push(ms.get(step)! - median(unchecked(step - 5, step + 5)));
  return { extra, step: median(unchecked(warmup, steps)) };
}

/** The sum of step_ms after warm-up. */
const cost = (run: RunFiles): number => run.metrics.filter((m) => m.step >= warmup).reduce((sum, m) => sum + m.step_ms, 0);

/** Share of (rank, step) where a one-off flip of the rank's first computed gradient lands on the check's recomputed shard. */
function flipCaughtShare(ranks: number, shards: number): number {
  const map = ShardMap.initial(
    shards,
    Array.from({ length: ranks }, (_, r) => r),
  );
  const period = K * (ranks - 1) * shards;
  let caught = 0;
  for (let step = 0; step < period; step += K) {
    for (const { owner, shard } of spotAssignments(map, step / K)) if (shard === map.shardsOf(owner)[0]) caught++;
  }
  return caught / (period * ranks);
}

function main(): void {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-sdc-'));
  const ratios: number[] = [];
  const extra: number[] = [];
  const medianSteps: number[] = [];
  const checked: number[] = [];
  const unchecked: number[] = [];
  const faults: { phase: string; from: number; check: number; detect_steps: number; rolled_back: number; repair_ms: number }[] = [];
  try {
    for (let round = 1; round <= rounds; ++round) {
      process.stderr.write(`[bench] overhead round ${round}/${rounds}: K = ${K} ...`);
      const run = train(2, scratch, `on-${round}`, ['--steps', String(steps), '--verify-every', String(K)]);
      const costs = checkCosts(run);
      extra.push(...costs.extra);
      medianSteps.push(costs.step);
      const on = cost(run);
      process.stderr.write(' K = 0 ...');
      const off = cost(train(2, scratch, `off-${round}`, ['--steps', String(steps), '--verify-every', '0']));
      process.stderr.write(' done\n');
      checked.push(on / (steps - warmup));
      unchecked.push(off / (steps - warmup));
      ratios.push(on / off - 1);
    }
    for (const [phase, from] of [
      ['compute', Math.round(1.3 * K)],
      ['update', Math.round(2.5 * K)],
    ] as const) {
      process.stderr.write(`[bench] a faulty core on rank 1 at ${phase} from step ${from} ...\n`);
      const run = train(3, scratch, `corrupt-${phase}`, [
        ...['--steps', String(steps), '--verify-every', String(K)],
        ...['--drill', `rank=1,step=${from},phase=${phase},action=corrupt`],
      ]);
      const event = run.events.find((e) => e.event === 'corruption');
      if (!event || !Array.isArray(event.ranks) || event.ranks[0] !== 1)
        throw new Error(`the faulty core at ${phase} was not named: ${JSON.stringify(event)}`);
      const to = event.step! - (event.rolled_back as number);
      const eventAt = run.metrics.findIndex((m) => m.time >= event.time);
      const replayed = run.metrics.slice(eventAt).find((m) => m.step === to)!;
      faults.push({
        phase,
        from,
        check: event.step!,
        detect_steps: event.step! - from,
        rolled_back: event.rolled_back as number,
        repair_ms: replayed.time - event.time - replayed.step_ms,
      });
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  const round3 = (x: number) => Math.round(x * 1000) / 1000;
  const checkMs = extra.reduce((a, b) => a + b, 0) / extra.length;
  const overhead = checkMs / (K * median(medianSteps));
  const share = { n4_s4: flipCaughtShare(4, 4), n4_s16: flipCaughtShare(4, 16), n2_s2: flipCaughtShare(2, 2) };
  console.log(
    `lenet, global batch 64, --threads 1; overhead: 2 ranks, ${steps} steps x ${rounds} rounds, K = ${K} (and K = 0 alternating), after ${warmup} warm-up steps`,
  );
  console.log(
    `a check adds ${checkMs.toFixed(2)} ms to its step (mean of ${extra.length}) to ${median(medianSteps).toFixed(2)} ms per step: overhead ${(overhead * 100).toFixed(2)}% at K = ${K}`,
  );
  console.log(
    `mean step ms of whole runs: checked ${median(checked).toFixed(3)}, unchecked ${median(unchecked).toFixed(3)}: ${(median(ratios) * 100).toFixed(2)}% (rounds: ${ratios.map((r) => (r * 100).toFixed(2)).join(', ')}%)`,
  );
  for (const f of faults)
    console.log(
      `faulty core at ${f.phase} from step ${f.from}: named at the check of step ${f.check} (${f.detect_steps} steps), rolled back ${f.rolled_back}, repaired in ${f.repair_ms.toFixed(1)} ms`,
    );
  console.log(
    `a one-off gradient flip is caught with probability ${share.n4_s4} (4 ranks, 4 shards), ${share.n4_s16} (4, 16), ${share.n2_s2} (2, 2): N/(S*K)`,
  );
  console.log(
    JSON.stringify({
      verify_every: K,
      verify_overhead: Math.round(overhead * 10000) / 10000,
      check_ms: round3(checkMs),
      step_ms: round3(median(medianSteps)),
      run_ratio_overhead: round3(median(ratios)),
      run_ratio_overhead_rounds: ratios.map(round3),
      checked_step_ms: round3(median(checked)),
      unchecked_step_ms: round3(median(unchecked)),
      corruption_detect_steps: Math.max(...faults.map((f) => f.detect_steps)),
      corruption_repair_ms: round3(Math.max(...faults.map((f) => f.repair_ms))),
      faults: faults.map((f) => ({ ...f, repair_ms: round3(f.repair_ms) })),
      gradient_flip_caught_probability: share,
    }),
  );
}

main();
