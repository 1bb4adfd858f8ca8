// bench/recovery: how long a kill -9 and a hang cost. At 2, 4 and 8 ranks, launch/drill runs
// ft-train (lenet, Fashion-MNIST, exact mode) and kill -9s the highest rank from outside once step K
// is committed; the time from the kill to the first step committed on the repaired world is taken
// from the drill's record and the metrics, with the breakdown from events.jsonl (readback: what the
// retried step needs, read before it; the rest of the lost shard loads in the background); the JIT
// checkpoint the survivors write on the way is counted apart (checkpoint_ms). In the same run, a C
// program (bench/raw_recovery.c) does the same repair with nothing around it: the raw ULFM floor;
// and again with its victim holding as much private memory as the killed rank did (the drill's
// record): the kernel frees a killed process's memory before anyone can see it die, so that floor
// holds what the size of a rank costs the detection.
// At 4 ranks it also SIGSTOPs the highest rank from outside, with --hang-timeout 1 s (ULFM's
// detector declares it dead, the survivors kill it): the time from the stop to the first step
// committed without it, measured the same way. Every job carries a marker in its environment, and
// whatever carries it after the job has ended is killed and reported as an error.
// At 4 working ranks it also kills one with a hot spare waiting (--spares 1), with --respawn, and
// with --respawn --reserves 1 (a reserve asleep since the launch is woken instead of a spawn):
// the time from the kill to the first step committed after it (with --respawn, on the survivors:
// the newcomer joins once ready), and to the first with 4 working ranks again, with the spawn
// (the leader's launch of the new node process: PMIx_Spawn; or its message waking the reserve),
// its accept (MPI_Comm_accept, at a step's end once its MPI runs), the newcomer's own part (a
// spawned rank: from its exec to its merge with the others, beside training, from its log; a
// reserve: from its wake to its merge) and the join (the state's transfer) apart.
// Prints a table, then one JSON line with kill_to_step_ms_<N> (median of the rounds; target for 4
// ranks <= 2 x raw_floor_ms_4, and <= 40 where the floor allows), raw_floor_ms_<N>,
// raw_floor_rank_memory_ms_<N> (the floor with a victim of the rank's size), victim_rss_anon_mib_<N>
// (the killed rank's private memory), breakdown_<N>,
// stop_to_step_ms_4 (target <= hang_timeout_ms + 300), hang_timeout_ms, stop_breakdown_4,
// spare_kill_to_full_world_ms_4 (target <= 1.5 x kill_to_step_ms_4),
// respawn_kill_to_full_world_ms_4 (target <= 2000), reserve_kill_to_full_world_ms_4 and
// elastic_breakdown_4; then, on 3 test hosts
// of 2 ranks (bench/host-faults.ts; as root with sshd, else one line says why not),
// host_ranks_loss_to_step_ms (target <= 300), partition_to_step_ms (target <= hang timeout + 500)
// and daemon_loss_to_clean_stop_ms (target <= 2000). BENCH_ROUNDS sets the rounds (default 3);
// BENCH_ONLY=hosts runs the host faults alone.
// Usage: node dist/bench/recovery.js
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { killJobProcesses } from '../src/cli/job-processes';
import { mpirunCommand } from '../src/cli/mpirun';
import { hostsUnavailable } from '../test/helpers/hosts';
import { hostFaults, partitionHangTimeoutS } from './host-faults';
import { compileMpiC } from './mpi-c';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
const rankCounts = [2, 4, 8];
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const killAfter = 30;
const steps = 80;
const lenetParams = 431080;
const stopRanks = 4;
const hangTimeoutS = 1;
let jobs = 0;

interface Breakdown {
  /** from the kill (or stop) to the first step committed without the rank; without the JIT checkpoint's write, which is counted apart */
  kill_to_step_ms: number;
  /** the victim's private memory as it was signalled (MiB) */
  victim_rss_anon_mib: number;
  checkpoint_ms: number;
  detect_ms: number;
  revoke_shrink_ms: number;
  agree_ms: number;
  readback_ms: number;
  retry_ms: number;
}

function jsonLines<T>(text: string): T[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as T);
}

/** Runs launch/drill with `args`; kills and reports whatever of the job outlives it. */
function drill(args: string[], label: string): void {
  const job = `${process.pid}-${++jobs}`;
  const result = spawnSync(process.execPath, [path.join(root, 'launch', 'drill'), ...args], {
    cwd: root,
    encoding: 'utf8',
    timeout: 300_000,
    env: { ...process.env, FT_BENCH_JOB: job },
  });
  const left = killJobProcesses(`FT_BENCH_JOB=${job}`);
  if (left.length > 0)
    throw new Error(
      `${label}: ${left.length} process(es) of the job outlived it (killed now: ${left.join(', ')})\n${result.stdout}\n${result.stderr}`,
    );
  if (result.status !== 0)
    throw new Error(`${label} failed (exit ${result.status}, ${result.error?.message ?? 'no error'}):\n${result.stdout}\n${result.stderr}`);
}

