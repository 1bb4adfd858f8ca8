// bench/checkpoint: what a JIT checkpoint costs. ft-train runs lenet (3.5 MB of state) and a
// synthetic model of about 100 MB of state (parameters + momentum: a 784 -> 15,900 -> 10
// perceptron) at 2 ranks (one survivor writes everything) and 4 (three survivors: lenet's small
// replicated state is written by one of them, the 100 MB one in three parallel stripes); the highest
// rank is killed at step 4 and the survivors write the JIT checkpoint. Its duration is the leader's
// 'checkpoint' event: stripes written in parallel over the spare file the leader readied at start
// (src/checkpoint/checkpoint.ts) and made durable, the manifest written beside them, the staging
// directory renamed in. Each drill is followed by the disk's sequential time for as many bytes,
// measured in the same round: the faster of a buffered write + fsync of a new file (8 MiB writes,
// from one process) and an O_DIRECT write + fsync of one (the addon's FileWriter, one part); over
// the spare's blocks the checkpoint can beat it. 5 rounds; a ratio is the median of the
// per-round ratios. Prints a table, then one JSON line:
//   jit_write_vs_disk_large  checkpoint time / disk time at 100 MB, worst over world sizes (target <= 1.2)
//   jit_fixed_cost_ms        lenet's checkpoint time less its bytes at the disk's bandwidth (the 100 MB
//                            disk time of the same world size), worst over world sizes (target <= 3)
//   jit_write_vs_buffered_write the checkpoint time against the buffered write alone (which gets
//                            fresh page-cache pages, slow on this kind of VM), worst case
// and the steady-state cost per step of periodic checkpointing at the optimal frequency
// c* = sqrt(N f / 2o) for a stated failure rate f (JIT's steady-state cost is zero).
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { newStripeWriter } from '../src/checkpoint/checkpoint';
import { trainCommand } from '../src/cli/mpirun';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
const scratch = path.join(root, 'bench', 'out', 'checkpoint');
const rankCounts = [2, 4];
const rounds = 5;
/** stated failure rate: one failure per rank per day */
const failuresPerRankPerSecond = 1 / 86400;

const bigModel = {
  name: 'mlp-100mb',
  input: [1, 28, 28],
  classes: 10,
  layers: [
    { type: 'flatten', name: 'flatten' },
    { type: 'linear', name: 'fc1', outputs: 15900 },
    { type: 'relu', name: 'relu1' },
    { type: 'linear', name: 'fc2', outputs: 10 },
  ],
};

/** Milliseconds to write and fsync `bytes` sequentially from one process through the page cache, in 8 MiB writes. */
function bufferedWrite(bytes: number): number {
  const file = path.join(scratch, 'bandwidth.bin');
  const chunk = Buffer.alloc(8 << 20, 0x5a);
  const start = performance.now();
  const fd = fs.openSync(file, 'w');
  for (let done = 0; done < bytes; done += chunk.length) fs.writeSync(fd, chunk, 0, Math.min(chunk.length, bytes - done));
  fs.fsyncSync(fd);
  fs.closeSync(fd);
  const ms = performance.now() - start;
  fs.rmSync(file);
  return ms;
}

const directWriter = newStripeWriter();

/** Milliseconds to write and fsync `bytes` straight to the disk (O_DIRECT) from one process. */
async function directWrite(bytes: Uint8Array): Promise<number> {
  const file = path.join(scratch, 'bandwidth.bin');
  const start = performance.now();
  await directWriter.write(file, bytes.length, [{ at: 0, bytes }]);
  const ms = performance.now() - start;
  fs.rmSync(file);
  return ms;
}

