// bench/recovery: how long a kill -9 costs. At 2, 4 and 8 ranks, launch/drill runs ft-train (lenet,
// Fashion-MNIST, exact mode) and kill -9s the highest rank from outside once step K is committed;
// the time from the kill to the first step committed on the repaired world is taken from the
// drill's record and the metrics, with the breakdown from events.jsonl; the JIT checkpoint the
// survivors write on the way is counted apart (checkpoint_ms). In the same run, a C
// program (bench/raw_recovery.c) does the same repair with nothing around it: the raw ULFM floor.
// Prints a table, then one JSON line with kill_to_step_ms_<N> (median of the rounds; target for 4
// ranks <= 250), raw_floor_ms_<N> and breakdown_<N>.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { mpirunCommand } from '../src/cli/mpirun';
import { compileMpiC } from './mpi-c';
import { median } from './median';

const root = path.resolve(__dirname, '..', '..');
const rankCounts = [2, 4, 8];
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const killAfter = 30;
const steps = 80;
const lenetParams = 431080;

interface Breakdown {
  /** without the JIT checkpoint's write, which is counted apart */
  kill_to_step_ms: number;
  checkpoint_ms: number;
  detect_ms: number;
  revoke_shrink_ms: number;
  agree_ms: number;
  readback_ms: number;
  retry_ms: number;
}

function jsonLines<T>(text: string): T[] {
  return text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as T);
}

function trainerRecovery(ranks: number, scratch: string): Breakdown {
  const runDir = path.join(scratch, `drill-${ranks}-${Date.now()}`);
  const victim = ranks - 1;
  const result = spawnSync(process.execPath, [path.join(root, 'launch', 'drill'), '-n', String(ranks), '--kill', `${victim}@${killAfter}`, '--',
    '--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--run-dir', runDir, '--steps', String(steps)], { cwd: root, encoding: 'utf8', timeout: 600_000 });
  if (result.status !== 0) throw new Error(`drill on ${ranks} ranks failed:\n${result.stdout}\n${result.stderr}`);
  const kill = (JSON.parse(fs.readFileSync(path.join(runDir, 'drill.json'), 'utf8')) as { kills: { time: number }[] }).kills[0];
  const metrics = jsonLines<{ world: number; time: number }>(fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8'));
  const events = jsonLines<{ event: string; time: number; duration_ms?: number }>(fs.readFileSync(path.join(runDir, 'events.jsonl'), 'utf8'));
  const first = metrics.find((m) => m.world < ranks)!;
  const event = (name: string) => events.find((e) => e.event === name && e.time >= kill.time - 1)!;
  const checkpointMs = event('checkpoint')?.duration_ms ?? 0;
  return {
    kill_to_step_ms: first.time - kill.time - checkpointMs,
    checkpoint_ms: checkpointMs,
    detect_ms: event('failure').time - kill.time,
    revoke_shrink_ms: event('revoke+shrink').duration_ms!,
    agree_ms: event('agree').duration_ms!,
    readback_ms: event('readback').duration_ms!,
    retry_ms: event('retry')?.duration_ms ?? 0,
  };
}

function rawFloor(program: string, ranks: number): number {
  const { command, args, env } = mpirunCommand({ ranks, program: [program, String(lenetParams + 1), String(steps), String(ranks - 1), String(killAfter)] });
  // as the addon does under ULFM: without it, survivors now and then hang in MPI_Finalize after a kill
  const result = spawnSync(command, args, { env: { ...env, OMPI_MCA_async_mpi_finalize: '1' }, encoding: 'utf8', timeout: 120_000 });
  if (result.status !== 0) throw new Error(`raw_recovery on ${ranks} ranks failed (exit ${result.status}, ${result.error?.message ?? 'no error'}):\n${result.stderr}`);
  const lines = jsonLines<{ event: string; time: number }>(result.stdout);
  return lines.find((l) => l.event === 'first_after')!.time - lines.find((l) => l.event === 'kill')!.time;
}

function main(): void {
  const floorProgram = compileMpiC('raw_recovery');
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-recovery-'));
  const out: Record<string, unknown> = {};
  const table: string[] = [];
  try {
    for (const ranks of rankCounts) {
      const runs: Breakdown[] = [];
      const floors: number[] = [];
      for (let round = 1; round <= rounds; ++round) {
        process.stderr.write(`[bench] ${ranks} ranks, round ${round}/${rounds}: ft-train drill ...`);
        runs.push(trainerRecovery(ranks, scratch));
        process.stderr.write(' raw C ...');
        floors.push(rawFloor(floorProgram, ranks));
        process.stderr.write(' done\n');
      }
      const breakdown = Object.fromEntries(Object.keys(runs[0]).map((k) => [k, Math.round(median(runs.map((r) => r[k as keyof Breakdown])) * 10) / 10])) as unknown as Breakdown;
      const floor = Math.round(median(floors) * 10) / 10;
      out[`kill_to_step_ms_${ranks}`] = breakdown.kill_to_step_ms;
      out[`raw_floor_ms_${ranks}`] = floor;
      out[`breakdown_${ranks}`] = breakdown;
      table.push(`${String(ranks).padStart(5)}  ${breakdown.kill_to_step_ms.toFixed(1).padStart(13)}  ${floor.toFixed(1).padStart(8)}  ${breakdown.detect_ms.toFixed(1).padStart(9)}  ${breakdown.revoke_shrink_ms.toFixed(2).padStart(13)}  ${breakdown.agree_ms.toFixed(2).padStart(8)}  ${breakdown.readback_ms.toFixed(1).padStart(11)}  ${breakdown.retry_ms.toFixed(1).padStart(8)}  ${breakdown.checkpoint_ms.toFixed(1).padStart(13)}`);
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(`lenet + Fashion-MNIST, exact mode, kill -9 of the highest rank after step ${killAfter}; medians of ${rounds} rounds (ms)`);
  console.log('ranks  kill->step ms  raw C ms  detect ms  revoke+shrink  agree ms  readback ms  retry ms  checkpoint ms');
  for (const line of table) console.log(line);
  console.log(JSON.stringify(out));
}

main();
