// bench/chaos: useful time under a kill -9 every ten seconds. lenet on Fashion-MNIST, exact mode,
// 4 working ranks (BENCH_RANKS) kept at full strength by a hot spare, refilled by --respawn from
// reserves asleep since the launch (each joins once ready; BENCH_RESPAWN_JOIN=wait: the survivors
// wait),
// about two minutes of training, first without a fault, then with launch/drill's --chaos: a kill -9
// of a random working rank (the leader included) every BENCH_KILL_EVERY_S seconds (default 10)
// from outside, each once the job has recovered from the last. The fault-free run is followed as
// the chaos run is (its metrics and events read every 5 ms), with no kill ever due, so that the
// follower's own cost (a few percent of a step on a machine whose cores the ranks fill) is in both
// runs and not counted as the kills'. Prints a table, then one JSON line:
//   useful_fraction = (steps x the chaos run's median step time) / wall time from its first step to
//     its last (no evaluation in between), target >= 0.99; fault_free_useful_fraction: the same
//     figure for the fault-free run (what step-time jitter alone costs);
//     useful_fraction_at_fault_free_median: the chaos run's steps x the fault-free run's median
//     step time, over the chaos run's span (steps slower after the kills count as lost);
//     wall_ratio: the chaos run's span over the fault-free one's, for the same steps, and
//     wall_lost_ms_per_kill: their difference per kill (what a kill costs against the run without
//     one, slower steps included);
//   kills, kills_back_to_full (those after which the world came back to all its working ranks: a
//     kill short of it left fewer ranks to compute, and less to lose, so the figure is not one of
//     a full world), params_equal (the chaos run's params_sha256 equals the fault-free run's: must be true);
//   lost_ms_per_kill: (wall - steps x median) / kills, and its breakdown, medians over the kills
//     (ms): detect (the kill to the survivors' failure event: the rest of the step they were
//     computing, then the failed collective), repair (revoke, shrink, agree), spawn (the leader
//     launching the new rank: PMIx_Spawn, or waking a reserve), accept (MPI_Comm_accept of it, at a step's end once its
//     MPI runs), ready (from the launch until it was ready to join, beside training), join (the
//     state sent to it), readback (what the retried step needs of the lost shards, and
//     the newcomer of its shards, before they compute), checkpoint (the JIT checkpoint), retry (the retried step),
//     back_to_full_ms (the kill to the first step committed on all working ranks again) and
//     slower_steps_ms (per kill: the time steps on fewer working ranks took beyond the median),
//     starting_steps_ms and later_steps_ms (the time steps on all working ranks took beyond the
//     fault-free run's mean step: while the new rank starts or wakes beside training, from the
//     retried step to its join; then until the next kill, where spawned ranks reach the others
//     over TCP, Open MPI's shared memory serving one job's processes only, and woken reserves
//     over shared memory).
// BENCH_STEPS sets the steps (default 4000, about two minutes here), BENCH_RESPAWN_LIMIT the ranks
// that may be spawned (default 100), BENCH_RESPAWN_JOIN their --respawn-join (default ready),
// BENCH_SPARES hot spares beside the working ranks (default 1; a spare takes each lost place in
// the recovery, and the spares used are refilled at a step's end), BENCH_RESERVES the reserves
// launched asleep after them (default 12, more than the kills: a woken reserve, of the launch's
// own job, refills rather than a spawned rank; 0: spawned ranks only). The defaults are what kept
// the world full fastest here. Whatever of a job outlives it is killed and reported.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runDrill } from '../src/cli/fault-drill';
import { killJobProcesses } from '../src/cli/job-processes';
import type { EventRecord, StepRecord } from '../src/run/records';
import { median } from '../src/base/median';
import { runRecords, type RunRecords } from './run-records';