/** One drill: the JIT checkpoint's bytes and duration, and the median step time before the kill. */
function jitCheckpoint(model: string, ranks: number, batch: number): { bytes: number; ms: number; stepMs: number } {
  const runDir = path.join(scratch, `run-${path.basename(model, '.json')}-${ranks}-${Date.now()}`);
  const { command, args, env } = trainCommand(ranks, [
    '--model',
    model,
    '--data',
    'datasets/fashion-mnist',
    '--run-dir',
    runDir,
    '--steps',
    '8',
    '--batch',
    String(batch),
    '--drill',
    `rank=${ranks - 1},step=4`,
  ]);
  const result = spawnSync(command, args, { env, cwd: root, encoding: 'utf8', timeout: 600_000 });
  if (result.status !== 0) throw new Error(`ft-train ${model} on ${ranks} ranks failed:\n${result.stdout}\n${result.stderr}`);
  const lines = (file: string) =>
    fs
      .readFileSync(path.join(runDir, file), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
  const event = lines('events.jsonl').find((e: { event: string }) => e.event === 'checkpoint');
  const stepMs = median(
    lines('metrics.jsonl')
      .slice(1, 4)
      .map((m: { step_ms: number }) => m.step_ms),
  );
  fs.rmSync(runDir, { recursive: true, force: true });
  return { bytes: event.bytes, ms: event.duration_ms, stepMs };
}

interface Row {
  model: string;
  ranks: number;
  bytes: number;
  ms: number;
  diskMs: number;
  bufferedMs: number;
  ratio: number;
  vsFirst: number;
  stepMs: number;
}

async function main(): Promise<void> {
  fs.mkdirSync(scratch, { recursive: true });
  const bigSpec = path.join(scratch, 'mlp-100mb.json');
  fs.writeFileSync(bigSpec, JSON.stringify(bigModel));
  const rows: Row[] = [];
  try {
    for (const [model, batch] of [
      ['models/lenet.json', 64],
      [bigSpec, 16],
    ] as const) {
      for (const ranks of rankCounts) {
        process.stderr.write(
          `[bench] ${path.basename(model)} on ${ranks} ranks, ${rounds} rounds of a JIT checkpoint and sequential writes:`,
        );
        const measured: { jit: ReturnType<typeof jitCheckpoint>; buffered: number; direct: number }[] = [];
        let bytes = new Uint8Array(0);
        for (let round = 0; round < rounds; round++) {
          const jit = jitCheckpoint(model, ranks, batch);
          if (bytes.length !== jit.bytes) bytes = new Uint8Array(jit.bytes).fill(0x5a);
          measured.push({ jit, buffered: bufferedWrite(jit.bytes), direct: await directWrite(bytes) });
          process.stderr.write(` ${round + 1}`);
        }
        process.stderr.write('\n');
        const disk = measured.map((m) => Math.min(m.buffered, m.direct));
        rows.push({
          model: path.basename(model, '.json'),
          ranks,
          bytes: measured[0].jit.bytes,
          ms: median(measured.map((m) => m.jit.ms)),
          diskMs: median(disk),
          bufferedMs: median(measured.map((m) => m.buffered)),
          ratio: median(measured.map((m, i) => m.jit.ms / disk[i])),
          vsFirst: median(measured.map((m) => m.jit.ms / m.buffered)),
          stepMs: median(measured.map((m) => m.jit.stepMs)),
        });
      }
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log('model       ranks  state MB  JIT write ms  disk ms (buffered)  ratio  step ms  periodic c* interval  periodic cost/step');
  const periodic: Record<string, unknown> = {};
  for (const r of rows) {
    // c* = sqrt(N f / 2o) checkpoints per second, o = one checkpoint's cost; steady-state cost per second
    // is o c* (writing) + N f / (2 c*) (work lost to failures) = sqrt(2 N f o)
    const o = r.ms / 1000;
    const rate = r.ranks * failuresPerRankPerSecond;
    const cStar = Math.sqrt(rate / (2 * o));
    const costPerStepMs = Math.sqrt(2 * rate * o) * r.stepMs;
    periodic[`${r.model}_${r.ranks}`] = {
      interval_s: Math.round(1 / cStar),
      cost_per_step_ms: Number(costPerStepMs.toFixed(5)),
      jit_cost_per_step_ms: 0,
    };
    console.log(
      `${r.model.padEnd(10)}  ${String(r.ranks).padStart(5)}  ${(r.bytes / 1e6).toFixed(1).padStart(8)}  ${r.ms.toFixed(1).padStart(12)}  ${r.diskMs.toFixed(1).padStart(7)} (${r.bufferedMs.toFixed(0).padStart(8)})  ${r.ratio.toFixed(2).padStart(5)}  ${r.stepMs.toFixed(1).padStart(7)}  ${(1 / cStar).toFixed(0).padStart(18)} s  ${costPerStepMs.toFixed(5).padStart(15)} ms`,
    );
  }
  console.log(
    `failure rate f = 1 per rank per day; periodic cost per step = sqrt(2 N f o) x step time; JIT: 0 in steady state (one step redone per failure)`,
  );
  const large = rows.filter((r) => r.model === bigModel.name);
  // lenet's time less its bytes at the bandwidth of the same world size's 100 MB disk time
  const fixed = rows
    .filter((r) => r.model === 'lenet')
    .map((r) => {
      const big = large.find((l) => l.ranks === r.ranks)!;
      return r.ms - (r.bytes * big.diskMs) / big.bytes;
    });
  console.log(
    JSON.stringify({
      jit_write_vs_disk_large: Number(Math.max(...large.map((r) => r.ratio)).toFixed(3)),
      jit_fixed_cost_ms: Number(Math.max(...fixed).toFixed(2)),
      jit_write_vs_buffered_write: Number(Math.max(...rows.map((r) => r.vsFirst)).toFixed(3)),
      by_run: Object.fromEntries(
        rows.map((r) => [
          `${r.model}_${r.ranks}`,
          {
            bytes: r.bytes,
            jit_ms: Number(r.ms.toFixed(1)),
            disk_ms: Number(r.diskMs.toFixed(1)),
            buffered_write_ms: Number(r.bufferedMs.toFixed(1)),
            ratio: Number(r.ratio.toFixed(3)),
          },
        ]),
      ),
      periodic_at_optimum: periodic,
    }),
  );
}

void main();
