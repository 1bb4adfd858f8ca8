// bench/redundancy: what sharded optimizer state and its redundancy in peers' memory cost per step,
// and how much faster a lost chunk comes back from memory than from disk. Runs ft-train (AdamW,
// exact mode) with replicated state (the baseline), and sharded state with --redundancy none,
// replicate:2 and ec:2+1, alternating rounds so a shared machine's drift hits all, on lenet and on
// mlp-wide (11.6 M parameters: about 93 MB of AdamW state), at 2 and 4 ranks. Step time = median
// step_ms after warm-up; each overhead is the median over rounds of that round's ratio to the
// baseline. In the same run: ISA-L's encode rate on one core, and the rate of a recovery of a
// killed rank's state from peers' memory (the redundancy-rebuild event: the lost chunk rebuilt and
// the whole state redistributed over the survivors, its redundancy remade) against a plain
// single-core memcpy of the same bytes. Prints a table, then one JSON line:
//   replicate_overhead, ec_overhead          sharded + redundancy / replicated - 1, worst case
//   ec_encode_gbps_per_core                  GB of data encoded per second (ec:2+1, 64 MiB fragments)
//   rebuild_vs_memcpy                        by mode (replicate:2, ec:2+1; 4 ranks, mlp-wide): the whole
//                                            state's bytes per second of the rebuild over memcpy's
//   optimizer_bytes_per_rank                 by mode: the leader's state and redundancy bytes
//   phases                                   per model, rank count and sharded mode: the leader's mean ms
//                                            per step in each part of the sharded update (summary.json's
//                                            sharded_state_phase_ms), medians over rounds; the table too
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ecEncode } from '../src/checkpoint/erasure';
import { trainCommand } from '../src/cli/mpirun';
import { loadSpec } from '../src/nn/spec';
import { Net } from '../src/nn/net';
import { cpu } from '../src/nn/cpu';
import { updatePhases } from '../src/sharding/sharded-state';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
const modes = ['replicated', 'none', 'replicate:2', 'ec:2+1'] as const;
const models = (process.env.BENCH_MODELS ?? 'lenet,mlp-wide').split(',');
const rankCounts = [2, 4];
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const steps = Number(process.env.BENCH_STEPS ?? 60);
const warmup = 10;

interface Run {
  stepMs: number;
  summary: {
    optimizer_state_bytes_per_rank: number;
    redundancy_bytes_per_rank: number;
    sharded_state_phase_ms?: Record<string, number>;
  };
  runDir: string;
}

function modeArgs(mode: string): string[] {
  return mode === 'replicated' ? [] : ['--optimizer-state', 'sharded', '--redundancy', mode];
}

function train(model: string, ranks: number, mode: string, scratch: string, extra: string[] = []): Run {
  const runDir = path.join(scratch, `${model}-${mode}-${ranks}-${Date.now()}`);
  const { command, args, env } = trainCommand(ranks, [
    '--model',
    `models/${model}.json`,
    '--data',
    'datasets/fashion-mnist',
    '--run-dir',
    runDir,
    '--steps',
    String(steps),
    '--batch',
    '64',
    '--shards',
    '4',
    '--optimizer',
    'adamw',
    ...modeArgs(mode),
    ...extra,
  ]);
  const result = spawnSync(command, args, { env, cwd: root, encoding: 'utf8', timeout: 600_000 });
  if (result.status !== 0) throw new Error(`ft-train ${model} ${mode} on ${ranks} ranks failed:\n${result.stdout}\n${result.stderr}`);
  const lines = fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  return {
    stepMs: median(lines.map((l) => (JSON.parse(l) as { step_ms: number }).step_ms).slice(warmup)),
    summary: JSON.parse(fs.readFileSync(path.join(runDir, 'summary.json'), 'utf8')),
    runDir,
  };
}