const ranks = Number(process.env.BENCH_RANKS ?? 4);
const steps = Number(process.env.BENCH_STEPS ?? 4000);
const killEveryS = Number(process.env.BENCH_KILL_EVERY_S ?? 10);
const respawnLimit = Number(process.env.BENCH_RESPAWN_LIMIT ?? 100);
const respawnJoin = process.env.BENCH_RESPAWN_JOIN ?? 'ready';
const spares = Number(process.env.BENCH_SPARES ?? 1);
const reserves = Number(process.env.BENCH_RESERVES ?? 12);

interface Run extends RunRecords {
  kills: { rank: number; time: number }[];
}

let jobs = 0;

async function train(runDir: string, chaos: boolean): Promise<Run> {
  const args = [
    ...['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--run-dir', runDir],
    ...['--steps', String(steps), '--respawn', '--respawn-limit', String(respawnLimit), '--respawn-join', respawnJoin],
    ...(spares > 0 ? ['--spares', String(spares)] : []),
    ...(reserves > 0 ? ['--reserves', String(reserves)] : []),
  ];
  const marker = `${process.pid}-${++jobs}`;
  process.env.FT_BENCH_JOB = marker;
  const outcome = await runDrill(ranks + spares + reserves, [], args, [], 20, { everyMs: chaos ? killEveryS * 1000 : Infinity, seed: 1 });
  const left = killJobProcesses(`FT_BENCH_JOB=${marker}`);
  if (left.length > 0)
    throw new Error(`${left.length} process(es) of the ${chaos ? 'chaos' : 'fault-free'} run outlived it: ${left.join(' ')}`);
  if (!outcome.passed) throw new Error(`the ${chaos ? 'chaos' : 'fault-free'} run failed (mpirun exit ${outcome.code}); see ${runDir}`);
  return {
    ...runRecords(runDir),
    kills: outcome.chaos.map((k) => ({ rank: k.rank, time: k.time! })),
  };
}

/** A run's steps without evaluations: the steps from the first to the last, the median step time, the span between them, the useful fraction. */
function steady(run: Run): { steps: number; median: number; span: number; useful: number } {
  const records = run.metrics.filter((m) => m.test_accuracy === undefined);
  const [first, last] = [records[0], records[records.length - 1]];
  const stepMedian = median(records.map((m) => m.step_ms));
  const span = last.time - first.time;
  const steps = last.step - first.step;
  return { steps, median: stepMedian, span, useful: (steps * stepMedian) / span };
}

interface KillCost {
  detect: number;
  repair: number;
  spawn: number;
  accept: number;
  ready: number;
  join: number;
  readback: number;
  checkpoint: number;
  retry: number;
  back_to_full_ms: number;
  slower_steps_ms: number;
  starting_steps_ms: number;
  later_steps_ms: number;
}

/** What each kill cost, from the events between it and the next kill (`faultFreeStep`: the fault-free run's mean step). */
function killCosts(run: Run, stepMedian: number, faultFreeStep: number): KillCost[] {
  return run.kills.map((kill, i) => {
    const until = run.kills[i + 1]?.time ?? Infinity;
    const within = <T extends { time: number }>(records: T[]): T[] => records.filter((r) => r.time >= kill.time && r.time < until);
    const events = within(run.events);
    const first = (name: string): EventRecord | undefined => events.find((e) => e.event === name);
    const duration = (name: string): number => events.filter((e) => e.event === name).reduce((sum, e) => sum + (e.duration_ms ?? 0), 0);
    const failure = first('failure');
    const metrics = within(run.metrics).filter((m) => m.test_accuracy === undefined); // steps, not evaluations
    const failedStep = failure?.step ?? -1;
    const back = metrics.find((m) => m.world === ranks && m.step > failedStep);
    // the newcomers' join ends their start-up beside training (a spare's own join takes no spawned rank)
    const ranksOf = (e: EventRecord): number[] => (e.ranks as number[] | undefined) ?? [];
    const spawned = new Set(events.filter((e) => e.event === 'spawn').flatMap(ranksOf));
    const joins = events.filter((e) => e.event === 'join' && ranksOf(e).some((r) => spawned.has(r)));
    const settled = joins.at(-1)?.time ?? back?.time ?? until;
    const beyondFaultFree = (steps: StepRecord[]): number => steps.reduce((sum, m) => sum + m.step_ms - faultFreeStep, 0);
    return {
      detect: failure ? failure.time - kill.time : NaN,
      repair: duration('revoke+shrink') + duration('agree'),
      spawn: duration('spawn'),
      accept: duration('accept'),
      ready: events.filter((e) => e.event === 'admit').reduce((sum, e) => sum + ((e.waited_ms as number | undefined) ?? 0), 0),
      join: duration('join'),
      readback: duration('readback'),
      checkpoint: duration('checkpoint'),
      retry: duration('retry'),
      back_to_full_ms: back ? back.time - kill.time : NaN,
      slower_steps_ms: metrics.filter((m) => m.world < ranks).reduce((sum, m) => sum + Math.max(0, m.step_ms - stepMedian), 0),
      starting_steps_ms: beyondFaultFree(metrics.filter((m) => m.world === ranks && m.step > failedStep && m.time < settled)),
      later_steps_ms: beyondFaultFree(metrics.filter((m) => m.time >= settled)),
    };
  });
}