/** `signal` the highest rank once step killAfter is committed; the recovery's times. */
function trainerRecovery(ranks: number, scratch: string, signal: 'kill' | 'stop'): Breakdown {
  const runDir = path.join(scratch, `drill-${ranks}-${signal}-${Date.now()}`);
  const victim = ranks - 1;
  const hang = signal === 'stop' ? ['--hang-timeout', String(hangTimeoutS)] : [];
  drill(
    [
      '-n',
      String(ranks),
      `--${signal}`,
      `${victim}@${killAfter}`,
      '--',
      '--model',
      'models/lenet.json',
      '--data',
      'datasets/fashion-mnist',
      '--run-dir',
      runDir,
      '--steps',
      String(steps),
      ...hang,
    ],
    `${signal} drill on ${ranks} ranks`,
  );
  const kill = (JSON.parse(fs.readFileSync(path.join(runDir, 'drill.json'), 'utf8')) as { kills: { time: number; rss_anon_kb: number }[] })
    .kills[0];
  const metrics = jsonLines<{ world: number; time: number }>(fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8'));
  const events = jsonLines<{ event: string; time: number; duration_ms?: number }>(
    fs.readFileSync(path.join(runDir, 'events.jsonl'), 'utf8'),
  );
  const first = metrics.find((m) => m.world < ranks)!;
  const event = (name: string) => events.find((e) => e.event === name && e.time >= kill.time - 1)!;
  const checkpointMs = event('checkpoint')?.duration_ms ?? 0;
  return {
    kill_to_step_ms: first.time - kill.time - checkpointMs,
    victim_rss_anon_mib: kill.rss_anon_kb / 1024,
    checkpoint_ms: checkpointMs,
    detect_ms: event('failure').time - kill.time,
    revoke_shrink_ms: event('revoke+shrink').duration_ms!,
    agree_ms: event('agree').duration_ms!,
    readback_ms: event('readback').duration_ms!,
    retry_ms: event('retry')?.duration_ms ?? 0,
  };
}

interface ElasticBreakdown {
  /** from the kill to the first step committed after it (on fewer working ranks where a respawned rank joins later); without the JIT checkpoint's write */
  kill_to_step_ms: number;
  /** from the kill to the first step committed with all working ranks again; without the JIT checkpoint's write */
  kill_to_full_world_ms: number;
  checkpoint_ms: number;
  /** the leader's launch of the new process, which every rank waits for */
  spawn_ms: number;
  /** MPI_Comm_accept of it (every rank), once its MPI runs */
  accept_ms: number;
  /** the newcomer's own part, beside training: a spawned rank's from its exec to its merge with the others; a reserve's from its wake */
  newcomer_startup_ms: number;
  join_ms: number;
  readback_ms: number;
}

type Replacement = 'spare' | 'respawn' | 'reserve';
const replacedBy: Record<Replacement, string[]> = {
  spare: ['--spares', '1'],
  respawn: ['--respawn'],
  reserve: ['--respawn', '--reserves', '1'],
};

/** Kills the highest working rank of `ranks` once step killAfter is committed, with a spare waiting, --respawn, or a reserve asleep. */
function elasticRecovery(ranks: number, scratch: string, how: Replacement): ElasticBreakdown {
  const runDir = path.join(scratch, `drill-${ranks}-${how}-${Date.now()}`);
  const launched = how === 'respawn' ? ranks : ranks + 1;
  drill(
    [
      '-n',
      String(launched),
      '--kill',
      `${ranks - 1}@${killAfter}`,
      '--',
      '--model',
      'models/lenet.json',
      '--data',
      'datasets/fashion-mnist',
      '--run-dir',
      runDir,
      '--steps',
      String(steps),
      ...replacedBy[how],
    ],
    `${how} drill on ${ranks} ranks`,
  );
  const kill = (JSON.parse(fs.readFileSync(path.join(runDir, 'drill.json'), 'utf8')) as { kills: { time: number }[] }).kills[0];
  const metrics = jsonLines<{ world: number; time: number }>(fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8'));
  const events = jsonLines<{ event: string; time: number; duration_ms?: number }>(
    fs.readFileSync(path.join(runDir, 'events.jsonl'), 'utf8'),
  );
  const next = metrics.find((m) => m.time > kill.time)!;
  const first = metrics.find((m) => m.time > kill.time && m.world === ranks)!;
  const event = (name: string) => events.find((e) => e.event === name && e.time >= kill.time - 1);
  const checkpointMs = event('checkpoint')?.duration_ms ?? 0;
  // the newcomer's id: the first after the launch's working ranks
  const newcomerLog = path.join(runDir, 'logs', `rank-${ranks}.log`);
  const joined =
    how === 'respawn'
      ? jsonLines<{ message: string; started_ms: number }>(fs.readFileSync(newcomerLog, 'utf8')).find((l) => l.message === 'joined')!
      : how === 'reserve'
        ? { started_ms: (event('admit') as { waited_ms?: number } | undefined)?.waited_ms ?? 0 }
        : undefined;
  return {
    kill_to_step_ms: next.time - kill.time - checkpointMs,
    kill_to_full_world_ms: first.time - kill.time - checkpointMs,
    checkpoint_ms: checkpointMs,
    spawn_ms: event('spawn')?.duration_ms ?? 0,
    accept_ms: event('accept')?.duration_ms ?? 0,
    newcomer_startup_ms: joined?.started_ms ?? 0,
    join_ms: event('join')!.duration_ms!,
    readback_ms: event('readback')!.duration_ms!,
  };
}

/** The raw repair's kill to its first step on the shrunk world; `victimMib`: the private memory its victim holds. */
function rawFloor(program: string, ranks: number, victimMib = 0): number {
  const { command, args, env } = mpirunCommand({
    ranks,
    program: [program, String(lenetParams + 1), String(steps), String(ranks - 1), String(killAfter), String(Math.round(victimMib))],
  });
  // as the addon does under ULFM: without it, survivors now and then hang in MPI_Finalize after a kill
  const result = spawnSync(command, args, { env: { ...env, OMPI_MCA_async_mpi_finalize: '1' }, encoding: 'utf8', timeout: 120_000 });
  if (result.status !== 0)
    throw new Error(
      `raw_recovery on ${ranks} ranks failed (exit ${result.status}, ${result.error?.message ?? 'no error'}):\n${result.stderr}`,
    );
  const lines = jsonLines<{ event: string; time: number }>(result.stdout);
  return lines.find((l) => l.event === 'first_after')!.time - lines.find((l) => l.event === 'kill')!.time;
}

function main(): void {
  const floorProgram = compileMpiC('raw_recovery');
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-recovery-'));
  const out: Record<string, unknown> = {};
  const table: string[] = [];
  let elasticTable: string[];
  const hostsOnly = process.env.BENCH_ONLY === 'hosts';
  try {
    for (const ranks of hostsOnly ? [] : rankCounts) {
      const runs: Breakdown[] = [];
      const floors: number[] = [];
      const rankSizedFloors: number[] = [];
      for (let round = 1; round <= rounds; ++round) {
        process.stderr.write(`[bench] ${ranks} ranks, round ${round}/${rounds}: ft-train drill ...`);
        const run = trainerRecovery(ranks, scratch, 'kill');
        runs.push(run);
        process.stderr.write(' raw C ...');
        floors.push(rawFloor(floorProgram, ranks));
        process.stderr.write(` with a victim of ${Math.round(run.victim_rss_anon_mib)} MiB ...`);
        rankSizedFloors.push(rawFloor(floorProgram, ranks, run.victim_rss_anon_mib));
        process.stderr.write(' done\n');
      }
      const breakdown = medians(runs);
      const floor = Math.round(median(floors) * 10) / 10;
      const rankSizedFloor = Math.round(median(rankSizedFloors) * 10) / 10;
      out[`kill_to_step_ms_${ranks}`] = breakdown.kill_to_step_ms;
      out[`raw_floor_ms_${ranks}`] = floor;
      out[`raw_floor_rank_memory_ms_${ranks}`] = rankSizedFloor;
      out[`victim_rss_anon_mib_${ranks}`] = breakdown.victim_rss_anon_mib;
      out[`breakdown_${ranks}`] = breakdown;
      table.push(row(`${ranks} kill`, breakdown, floor.toFixed(1), rankSizedFloor.toFixed(1)));
    }
    const stops: Breakdown[] = [];
    for (let round = 1; round <= (hostsOnly ? 0 : rounds); ++round) {
      process.stderr.write(`[bench] ${stopRanks} ranks, SIGSTOP, round ${round}/${rounds}: ft-train drill ...`);
      stops.push(trainerRecovery(stopRanks, scratch, 'stop'));
      process.stderr.write(' done\n');
    }
    const stopped = hostsOnly ? undefined : medians(stops);
    if (stopped) {
      out[`stop_to_step_ms_${stopRanks}`] = stopped.kill_to_step_ms;
      out.hang_timeout_ms = hangTimeoutS * 1000;
      out[`stop_breakdown_${stopRanks}`] = stopped;
      table.push(row(`${stopRanks} stop`, stopped, '-', '-'));
    }
    const elastic: Record<string, ElasticBreakdown> = {};
    for (const how of hostsOnly ? [] : (['spare', 'respawn', 'reserve'] as const)) {
      const runs: ElasticBreakdown[] = [];
      for (let round = 1; round <= rounds; ++round) {
        process.stderr.write(
          `[bench] ${stopRanks} ranks, kill with ${{ spare: 'a spare', respawn: '--respawn', reserve: 'a reserve' }[how]}, round ${round}/${rounds} ...`,
        );
        runs.push(elasticRecovery(stopRanks, scratch, how));
        process.stderr.write(' done\n');
      }
      elastic[how] = medians(runs);
      out[`${how}_kill_to_full_world_ms_${stopRanks}`] = elastic[how].kill_to_full_world_ms;
    }
    if (!hostsOnly) out[`elastic_breakdown_${stopRanks}`] = elastic;
    const unavailable = hostsUnavailable();
    if (unavailable === undefined) Object.assign(out, hostFaults(scratch, rounds));
    else process.stderr.write(`[bench] host faults skipped: they need 3 test hosts (launch/netns-hosts): ${unavailable}\n`);
    elasticTable = Object.entries(elastic).map(
      ([how, b]) =>
        `${`${stopRanks} ${how}`.padEnd(10)} ${b.kill_to_step_ms.toFixed(1).padStart(10)}  ${b.kill_to_full_world_ms.toFixed(1).padStart(15)}  ${b.spawn_ms.toFixed(1).padStart(8)}  ${b.accept_ms.toFixed(1).padStart(9)}  ` +
        `${b.newcomer_startup_ms.toFixed(1).padStart(12)}  ${b.join_ms.toFixed(1).padStart(7)}  ${b.readback_ms.toFixed(1).padStart(11)}  ${b.checkpoint_ms.toFixed(1).padStart(13)}`,
    );
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(
    `lenet + Fashion-MNIST, exact mode, kill -9 (or SIGSTOP, --hang-timeout ${hangTimeoutS} s) of the highest rank after step ${killAfter}; medians of ${rounds} rounds (ms)`,
  );
  console.log(
    'ranks      fault->step ms  raw C ms  raw C, rank-sized victim ms  victim MiB  detect ms  revoke+shrink  agree ms  readback ms  retry ms  checkpoint ms',
  );
  for (const line of table) console.log(line);
  console.log(
    `\nkill -9 of a working rank at ${stopRanks} working ranks, back to ${stopRanks} with a hot spare, a respawned rank or a woken reserve (ms)`,
  );
  console.log('how        kill->step  kill->full world  spawn ms  accept ms  newcomer ms  join ms  readback ms  checkpoint ms');
  for (const line of elasticTable) console.log(line);
  if (out.host_ranks_loss_to_step_ms !== undefined) {
    console.log(
      `\n3 hosts of 2 ranks (ms): every rank of a host killed -> step ${out.host_ranks_loss_to_step_ms}; ` +
        `link cut (--hang-timeout ${partitionHangTimeoutS}) -> step ${out.partition_to_step_ms}; host lost with its daemon -> clean stop ${out.daemon_loss_to_clean_stop_ms}`,
    );
  }
  console.log(JSON.stringify(out));
}

/** Each field's median over the rounds, to 0.1 ms. */
function medians<T extends object>(runs: T[]): T {
  return Object.fromEntries(
    Object.keys(runs[0]).map((k) => [k, Math.round(median(runs.map((r) => r[k as keyof T] as number)) * 10) / 10]),
  ) as T;
}

function row(label: string, b: Breakdown, floor: string, rankSizedFloor: string): string {
  return (
    `${label.padEnd(9)}  ${b.kill_to_step_ms.toFixed(1).padStart(14)}  ${floor.padStart(8)}  ${rankSizedFloor.padStart(27)}  ${b.victim_rss_anon_mib.toFixed(1).padStart(10)}  ${b.detect_ms.toFixed(1).padStart(9)}  ${b.revoke_shrink_ms.toFixed(2).padStart(13)}  ` +
    `${b.agree_ms.toFixed(2).padStart(8)}  ${b.readback_ms.toFixed(1).padStart(11)}  ${b.retry_ms.toFixed(1).padStart(8)}  ${b.checkpoint_ms.toFixed(1).padStart(13)}`
  );
}

main();
