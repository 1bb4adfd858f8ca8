// bench/allreduce: the binding's allreduce against a raw C MPI_Allreduce on the same Open MPI,
// 4 KiB to 64 MiB, at 2 and 4 ranks. Prints a table, then one JSON line:
//   min_ratio_ge_4mib  lowest raw time / binding time over sizes >= 4 MiB (target >= 0.95)
//   overhead_us        binding - raw latency per operation at 4 KiB, median over rounds of each
//                      round's difference (drift between rounds cancels), worst rank count
//                      (target <= 25)
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { mpirunCommand } from '../src/cli/mpirun';
import { compileMpiC } from './mpi-c';
import { median } from '../src/base/median';

const sizes = [4, 16, 64, 256, 1024, 4096, 16384, 65536].map((kib) => kib * 1024);
const rankCounts = [2, 4];
const reps = 5;
// Raw and binding runs alternate this many times, so that drift of a shared machine hits both.
const rounds = 5;
// Enough operations per timed round to dwarf the timer, bounded for the large sizes.
const iters = (bytes: number): number => Math.max(5, Math.min(2000, Math.floor((32 << 20) / bytes)));

interface Line {
  impl: 'raw' | 'binding';
  ranks: number;
  bytes: number;
  us: number[];
}

function run(ranks: number, program: string[]): Line[] {
  const { command, args, env } = mpirunCommand({ ranks, program });
  const result = spawnSync(command, args, { env, encoding: 'utf8', timeout: 300_000 });
  if (result.status !== 0) throw new Error(`${program.join(' ')} on ${ranks} ranks failed:\n${result.stderr}`);
  return result.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line);
}

function main(): void {
  const raw = compileMpiC('raw_allreduce');
  const plan = [String(reps), ...sizes.flatMap((b) => [String(b), String(iters(b))])];
  const worker = path.join(__dirname, 'allreduce-worker.js');
  const rows: Array<{ ranks: number; bytes: number; raw_us: number; binding_us: number; ratio: number }> = [];
  const overheads: Record<number, number> = {};
  for (const ranks of rankCounts) {
    const rawLines: Line[] = [];
    const bindingLines: Line[] = [];
    for (let round = 1; round <= rounds; ++round) {
      process.stderr.write(`[bench] ${ranks} ranks, round ${round}/${rounds}: raw C ...`);
      rawLines.push(...run(ranks, [raw, ...plan]));
      process.stderr.write(' binding ...');
      bindingLines.push(...run(ranks, [process.execPath, worker, ...plan]));
      process.stderr.write(' done\n');
    }
    const timesAt = (lines: Line[], bytes: number): number[] => lines.filter((l) => l.bytes === bytes).flatMap((l) => l.us);
    // one line per size per round, in round order
    const roundMedians = (lines: Line[]): number[] => lines.filter((l) => l.bytes === 4096).map((l) => median(l.us));
    const rawRounds = roundMedians(rawLines);
    overheads[ranks] = median(roundMedians(bindingLines).map((us, i) => us - rawRounds[i]));
    for (const bytes of sizes) {
      const r = median(timesAt(rawLines, bytes));
      const b = median(timesAt(bindingLines, bytes));
      rows.push({ ranks, bytes, raw_us: +r.toFixed(2), binding_us: +b.toFixed(2), ratio: +(r / b).toFixed(3) });
    }
  }
  console.log('ranks      bytes     raw_us  binding_us  raw/binding');
  for (const row of rows) {
    console.log(
      `${String(row.ranks).padStart(5)} ${String(row.bytes).padStart(10)} ${row.raw_us.toFixed(2).padStart(10)} ` +
        `${row.binding_us.toFixed(2).padStart(11)} ${row.ratio.toFixed(3).padStart(12)}`,
    );
  }
  const large = rows.filter((r) => r.bytes >= 4 << 20);
  console.log(
    JSON.stringify({
      min_ratio_ge_4mib: Math.min(...large.map((r) => r.ratio)),
      overhead_us: +Math.max(...Object.values(overheads)).toFixed(2),
      overhead_us_by_ranks: Object.fromEntries(Object.entries(overheads).map(([ranks, us]) => [ranks, +us.toFixed(2)])),
      rows,
    }),
  );
}

main();
