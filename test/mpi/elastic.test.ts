// The world gets its size back under mpirun: hot spares (--spares) take a killed rank's place in
// the same recovery (a spare's own death reads nothing back; with --respawn, spawned ranks refill them at a step's end, a kill there
// recovered like any other), and with --respawn the survivors spawn replacements (launched, then accepted once their MPI runs) that
// join once ready (or, with --respawn-join wait, at the retried step's end, which these tests use
// where they name the steps of the world's sizes), receive the state and take shards; kills of the
// newcomer before its MPI runs, before and during its join, of a survivor during the spawn and of
// one as the newcomers are accepted or admitted are recovered like any other, and so are the death (or a stop, taken for a hang) of the rank that starts the spawn while it is under way and a
// newcomer stopped during its join (which no failure detector watches: the survivors find it
// stopped once their wait runs past its deadline, and kill it) or before it (given up, and another
// spawned). A newcomer joins at a step's end after the others' periodic checkpoint or stop there,
// and an evaluation's vote in the step leaves what the step's own vote said of it. A spawned rank
// that leads at the end cleans up the checkpoint directory as the first leader would. A chaos drill
// kills a random working rank every quarter of the run, spawned ones included. Every run ends with
// the bits of the run without failure.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readRun } from '../../src/report/run-data';
import type { EventRecord, StepRecord } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, repoRoot, runCommand, runLaunchDrill, runTrain, type JobResult } from '../helpers/mpi-job';
import { checkpointParamsSha256, lines, logMessages, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';
import { stopOnce } from '../helpers/stop-once';

/** --respawn, the survivors waiting for the newcomers at the retried step's end: the world's size at each step is known */
const respawnWaiting = ['--respawn', '--respawn-join', 'wait'];
// a hang timeout for the tests that stop a rank: short, so that it is found stopped soon, but with
// a comm deadline (3 T) whose half, the time a spawned rank has to be up and ready, holds a spawn's
// start on a loaded machine (up to 2.4 s measured beside the other lane; T = 2 left 3 s)
const respawnHangTimeout = ['--hang-timeout', '4'];
const scratch = makeScratch('ft-elastic-');
const common = [...lenetOnFashion, '--steps', '12', '--batch', '64', '--shards', '4', ...fewTestSamples];
let runs = 0;

async function train(ranks: number, ...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(ranks, [...common, '--run-dir', dir, ...extra], 150_000);
  return { dir, ...job };
}

/** Through launch/ft-run, which judges by the run directory (mpirun exits 137 once a spawned rank was killed). */
async function ftRun(ranks: number, launcher: string[], ...extra: string[]): Promise<Run> {
  const { dir, running } = startFtRun(ranks, launcher, ...extra);
  return { dir, ...(await running) };
}

/** ftRun, its run directory known before it ends. */
function startFtRun(ranks: number, launcher: string[], ...extra: string[]): { dir: string; running: Promise<JobResult<never>> } {
  const dir = path.join(scratch, `run-${++runs}`);
  const argv = [path.join(repoRoot, 'launch', 'ft-run'), '-n', String(ranks), ...launcher, '--', ...common, '--run-dir', dir, ...extra];
  return { dir, running: runCommand(process.execPath, argv, process.env, 150_000, `ft-run -n ${ranks} ${extra.join(' ')}`) };
}

/** --respawn (survivors waiting), respawnHangTimeout, rank 2 killed at step 3, and `drill`. */
function respawnAfterKill(drill: string): Promise<Run> {
  return ftRun(4, [], ...respawnWaiting, ...respawnHangTimeout, '--drill', 'rank=2,step=3,phase=compute', '--drill', drill);
}

/** The process of world rank `id` (its pid file) no longer runs. */
function assertGone(run: Run, id: number): void {
  const pid = Number(fs.readFileSync(path.join(run.dir, 'pids', String(id)), 'utf8').split(' ')[0]);
  assert.throws(() => process.kill(pid, 0), /ESRCH/, `rank ${id} (pid ${pid}) still runs`);
}

/** The working world of each committed step, in step order. */
function worlds(run: Run): number[] {
  return lines<StepRecord>(run, 'metrics.jsonl').map((r) => r.world);
}

describe('elastic world: spares and respawned ranks', function () {
  this.timeout(600_000);
  const reference = new Map<string, string>();

  after(() => removeScratch(scratch));

  before(async () => {
    reference.set('sgd', summaryOf(await train(4)).params_sha256);
    reference.set('adamw', summaryOf(await train(4, '--optimizer', 'adamw')).params_sha256);
  });

  it('4 ranks + 1 spare, kill -9 of a working rank: 4 working ranks to the end, the same bits', async () => {
    const run = await train(5, '--spares', '1', '--drill', 'rank=2,step=3,phase=compute');
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), Array(12).fill(4));
    assert.deepEqual(
      lines<StepRecord>(run, 'metrics.jsonl').map((r) => r.spares),
      [...Array(3).fill(1), ...Array(9).fill(0)],
    );
    const join = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'join')!;
    assert.deepEqual([join.step, join.ranks], [3, [4]]);
    // fed every step, the spare held the state already: none was sent
    assert.equal(join.bytes, 0);
    assert.equal(summary.world_final, 4);
    assert.equal(summary.ranks_lost, 1);
    // the spare read the lost rank's shard, and no other
    const readback = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'readback')!;
    assert.deepEqual(readback.shards, [2]);
    assert.match(run.stdout, /4 ranks \(\+1 spare\)/);
    // the report's recovery table: rank 2 lost, the spare (rank 4) joined in the same recovery
    const [recovery] = readRun(run.dir).recoveries;
    assert.deepEqual([recovery.step, recovery.lost, recovery.joined], [3, [2], [4]]);
    assert.equal(recovery.joinMs, join.duration_ms);
  });

  it('the spare itself killed: nothing to read back (it held no shard), one line says so, the same bits', async () => {
    const run = await train(5, '--spares', '1', '--drill', 'rank=4,step=3,phase=compute');
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.match(run.stdout, /step 3: lost rank\(s\) 4; no shard to read back; retried on 4 ranks\n/);
    assert.deepEqual(worlds(run), Array(12).fill(4));
  });

  it('sharded AdamW state + 1 spare: the spare receives the lost chunk, the same bits', async () => {
    const run = await train(
      5,
      '--spares',
      '1',
      '--optimizer',
      'adamw',
      '--optimizer-state',
      'sharded',
      '--drill',
      'rank=1,step=5,phase=update',
    );
    assert.equal(summaryOf(run).params_sha256, reference.get('adamw'));
    assert.deepEqual(worlds(run), Array(12).fill(4));
  });

  it("4 ranks + 1 spare with --respawn: each spare used up is refilled by a spawned rank at the retried step's end, which joins as a spare and takes the next lost place: the same bits", async () => {
    const drills = ['--drill', 'rank=2,step=3,phase=compute', '--drill', 'rank=1,step=7,phase=compute'];
    const run = await ftRun(5, [], '--spares', '1', ...respawnWaiting, ...drills);
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), Array(12).fill(4));
    // the spare promoted in the recovery; the spawn after the retried step; its join (waited for) at the next step's end
    assert.deepEqual(
      lines<StepRecord>(run, 'metrics.jsonl').map((r) => r.spares),
      [1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1],
    );
    const events = lines<EventRecord>(run, 'events.jsonl');
    assert.deepEqual(
      events.filter((e) => e.event === 'spawn').map((e) => [e.step, e.ranks]),
      [
        [4, [5]],
        [8, [6]],
      ],
    );
    assert.deepEqual(
      events.filter((e) => e.event === 'join').map((e) => [e.step, e.ranks, e.spares]),
      [
        [3, [4], undefined],
        [5, [5], [5]],
        [7, [5], undefined],
        [9, [6], [6]],
      ],
    );
    assert.match(run.stdout, /step 5: rank\(s\) 5 joined as spare\(s\); 4 ranks work \(\+1 spare\)/);
    assert.equal(summary.world_final, 4);
  });

  it("4 ranks + 1 spare with --respawn: the leader killed as it launches the spare's refill: the others recover, spawn for its place, then refill the spare: the same bits", async () => {
    const drills = ['--drill', 'rank=2,step=3,phase=compute', '--drill', 'rank=0,step=4,phase=spawning'];
    const run = await ftRun(5, [], '--spares', '1', ...respawnWaiting, ...drills);
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference.get('sgd'));
    // step 4 retried on 3 ranks: no spare left for rank 0's place, and the newcomer (6) joins at its end
    assert.deepEqual(worlds(run), [4, 4, 4, 4, 3, 4, 4, 4, 4, 4, 4, 4]);
    assert.deepEqual(
      lines<StepRecord>(run, 'metrics.jsonl').map((r) => r.spares),
      [1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1],
    );
    const events = lines<EventRecord>(run, 'events.jsonl');
    assert.deepEqual(
      events.filter((e) => e.event === 'failure').map((e) => [e.step, e.phase]),
      // the others wait for the launch in the spawn's agreement, where they meet the failure
      [
        [3, 'collective'],
        [4, 'agree'],
      ],
    );
    // rank 5, the refill under way when the leader died, was given up
    assert.deepEqual(
      events.filter((e) => e.event === 'join').map((e) => [e.step, e.ranks, e.spares]),
      [
        [3, [4], undefined],
        [5, [6], undefined],
        [7, [7], [7]],
      ],
    );
  });

  it('sharded AdamW state + 1 spare with --respawn: the refilled spare votes on the redistributions it holds no part of, and takes the next lost chunk: the same bits', async () => {
    const run = await ftRun(
      5,
      [],
      ...['--spares', '1', '--optimizer', 'adamw', '--optimizer-state', 'sharded'],
      ...respawnWaiting,
      ...['--drill', 'rank=2,step=3,phase=compute', '--drill', 'rank=4,step=7,phase=update'],
    );
    assert.equal(summaryOf(run).params_sha256, reference.get('adamw'));
    assert.deepEqual(worlds(run), Array(12).fill(4));
    const joins = lines<EventRecord>(run, 'events.jsonl').filter((e) => e.event === 'join');
    assert.deepEqual(
      joins.map((e) => e.spares ?? []),
      [[], [5], [], [6]],
    );
  });

  it('2 ranks + 1 spare, both working ranks killed at once: the spare alone carries on, the same bits', async () => {
    const run = await train(3, '--spares', '1', '--drill', 'rank=0,step=5,phase=compute', '--drill', 'rank=1,step=5,phase=compute');
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), [2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]);
  });

  it('2 ranks + 1 spare, both working ranks killed, --min-ranks 2: stops with exit 3 after a checkpoint', async () => {
    const run = await train(
      3,
      '--spares',
      '1',
      '--min-ranks',
      '2',
      '--drill',
      'rank=0,step=5,phase=compute',
      '--drill',
      'rank=1,step=5,phase=compute',
    );
    assert.equal(run.code, 3, `${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /1 rank\(s\) left, below --min-ranks 2: stopping \(checkpoint .*step-00000005\)/);
    assert.ok(fs.existsSync(path.join(run.dir, 'ckpt', 'step-00000005', 'manifest.json')));
  });

  it('--respawn at 4 ranks: kills of rank 0, of the newcomer during its join, and of two survivors (one during the spawn) end at 4 ranks, the same bits', async () => {
    const run = await ftRun(
      4,
      [],
      ...respawnWaiting,
      '--drill',
      'rank=0,step=3,phase=compute',
      '--drill',
      'rank=4,step=3,phase=join',
      '--drill',
      'rank=1,step=7,phase=collective',
      '--drill',
      'rank=2,step=7,phase=spawn',
    );
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference.get('sgd'));
    // each retried step on the survivors; rank 4, spawned at step 3, killed in its join at step 3's end
    assert.deepEqual(worlds(run), [4, 4, 4, 3, 3, 4, 4, 2, 4, 4, 4, 4]);
    const events = lines<EventRecord>(run, 'events.jsonl');
    assert.deepEqual(
      events.filter((e) => e.event === 'join').map((e) => [e.step, e.ranks]),
      [
        [5, [5]],
        [8, [7, 8]],
      ],
    );
    assert.deepEqual(
      summary.failures.map((f) => [f.step, f.lost]),
      [
        [3, [0]],
        [4, [4]],
        [7, [1]],
        [7, [2]],
      ],
    );
    assert.match(
      run.stderr,
      /ft-run: mpirun exited 137 \(it counts a --respawn rank that died or could not start, or a host it lost, against the job\), but the run completed: exit 0/,
    );
  });

  it("--respawn: the survivors retry without waiting for the newcomer, which joins at a later step's end and takes the lost shard from the rank holding two: the same bits", async () => {
    // no slow-rank rebalance (jitter on shared cores can call for one): the shard the newcomer takes
    // is named. The run trains until 3 steps after the join, however long the newcomer takes to
    // start, and is then stopped (SIGTERM): its checkpoint there holds a clean run's parameters
    const { dir, running } = startFtRun(
      4,
      [],
      '--respawn',
      '--steps',
      '100000',
      '--rebalance',
      'off',
      '--drill',
      'rank=2,step=10,phase=compute',
    );
    const reachedAfterJoin = () => {
      // the files grow as they are read: a line not yet whole is no step yet
      try {
        const join = lines<EventRecord>({ dir } as Run, 'events.jsonl').find((e) => e.event === 'join')?.step;
        return join !== undefined && lines<StepRecord>({ dir } as Run, 'metrics.jsonl').some((r) => r.step === join + 3);
      } catch {
        return false;
      }
    };
    const run = { dir, ...(await stopOnce(running, dir, reachedAfterJoin, 'three steps after the join')) };
    assert.equal(run.code, 0, run.stderr);
    const events = lines<EventRecord>(run, 'events.jsonl');
    const spawn = events.find((e) => e.event === 'spawn')!;
    assert.deepEqual([spawn.step, spawn.ranks], [10, [4]]);
    const join = events.find((e) => e.event === 'join')!;
    assert.deepEqual(join.ranks, [4]);
    // a newcomer holds nothing: the state is sent
    assert.ok((join.bytes as number) > 0, JSON.stringify(join));
    const joinedAt = join.step!;
    assert.ok(joinedAt > 10, `joined at step ${joinedAt}`);
    const done = worlds(run).length;
    assert.deepEqual(worlds(run), [...Array(10).fill(4), ...Array(joinedAt - 10).fill(3), ...Array(done - joinedAt).fill(4)]);
    // shard 2 went to rank 0 (the least loaded, lowest) and comes back to the newcomer: read twice in all
    const readbacks = events.filter((e) => e.event === 'readback').map((e) => [e.step, e.shards]);
    assert.deepEqual(readbacks, [
      [10, [2]],
      [joinedAt, [2]],
    ]);
    assert.match(
      run.stdout,
      new RegExp(`step ${joinedAt}: rank\\(s\\) 4 joined; read back their shards' first \\d+ bytes in [\\d.]+ ms; 4 ranks work`),
    );
    const stop = events.find((e) => e.event === 'stop')!;
    assert.deepEqual([stop.reason, stop.step], ['sigterm', done]);
    const clean = summaryOf(await train(4, '--steps', String(done)));
    assert.equal(checkpointParamsSha256(stop.checkpoint as string), clean.params_sha256);
  });

  it("--respawn: a newcomer joins at a step's end after what the others do there: a periodic checkpoint, or the stop a SIGTERM asked for (it is then given up, and the stop names it); each run ends, with the same bits", async () => {
    // the newcomer goes on at the next step's computation: joined before the others' checkpoint
    // (or stop), it met their vote on it with the step's sum, and the world repaired in a loop
    const respawned = [...respawnWaiting, ...respawnHangTimeout, '--drill', 'rank=2,step=3,phase=compute'];
    const checkpointed = await ftRun(4, [], ...respawned, '--checkpoint-every', '4');
    assert.equal(checkpointed.code, 0, checkpointed.stderr);
    assert.equal(summaryOf(checkpointed).params_sha256, reference.get('sgd'));
    const events = lines<EventRecord>(checkpointed, 'events.jsonl').filter((e) => e.step === 4);
    assert.deepEqual(
      events.filter((e) => e.event === 'checkpoint' || e.event === 'join').map((e) => [e.event, e.reason ?? e.ranks]),
      [
        ['checkpoint', 'periodic'],
        ['join', [4]],
      ],
    );
    // rank 0 asks to stop as the step fails; the retried step's vote agrees on the stop, which
    // gives the newcomer up and names it (mpirun counts its death: ft-run's line says so)
    const stopped = await ftRun(4, [], ...respawned, '--drill', 'rank=0,step=3,phase=collective,action=term');
    const stop = lines<EventRecord>(stopped, 'events.jsonl').find((e) => e.event === 'stop');
    assert.deepEqual([stop?.step, stop?.reason, stop?.spawned_given_up], [4, 'sigterm', [4]], stopped.stdout);
    assert.match(stopped.stderr, /\(it counts the --respawn rank\(s\) 4, given up at the stop, against the job\)/);
    assertGone(stopped, 4);
    assert.equal(lines<EventRecord>(stopped, 'events.jsonl').filter((e) => e.event === 'join').length, 0);
    const resumed = await train(4, '--resume', stop!.checkpoint as string);
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.equal(summaryOf(resumed).params_sha256, reference.get('sgd'));
  });

  it("--respawn with an evaluation at every step: its vote, after the step's own, leaves what that said of the newcomer, which joins at the retried step's end: the same bits", async () => {
    const run = await ftRun(4, [], ...respawnWaiting, '--eval-every', '1', '--drill', 'rank=2,step=3,phase=compute');
    assert.equal(run.code, 0, run.stderr);
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), [4, 4, 4, 3, ...Array(8).fill(4)]);
  });

  it('--respawn: a newcomer killed before it joins is found lost and another spawned; one stopped before it joins is given up after half the comm deadline, killed, and replaced: the same bits', async () => {
    const killed = await ftRun(4, [], ...respawnWaiting, '--drill', 'rank=2,step=3,phase=compute', '--drill', 'rank=4,step=3,phase=ready');
    assert.equal(killed.code, 0, killed.stderr);
    assert.equal(summaryOf(killed).params_sha256, reference.get('sgd'));
    // the retried step 3 waits for rank 4 and finds it lost; rank 5 joins at step 4's end
    assert.deepEqual(worlds(killed), [4, 4, 4, 3, 3, ...Array(7).fill(4)]);
    const events = lines<EventRecord>(killed, 'events.jsonl');
    assert.deepEqual(
      events.filter((e) => ['spawn', 'spawn-lost', 'join'].includes(e.event)).map((e) => [e.event, e.step, e.ranks]),
      [
        ['spawn', 3, [4]],
        ['spawn-lost', 4, [4]],
        ['spawn', 4, [5]],
        ['join', 5, [5]],
      ],
    );
    assert.deepEqual(
      summaryOf(killed).failures.map((f) => [f.step, f.lost]),
      [[3, [2]]],
    );
    assert.match(killed.stdout, /step 4: spawned rank\(s\) 4 lost before joining \(died, or not ready within 45 s\); spawning again/);

    const stopped = await respawnAfterKill('rank=4,step=3,phase=ready,action=stop');
    assert.equal(stopped.code, 0, stopped.stderr);
    assert.equal(summaryOf(stopped).params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(stopped), [4, 4, 4, 3, 3, ...Array(7).fill(4)]);
    assert.match(stopped.stdout, /step 4: spawned rank\(s\) 4 lost before joining \(died, or not ready within 6 s\); spawning again/);
    assertGone(stopped, 4);
  });

  it('--respawn: a newcomer killed before its MPI runs (nothing waits for it to start) is found lost by its pid file and another spawned; one stopped then is given up after half the comm deadline: the same bits', async () => {
    for (const action of ['kill', 'stop']) {
      const run = await respawnAfterKill(`rank=4,step=3,phase=startup,action=${action}`);
      assert.equal(run.code, 0, `${action}: ${run.stderr}`);
      assert.equal(summaryOf(run).params_sha256, reference.get('sgd'), action);
      // the launch took the leader alone; the retried step 3 waits for rank 4 and finds it lost
      assert.deepEqual(worlds(run), [4, 4, 4, 3, 3, ...Array(7).fill(4)], action);
      const events = lines<EventRecord>(run, 'events.jsonl');
      assert.deepEqual(
        events.filter((e) => ['spawn', 'spawn-lost', 'accept', 'join'].includes(e.event)).map((e) => [e.event, e.step, e.ranks]),
        [
          ['spawn', 3, [4]],
          ['spawn-lost', 4, [4]],
          ['spawn', 4, [5]],
          ['accept', 5, [5]],
          ['join', 5, [5]],
        ],
        action,
      );
      assert.match(run.stdout, /step 4: spawned rank\(s\) 4 lost before joining \(died, or not ready within 6 s\); spawning again/, action);
      assertGone(run, 4);
    }
  });

  it('--respawn: a survivor killed, or stopped, as a newcomer is accepted or admitted: the agreement before MPI_Comm_accept, or the admission, fails alike on every side, the newcomer is given up, two others join: the same bits', async () => {
    // the phase of the drill, and where the others meet the failure: the agreement before the accept, the admission
    for (const [phase, met] of [
      ['accept', 'agree'],
      ['admit', 'admit'],
    ]) {
      for (const action of ['kill', 'stop']) {
        const how = `${action} at ${phase}`;
        const run = await respawnAfterKill(`rank=1,step=4,phase=${phase},action=${action}`);
        assert.equal(run.code, 0, `${how}: ${run.stderr}`);
        assert.equal(summaryOf(run).params_sha256, reference.get('sgd'), how);
        // rank 4, up (or ready) for the retried step 3's end, is not accepted (or admitted): its place and rank 1's go to ranks 5 and 6
        assert.deepEqual(worlds(run), [4, 4, 4, 3, 2, ...Array(7).fill(4)], how);
        assert.deepEqual(
          summaryOf(run).failures.map((f) => [f.step, f.lost]),
          [
            [3, [2]],
            [4, [1]],
          ],
          how,
        );
        const events = lines<EventRecord>(run, 'events.jsonl');
        const failure = events.filter((e) => e.event === 'failure').map((e) => [e.step, e.phase]);
        assert.deepEqual(failure[1], [4, met], how);
        assert.deepEqual(
          events.filter((e) => ['spawn', 'accept', 'admit', 'join'].includes(e.event)).map((e) => [e.event, e.step, e.ranks]),
          [
            ['spawn', 3, [4]],
            ...(phase === 'admit' ? [['accept', 4, [4]]] : []),
            ['spawn', 4, [5, 6]],
            ['accept', 5, [5, 6]],
            ['admit', 5, [5, 6]],
            ['join', 5, [5, 6]],
          ],
          how,
        );
        // given up: it leaves on its own failed agreement, or is killed by its spawners, whichever comes first
        assertGone(run, 4);
      }
    }
  });

  it('--respawn with sharded state: the newcomer receives its chunk in the redistribution, the same bits', async () => {
    const run = await train(
      4,
      ...respawnWaiting,
      '--respawn-limit',
      '1',
      '--optimizer',
      'adamw',
      '--optimizer-state',
      'sharded',
      '--drill',
      'rank=3,step=2,phase=compute',
      '--drill',
      'rank=1,step=6,phase=compute',
    );
    assert.equal(summaryOf(run).params_sha256, reference.get('adamw'));
    // one respawn allowed: back to 4 after the first kill's retried step, 3 after the second
    assert.deepEqual(worlds(run), [4, 4, 3, 4, 4, 4, ...Array(6).fill(3)]);
  });

  it('--respawn on a job launched on all its slots: the replacement takes the place of the lost rank (the runtime still counts it), the same bits', async () => {
    const hostfile = path.join(scratch, 'two-slots');
    fs.writeFileSync(hostfile, 'localhost slots=2\n');
    const run = await ftRun(2, ['--hostfile', hostfile], ...respawnWaiting, '--drill', 'rank=1,step=3,phase=compute');
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), [2, 2, 2, 1, ...Array(8).fill(2)]);
    assert.ok(!run.stdout.includes('cannot spawn'), run.stdout);
    assert.ok(!run.stderr.includes('already filled'), run.stderr);
  });

  it('--respawn where the hostfile allows no process beyond its slots (max_slots): one line says so, and the survivors go on, the same bits', async () => {
    const hostfile = path.join(scratch, 'two-slots-at-most');
    fs.writeFileSync(hostfile, 'localhost slots=2 max_slots=2\n');
    const run = await ftRun(2, ['--hostfile', hostfile], '--respawn', '--drill', 'rank=1,step=3,phase=compute');
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), [2, 2, 2, ...Array(9).fill(1)]);
    const said = run.stdout.split('\n').filter((line) => line.includes('cannot spawn'));
    assert.equal(said.length, 1, run.stdout);
    assert.match(
      said[0],
      /^\[ft-train\] step 3: cannot spawn a rank to replace the lost: MPI_ERR_\w+: .* \(no host can take it, or an MPI without spawn support\); going on with the survivors, --respawn off$/,
    );
  });

  for (const action of ['kill', 'stop'] as const) {
    const how = action === 'kill' ? 'killed' : 'stopped (SIGSTOP: declared hung and killed)';
    it(`--respawn: the rank that starts the spawn (the leader) ${how} while it launches the spawned rank: the others spawn again, the same bits`, async () => {
      // rank 0 lost first, so rank 1 leads and is the spawn's root
      const drills = ['--drill', 'rank=0,step=3,phase=compute', '--drill', `rank=1,step=3,phase=spawning,action=${action}`];
      const run = await ftRun(4, [], ...respawnWaiting, ...(action === 'stop' ? respawnHangTimeout : []), ...drills);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
      assert.deepEqual(worlds(run), [4, 4, 4, 2, ...Array(8).fill(4)]);
      const events = lines<EventRecord>(run, 'events.jsonl');
      assert.deepEqual(
        summaryOf(run).failures.map((f) => [f.step, f.lost]),
        [
          [3, [0]],
          [3, [1]],
        ],
      );
      // said by the survivor that killed it first (another finds it gone), in its log
      if (action === 'stop') assert.ok(logMessages(run.dir).includes('step 3: killed rank(s) 1, declared dead while still running (hung)'));
      // the interrupted spawn's ids are not reused: its processes may still be starting
      const spawn = events.find((e) => e.event === 'spawn')!;
      assert.deepEqual(spawn.ranks, [5, 6]);
      assert.deepEqual(events.find((e) => e.event === 'join')!.ranks, [5, 6]);
    });
  }

  it('--respawn: of two newcomers, one stopped (SIGSTOP) during their join: the other, leaving, kills it first, so that the runtime does not wake it into an abort; both replaced, the same bits', async () => {
    const run = await ftRun(
      4,
      [],
      ...respawnWaiting,
      ...['--hang-timeout', '3', '--drill', 'rank=1,step=3,phase=compute', '--drill', 'rank=2,step=3,phase=compute'],
      ...['--drill', 'rank=5,step=3,phase=join,action=stop'],
    );
    assert.equal(run.code, 0, run.stderr);
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    // woken by the runtime once rank 4 had died, after the survivors had declared it dead, rank 5 aborted with a stack trace
    assert.ok(!/mark_as_failed|Signal: Aborted/.test(run.stderr), run.stderr);
    assert.deepEqual(
      summaryOf(run).failures.map((f) => [f.step, f.lost]),
      [
        [3, [1, 2]],
        [4, [4, 5]],
      ],
    );
    assert.equal(worlds(run).at(-1), 4);
  });

  it('--respawn: a newcomer stopped (SIGSTOP) during its join is found stopped after the deadline, killed, and replaced: the same bits', async () => {
    const run = await ftRun(
      4,
      [],
      ...respawnWaiting,
      '--hang-timeout',
      '2',
      '--drill',
      'rank=0,step=3,phase=compute',
      '--drill',
      'rank=4,step=3,phase=join,action=stop',
    );
    assert.equal(run.code, 0, run.stderr);
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.deepEqual(worlds(run), [4, 4, 4, 3, 3, ...Array(7).fill(4)]);
    // said by the survivor that found it first (another finds it gone), in its log
    assert.ok(
      logMessages(run.dir).includes('step 4: killed rank(s) 4, found stopped when a wait on them ran past its deadline'),
      logMessages(run.dir).join('\n'),
    );
    assert.deepEqual(
      summaryOf(run).failures.map((f) => [f.step, f.lost]),
      [
        [3, [0]],
        [4, [4]],
      ],
    );
    const joins = lines<EventRecord>(run, 'events.jsonl').filter((e) => e.event === 'join');
    assert.deepEqual(
      joins.map((e) => e.ranks),
      [[5]],
    );
  });

  it('--respawn: every rank the job started lost, a spawned rank leads at the end and removes the checkpoint directory the run made for its spare alone', async () => {
    const run = await ftRun(
      4,
      [],
      ...respawnWaiting,
      '--jit-checkpoint',
      'off',
      '--checkpoint-every',
      '100',
      ...[0, 1, 2, 3].flatMap((rank) => ['--drill', `rank=${rank},step=${2 * rank + 2},phase=compute`]),
    );
    assert.equal(run.code, 0, run.stderr);
    assert.equal(summaryOf(run).params_sha256, reference.get('sgd'));
    assert.deepEqual(
      summaryOf(run).failures.map((f) => f.lost),
      [[0], [1], [2], [3]],
    );
    assert.ok(
      !fs.existsSync(path.join(run.dir, 'ckpt')),
      `left: ${fs.existsSync(path.join(run.dir, 'ckpt')) && fs.readdirSync(path.join(run.dir, 'ckpt'))}`,
    );
  });

  it('--respawn: a rank killed at the last step: the run ends before its newcomer has started, which finds itself given up and leaves at once instead of waiting out its start-up deadline', async () => {
    // at --hang-timeout 60 that deadline (3T) and ft-run's grace for mpirun run past this test's own timeout
    const run = await ftRun(4, [], '--respawn', '--hang-timeout', '60', '--drill', 'rank=1,step=11,phase=compute');
    assert.equal(run.code, 0, run.stderr);
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference.get('sgd'));
    assert.equal(summary.world_final, 3);
    const spawn = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'spawn')!;
    assert.deepEqual([spawn.step, spawn.ranks], [11, [4]]);
    // given up before it wrote its pid file it leaves by itself; after, the survivors killed it by
    // that file; on a loaded machine the job may end before its process even started
    const log = path.join(run.dir, 'logs', 'rank-4.log');
    const left =
      fs.existsSync(log) &&
      fs
        .readFileSync(log, 'utf8')
        .includes('rank 4: spawned, but cannot join: the ranks that spawned it gave it up before it started; leaving');
    if (!left && fs.existsSync(path.join(run.dir, 'pids', '4'))) assertGone(run, 4);
  });

  it('--respawn: the last rank of the job stopped (SIGSTOP) as it accepts its newcomer: the newcomer, its start-up past its deadline, kills the stopped rank, and the job ends without a summary', async () => {
    // no detector is left to declare rank 0 hung: without the newcomer, mpirun would wait for it for
    // good (plain mpirun, without launch/ft-run's own watch for stopped ranks, which acts later)
    const run = await train(
      2,
      ...respawnWaiting,
      ...['--hang-timeout', '2', '--drill', 'rank=1,step=3,phase=compute', '--drill', 'rank=0,step=4,phase=accept,action=stop'],
    );
    assert.notEqual(run.code, 0);
    assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')));
    for (const rank of [0, 2]) assertGone(run, rank);
    assert.match(
      fs.readFileSync(path.join(run.dir, 'logs', 'rank-2.log'), 'utf8'),
      /rank 2: spawned, but cannot join: MPI start-up did not return within 10000 ms: .* \(killed rank\(s\) 0 of the job, found stopped\); leaving\n$/,
    );
  });

  it('launch/drill --chaos: a random working rank killed every quarter of the run, respawned ones too; the same bits as without', async () => {
    const args = [...lenetOnFashion, '--steps', '320', '--batch', '64', '--shards', '4', ...fewTestSamples];
    const calm = await runTrain(4, [...args, '--run-dir', path.join(scratch, 'chaos-calm')], 150_000);
    // a kill every quarter of the calm run's training, so that two or more land at any speed of this machine
    const calmSteps = lines<StepRecord>({ dir: path.join(scratch, 'chaos-calm'), ...calm }, 'metrics.jsonl');
    const every = Math.max(0.1, Math.round((calmSteps[calmSteps.length - 1].time - calmSteps[0].time) / 400) / 10);
    const dir = path.join(scratch, 'chaos');
    const job = await runLaunchDrill(
      ['-n', '4', '--chaos', String(every), '--', ...args, '--run-dir', dir, '--respawn', '--respawn-limit', '50'],
      150_000,
    );
    assert.equal(job.code, 0, job.stdout + job.stderr);
    const drill = JSON.parse(fs.readFileSync(path.join(dir, 'drill.json'), 'utf8')) as {
      chaos: { rank: number; step: number; pid: number; time: number }[];
      chaos_every_ms: number;
    };
    assert.equal(drill.chaos_every_ms, every * 1000);
    assert.ok(drill.chaos.length >= 2, `${drill.chaos.length} kill(s), one every ${every} s`);
    const summary = summaryOf({ dir, ...job });
    assert.equal(summary.params_sha256, summaryOf({ dir: path.join(scratch, 'chaos-calm'), ...calm }).params_sha256);
    // each kill is a failure of that rank, and each met a job back at 4 working ranks
    assert.deepEqual(
      summary.failures.map((f) => f.lost),
      drill.chaos.map((k) => [k.rank]),
    );
    const metrics = lines<StepRecord>({ dir, ...job }, 'metrics.jsonl');
    for (const kill of drill.chaos) assert.equal(metrics.find((m) => m.step === kill.step)!.world, 4);
    for (const [a, b] of drill.chaos.slice(1).map((k, i) => [drill.chaos[i], k])) assert.ok(b.time - a.time >= every * 1000);
    const period = String(every).replace('.', '\\.');
    assert.match(
      job.stdout,
      new RegExp(`\\[drill\\] PASS: ${drill.chaos.length} chaos kill\\(s\\), one every ${period} s; [34] of 4 ranks finished 320 steps`),
    );
  });
});