/** GB of data per second that ec:2+1 encodes on this thread, 64 MiB fragments. */
function encodeRate(): number {
  const bytes = 64 << 20;
  const data = [new Uint8Array(bytes).fill(7), new Uint8Array(bytes).fill(9)];
  const parity = [new Uint8Array(bytes)];
  const times: number[] = [];
  for (let i = 0; i < 7; ++i) {
    const started = performance.now();
    ecEncode(2, 1, data, parity);
    times.push(performance.now() - started);
  }
  return (2 * bytes) / 1e9 / (median(times) / 1000);
}

/** GB per second of one core's memcpy (TypedArray.set) of `bytes`, median of 7. */
function memcpyRate(bytes: number): number {
  const [from, to] = [new Uint8Array(bytes).fill(3), new Uint8Array(bytes)];
  const times: number[] = [];
  for (let i = 0; i < 7; ++i) {
    const started = performance.now();
    to.set(from);
    times.push(performance.now() - started);
  }
  return bytes / 1e9 / (median(times) / 1000);
}

/** A kill at 4 ranks under `mode`: the memory rebuild's rate (the whole state's bytes over its duration) against memcpy's. */
function rebuildRate(model: string, mode: string, scratch: string): { ms: number; bytes: number; gbps: number; memcpyGbps: number } {
  const run = train(model, 4, mode, scratch, ['--drill', `rank=1,step=${steps / 2},phase=update`]);
  const events = fs
    .readFileSync(path.join(run.runDir, 'events.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { event: string; duration_ms: number });
  const ms = events.find((e) => e.event === 'redundancy-rebuild')!.duration_ms;
  fs.rmSync(run.runDir, { recursive: true, force: true });
  const P = new Net(loadSpec(path.join(root, 'models', `${model}.json`)), cpu).params.data.length;
  const bytes = 4 * P * 2; // AdamW's two slots, exp_avg and exp_avg_sq
  return { ms, bytes, gbps: bytes / 1e9 / (ms / 1000), memcpyGbps: memcpyRate(bytes) };
}

/** The phases summary.json names, in the sharded update's order. */
const phaseNames: readonly string[] = updatePhases;

/** Per phase, the median over rounds. */
function medianPhases(rounds: Record<string, number>[]): Record<string, number> {
  return Object.fromEntries(phaseNames.map((p) => [p, median(rounds.map((r) => r[p]))]));
}

function main(): void {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-redundancy-'));
  const rows: {
    model: string;
    ranks: number;
    ms: Record<string, number>;
    overhead: Record<string, number>;
    phases: Record<string, Record<string, number>>;
  }[] = [];
  const bytes: Record<string, { state: number; redundancy: number }> = {};
  const rebuilds: Record<string, ReturnType<typeof rebuildRate>> = {};
  try {
    for (const model of models) {
      for (const ranks of rankCounts) {
        const perRound: Record<string, number[]> = Object.fromEntries(modes.map((m) => [m, []]));
        const phaseRounds: Record<string, Record<string, number>[]> = Object.fromEntries(modes.map((m) => [m, []]));
        for (let round = 1; round <= rounds; ++round) {
          process.stderr.write(`[bench] ${model}, ${ranks} ranks, round ${round}/${rounds}:`);
          for (const mode of modes) {
            process.stderr.write(` ${mode} ...`);
            const run = train(model, ranks, mode, scratch);
            perRound[mode].push(run.stepMs);
            if (run.summary.sharded_state_phase_ms) phaseRounds[mode].push(run.summary.sharded_state_phase_ms);
            if (model === models[models.length - 1] && ranks === 4) {
              bytes[mode] = { state: run.summary.optimizer_state_bytes_per_rank, redundancy: run.summary.redundancy_bytes_per_rank };
            }
            fs.rmSync(run.runDir, { recursive: true, force: true });
          }
          process.stderr.write(' done\n');
        }
        const overhead = (mode: string) => median(perRound[mode].map((ms, i) => ms / perRound.replicated[i] - 1));
        rows.push({
          model,
          ranks,
          ms: Object.fromEntries(modes.map((m) => [m, median(perRound[m])])),
          overhead: Object.fromEntries(modes.map((m) => [m, overhead(m)])),
          phases: Object.fromEntries(modes.slice(1).map((m) => [m, medianPhases(phaseRounds[m])])),
        });
      }
    }
    for (const mode of ['replicate:2', 'ec:2+1']) {
      process.stderr.write(`[bench] rebuild after a kill, ${mode} ...\n`);
      rebuilds[mode] = rebuildRate(models[models.length - 1], mode, scratch);
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  const gbps = encodeRate();
  console.log(
    `AdamW, global batch 64, S = 4, ${steps} steps x ${rounds} rounds per mode; step time: median after ${warmup} warm-up steps; overhead vs replicated state: median of per-round ratios`,
  );
  console.log(
    'model      ranks  ' +
      modes.map((m) => `${m} ms`.padStart(16)).join('') +
      '  ' +
      modes
        .slice(1)
        .map((m) => `${m} +%`.padStart(14))
        .join(''),
  );
  for (const r of rows) {
    console.log(
      `${r.model.padEnd(10)} ${String(r.ranks).padStart(5)}  ${modes.map((m) => r.ms[m].toFixed(2).padStart(16)).join('')}  ${modes
        .slice(1)
        .map((m) => (r.overhead[m] * 100).toFixed(1).padStart(14))
        .join('')}`,
    );
  }
  console.log(`\nthe sharded update's parts, the leader's mean ms per step (median over rounds): ${phaseNames.join(', ')}`);
  console.log('model      ranks  mode           ' + phaseNames.map((p) => p.padStart(11)).join('') + '   replicated step ms');
  for (const r of rows) {
    for (const mode of modes.slice(1)) {
      const cells = phaseNames.map((p) => (r.phases[mode][p] ?? NaN).toFixed(2).padStart(11)).join('');
      console.log(
        `${r.model.padEnd(10)} ${String(r.ranks).padStart(5)}  ${mode.padEnd(13)}  ${cells}   ${r.ms.replicated.toFixed(2).padStart(18)}`,
      );
    }
  }
  for (const [mode, r] of Object.entries(rebuilds)) {
    console.log(
      `rebuild after a kill of rank 1 at 4 ranks (${models[models.length - 1]}, ${mode}): ${(r.bytes / 1e6).toFixed(1)} MB of state in ${r.ms.toFixed(1)} ms = ` +
        `${r.gbps.toFixed(2)} GB/s; one core's memcpy of as many bytes ${r.memcpyGbps.toFixed(2)} GB/s`,
    );
  }
  const round3 = (x: number) => Math.round(x * 1000) / 1000;
  console.log(
    JSON.stringify({
      replicate_overhead: round3(Math.max(...rows.map((r) => r.overhead['replicate:2']))),
      ec_overhead: round3(Math.max(...rows.map((r) => r.overhead['ec:2+1']))),
      ec_encode_gbps_per_core: round3(gbps),
      rebuild_vs_memcpy: Object.fromEntries(Object.entries(rebuilds).map(([mode, r]) => [mode, round3(r.gbps / r.memcpyGbps)])),
      optimizer_bytes_per_rank: bytes,
      by_model: rows.map((r) => ({
        model: r.model,
        ranks: r.ranks,
        step_ms: Object.fromEntries(modes.map((m) => [m, round3(r.ms[m])])),
        overhead: Object.fromEntries(modes.slice(1).map((m) => [m, round3(r.overhead[m])])),
        phases: Object.fromEntries(
          modes.slice(1).map((m) => [m, Object.fromEntries(Object.entries(r.phases[m]).map(([p, ms]) => [p, round3(ms)]))]),
        ),
      })),
    }),
  );
}

main();