async function main(): Promise<void> {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-chaos-'));
  const round1 = (x: number): number => Math.round(x * 10) / 10;
  const round4 = (x: number): number => Math.round(x * 10000) / 10000;
  process.stderr.write(`[bench] lenet, ${ranks} ranks, ${steps} steps: fault-free ...`);
  const calm = await train(path.join(scratch, 'fault-free'), false);
  process.stderr.write(` chaos (a kill -9 every ${killEveryS} s) ...`);
  const chaos = await train(path.join(scratch, 'chaos'), true);
  process.stderr.write(' done\n');
  const [c, f] = [steady(chaos), steady(calm)];
  const kills = chaos.kills.length;
  const lostMs = c.span - c.steps * c.median;
  const usefulAtFaultFreeMedian = (c.steps * f.median) / c.span;
  const costs = killCosts(chaos, c.median, f.span / f.steps);
  const breakdown = Object.fromEntries(
    (Object.keys(costs[0] ?? {}) as (keyof KillCost)[]).map((key) => [key, round1(median(costs.map((k) => k[key])))]),
  );
  console.log(
    `fault-free: ${f.span.toFixed(0)} ms for ${f.steps} steps, median ${f.median.toFixed(2)} ms/step, useful ${f.useful.toFixed(4)}`,
  );
  console.log(
    `chaos: ${kills} kills in ${c.span.toFixed(0)} ms, median ${c.median.toFixed(2)} ms/step, useful ${c.useful.toFixed(4)} (${usefulAtFaultFreeMedian.toFixed(4)} at the fault-free median), lost ${(lostMs / Math.max(1, kills)).toFixed(1)} ms per kill`,
  );
  console.log(
    `per kill, medians (ms): ${Object.entries(breakdown)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  console.log(
    JSON.stringify({
      model: 'lenet',
      ranks,
      steps,
      kill_every_s: killEveryS,
      respawn_join: respawnJoin,
      spares,
      reserves,
      kills,
      kills_back_to_full: costs.filter((k) => Number.isFinite(k.back_to_full_ms)).length,
      useful_fraction: round4(c.useful),
      fault_free_useful_fraction: round4(f.useful),
      useful_fraction_at_fault_free_median: round4(usefulAtFaultFreeMedian),
      wall_ratio: round4(c.span / f.span),
      wall_lost_ms_per_kill: round1((c.span - f.span) / Math.max(1, kills)),
      params_equal: chaos.summary.params_sha256 === calm.summary.params_sha256,
      median_step_ms: round1(c.median),
      lost_ms_per_kill: round1(lostMs / Math.max(1, kills)),
      breakdown,
    }),
  );
  // kept where a run failed, for its run directory
  fs.rmSync(scratch, { recursive: true, force: true });
}

void main().catch((error: Error) => {
  console.error(`bench/chaos: ${error.message}`);
  process.exitCode = 1;
});
