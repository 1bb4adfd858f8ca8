// Silent data corruption at 3 ranks (--verify-every 4): a faulty core (corrupt) or a one-off bit
// flip in a rank's gradient, in the sum it received or in its parameters, on the leader, a middle
// rank or the last, at S = N and S > N, is caught at the first check after it (the last step is
// checked too, and the state after its update: nothing corrupted since the last K-th step reaches
// the results), the rank named and evicted as failed, the survivors rolled back to the last
// verified step, and the run ends with the bits of the run without the fault (which the check itself does not change). Also: the stops
// where nobody can be named or --on-corruption stop says so, a corruption and a kill during the
// replay (by a respawned rank) and during the eviction's recovery, a rank that joined since the last
// check rolling back with the others, a join that finds a working rank's or a spare's state differs from the leader's rolling
// every rank back; with sharded optimizer state, each chunk checked against its copies (at a
// check, and before a recovery lays them out afresh from it) and rolled back with them; and the mutation check: without
// the check the drill's bits differ. Every fault is a drill at a fixed (rank, step, phase).
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeReport } from '../../src/report/report';
import { readRun } from '../../src/report/run-data';
import type { EventRecord, Summary } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, repoRoot, runCommand, runTrain } from '../helpers/mpi-job';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

/**
 * --respawn, the survivors waiting for the newcomers at the retried step's end: the world's size at
 * each step is known. They wait for a newcomer up to half the comm deadline (1.5 x --hang-timeout):
 * at the 3 s of `common`, 4.5 s, which a newcomer starting on a loaded machine can pass (it is then
 * given up and another spawned, and the drills naming it never fire); 10 s here, since these runs
 * stop no rank, so T costs nothing.
 */
const respawnWaiting = ['--respawn', '--respawn-join', 'wait', '--hang-timeout', '10'];
const scratch = makeScratch('ft-corruption-');
const every = 4;
const steps = 14;
const common = [...lenetOnFashion, '--steps', String(steps), '--hang-timeout', '3', ...fewTestSamples];
let runs = 0;

async function train(ranks: number, ...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(ranks, [...common, '--verify-every', String(every), '--run-dir', dir, ...extra], 120_000);
  assert.equal(job.stragglers, 0, 'processes of the job outlived mpirun');
  return { dir, ...job };
}

/** Through launch/ft-run, which judges by the run directory (mpirun exits 137 once a spawned rank died). */
async function ftRun(ranks: number, ...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const argv = [
    path.join(repoRoot, 'launch', 'ft-run'),
    '-n',
    String(ranks),
    '--',
    ...common,
    '--verify-every',
    String(every),
    '--run-dir',
    dir,
    ...extra,
  ];
  const job = await runCommand(process.execPath, argv, process.env, 150_000, `ft-run -n ${ranks} ${extra.join(' ')}`);
  return { dir, ...job };
}

const corruptionsOf = (run: Run): EventRecord[] => lines<EventRecord>(run, 'events.jsonl').filter((e) => e.event === 'corruption');
const lost = (summary: Summary): number[] => summary.failures.flatMap((f) => f.lost).sort((a, b) => a - b);
/** The first check that sees a fault starting at step k: a gradient at k itself, a state from k + 1 on (the last step is checked too). */
const checkAfter = (k: number): number => Math.min(Math.ceil(k / every) * every, steps - 1);
/** The check before the one at step `check`, which a rollback goes back to. */
const checkBefore = (check: number): number => Math.floor((check - 1) / every) * every;

/** The checkpoints in the run's checkpoint directory, by name. */
const checkpointsOf = (run: Run): string[] => {
  const dir = path.join(run.dir, 'ckpt');
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((name) => name.startsWith('step-')) : [];
};

/** The job stopped for a corruption at `step` with exit 1 and `line`, nothing written as complete. */
function assertStopped(run: Run, step: number, line: string): void {
  assert.equal(run.code, 1, `${run.stdout}\n${run.stderr}`);
  assert.ok(run.stdout.includes(line), run.stdout);
  assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')));
  assert.deepEqual(
    lines<EventRecord>(run, 'events.jsonl')
      .filter((e) => e.event === 'stop')
      .map((e) => [e.step, e.reason]),
    [[step, 'corruption']],
  );
}

describe('silent data corruption: caught, the culprit evicted, the bits still exact', function () {
  this.timeout(600_000);
  const baseline = new Map<number, string>();

  before(async () => {
    // S = N without the check, S > N with it: the check changes no bits (both are compared against below)
    baseline.set(3, summaryOf(await train(3, '--verify-every', '0')).params_sha256);
    baseline.set(7, summaryOf(await train(3, '--shards', '7')).params_sha256);
  });
  after(() => removeScratch(scratch));

  /** Finished with the baseline's bits, `rank` evicted at the check of step `check` and the steps since the last one replayed. */
  function assertRepaired(run: Run, shards: number, rank: number, check: number, differed: RegExp): void {
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, baseline.get(shards), `${run.dir}: the parameters differ from the run without the fault`);
    assert.deepEqual(lost(summary), [rank]);
    assert.equal(summary.corruptions, 1);
    const [event] = corruptionsOf(run);
    assert.deepEqual(
      [event.step, event.ranks, event.action, event.rolled_back],
      [check, [rank], 'evict', check - checkBefore(check)],
      JSON.stringify(event),
    );
    assert.match(String((event.differed as string[])[0]), differed);
    // the report reads the replayed steps as a rollback, not a resume: every step once
    const read = readRun(run.dir);
    assert.deepEqual(
      read.steps.map((s) => s.step),
      Array.from({ length: steps }, (_, i) => i),
    );
    assert.deepEqual([read.resumes, read.corruptions.map((c) => [c.step, c.to, c.ranks])], [[], [[check, checkBefore(check), [rank]]]]);
  }

  const cases: [phase: string, rank: number, step: number, shards: number][] = [
    ['compute', 0, 3, 7],
    ['compute', 2, 5, 3],
    ['collective', 1, 6, 3],
    ['collective', 0, 2, 7],
    ['update', 2, 2, 7],
    ['update', 1, 5, 3],
    // from the last step on, between two K-th steps: the last step's own check
    ['compute', 1, steps - 1, 3],
  ];
  for (const [phase, rank, step, shards] of cases) {
    it(`corrupt at ${phase} on rank ${rank} from step ${step}, S = ${shards}: rank ${rank} evicted at the next check, the same bits`, async () => {
      const run = await train(3, '--shards', String(shards), '--drill', `rank=${rank},step=${step},phase=${phase},action=corrupt`);
      const check = phase === 'compute' ? checkAfter(step) : checkAfter(step + 1);
      assertRepaired(run, shards, rank, check, phase === 'compute' ? /^gradient of shard \d+$/ : /^state$/);
      assert.match(run.stdout, new RegExp(`step ${check}: silent data corruption: evicting rank ${rank} \\(`));
    });
  }

  it('a flip of the parameters, of the optimizer state, and of a gradient at a checked step, once each: caught, the same bits; the report marks it', async () => {
    const flipped = await train(3, '--drill', 'rank=1,step=5,phase=update,action=flip');
    assertRepaired(flipped, 3, 1, 8, /^state$/);
    const html = path.join(flipped.dir, 'report.html');
    await writeReport({ title: 'flip', runs: [readRun(flipped.dir)], skipped: [] }, html);
    const page = fs.readFileSync(html, 'utf8');
    assert.ok(page.includes('rank(s) 1: state; evicted, rolled back to step 4'), 'the timeline marks the corruption');
    assert.ok(page.includes('1 (1 recovery), 1 corruption found'), 'the summary table counts it');
    // the optimizer state (SGD's momentum), replicated on every rank, is in the state digest
    assertRepaired(await train(3, '--drill', 'rank=0,step=9,phase=update,action=flip,target=state'), 3, 0, 12, /^state$/);
    // at S = N every shard is recomputed at every check
    assertRepaired(await train(3, '--drill', 'rank=2,step=8,phase=compute,action=flip'), 3, 2, 8, /^gradient of shard 2$/);
  });

  it("a flip in the last step's update, after that step's own check: the final state's check names the rank, the last step is done again, the same bits", async () => {
    for (const [rank, extra] of [
      [0, []],
      [2, ['--optimizer', 'adamw', '--optimizer-state', 'sharded', '--redundancy', 'replicate:2']],
    ] as const) {
      const run = await train(3, ...extra, '--drill', `rank=${rank},step=${steps - 1},phase=update,action=flip`);
      const clean = extra.length === 0 ? baseline.get(3) : summaryOf(await train(3, ...extra)).params_sha256;
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, clean, run.dir);
      assert.deepEqual([lost(summary), summary.corruptions], [[rank], 1], run.dir);
      const [event] = corruptionsOf(run);
      assert.deepEqual([event.step, event.ranks, event.action, event.rolled_back], [steps, [rank], 'evict', 1], JSON.stringify(event));
      assert.match(
        run.stdout,
        new RegExp(
          `step ${steps}: silent data corruption: evicting rank ${rank} \\(state\\); rolling back to step ${steps - 1}, the last verified`,
        ),
      );
    }
  });

  it('a flip of a gradient between checks goes unseen (the documented gap), and without the check a faulty core changes the bits', async () => {
    const unseen = summaryOf(await train(3, '--drill', 'rank=1,step=5,phase=compute,action=flip'));
    assert.deepEqual([unseen.corruptions, lost(unseen)], [0, []]);
    assert.notEqual(unseen.params_sha256, baseline.get(3));
    // the mutation check: the drills above with the comparison off end in other bits
    const unchecked = summaryOf(await train(3, '--verify-every', '0', '--drill', 'rank=2,step=5,phase=update,action=corrupt'));
    assert.notEqual(unchecked.params_sha256, baseline.get(3));
  });

  it('two ranks: nobody can be named, so the job stops with one line naming both, exit 1, nothing written', async () => {
    const run = await train(2, '--drill', 'rank=1,step=2,action=corrupt');
    assert.equal(run.code, 1, `${run.stdout}\n${run.stderr}`);
    const line =
      "silent data corruption found at step 4: ranks 0 and 1 computed shard 1's gradient with different bits, and no third rank can tell which is wrong; stopping";
    assert.ok(run.stdout.includes(line), run.stdout);
    assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')));
    assert.ok(
      !fs.existsSync(path.join(run.dir, 'ckpt')) || fs.readdirSync(path.join(run.dir, 'ckpt')).every((d) => !d.startsWith('step-')),
    );
    assert.deepEqual(
      corruptionsOf(run).map((e) => [e.step, e.ranks, e.action]),
      [[4, [0, 1], 'stop']],
    );
    assert.deepEqual(
      readRun(run.dir).corruptions.map((c) => [c.ranks, c.differed]),
      [[[0, 1], []]],
    );
  });

  it('--on-corruption stop: the suspect named in one line, exit 1; the checkpoint written since the last check, of state no check passed, removed', async () => {
    const drills = ['--checkpoint-every', '3', '--drill', 'rank=2,step=2,phase=update,action=corrupt'];
    const run = await train(3, '--on-corruption', 'stop', ...drills);
    assertStopped(run, 4, 'silent data corruption found at step 4: rank 2 (state) corrupt (--on-corruption stop); stopping');
    // step 3's checkpoint holds the state step 2's update corrupted: a resume from it would go on with it
    assert.deepEqual(checkpointsOf(run), []);
  });

  it("a kill during the eviction's recovery: repaired again, the same bits", async () => {
    const run = await train(3, '--drill', 'rank=1,step=5,action=corrupt', '--drill', 'rank=2,step=4,phase=recovery,action=kill');
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, baseline.get(3));
    assert.deepEqual([lost(summary), summary.world_final], [[1, 2], 1]);
  });

  it('--respawn: a newcomer that corrupts during the replay is evicted in turn, one killed during the replay is replaced, the same bits', async () => {
    const corrupt = await ftRun(
      3,
      ...respawnWaiting,
      '--drill',
      'rank=1,step=5,action=corrupt',
      '--drill',
      'rank=3,step=6,phase=update,action=corrupt',
    );
    const summary = summaryOf(corrupt);
    assert.equal(summary.params_sha256, baseline.get(3));
    assert.deepEqual([lost(summary), summary.world_final, summary.corruptions], [[1, 3], 3, 2]);
    assert.deepEqual(
      corruptionsOf(corrupt).map((e) => [e.step, e.ranks, e.rolled_back]),
      [
        [8, [1], 4],
        [8, [3], 4],
      ],
    );
    const killed = summaryOf(
      await ftRun(3, ...respawnWaiting, '--drill', 'rank=1,step=5,action=corrupt', '--drill', 'rank=3,step=6,action=kill'),
    );
    assert.equal(killed.params_sha256, baseline.get(3));
    assert.deepEqual([lost(killed), killed.world_final], [[1, 3], 3]);
  });

  it('a rank that joined after the last check (respawned, or a spare) rolls back with the others: the join gave it the verified state', async () => {
    const respawned = summaryOf(
      await ftRun(3, ...respawnWaiting, '--drill', 'rank=2,step=5,action=kill', '--drill', 'rank=1,step=6,action=corrupt'),
    );
    assert.equal(respawned.params_sha256, baseline.get(3));
    assert.deepEqual([lost(respawned), respawned.world_final, respawned.corruptions], [[1, 2], 3, 1]);
    const spare = summaryOf(
      await train(4, '--spares', '1', '--drill', 'rank=2,step=5,action=kill', '--drill', 'rank=1,step=6,action=corrupt'),
    );
    assert.equal(spare.params_sha256, baseline.get(3));
    assert.deepEqual([lost(spare), spare.world_final, spare.corruptions], [[1, 2], 2, 1]);
  });

  it("a flip on the leader, then a join before the next check (a spare, or a respawned rank): the join finds the working ranks' states differ from the leader's and all roll back, the same bits; with --on-corruption stop, all stop", async () => {
    // the flip in step 5's update corrupts the leader's state at step 6's start; rank 1 killed at
    // step 6: the join would give every rank the leader's state, and the check at 8 would pass
    const drills = ['--drill', 'rank=0,step=5,phase=update,action=flip', '--drill', 'rank=1,step=6'];
    // with 2 working ranks, the spare alone holds a copy to compare with the leader's
    const joins = [
      () => train(4, '--spares', '1', ...drills),
      () => train(3, '--spares', '1', '--shards', '3', ...drills),
      () => ftRun(3, ...respawnWaiting, ...drills),
    ];
    for (const join of joins) {
      const run = await join();
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, baseline.get(3), run.dir);
      assert.deepEqual([lost(summary), summary.corruptions], [[1], 1], run.dir);
      // the join at the retried step 6 (a spare) or at its end (the newcomer, waited for: 7)
      const [event] = corruptionsOf(run);
      const joined = event.step as number;
      assert.deepEqual([event.ranks, event.action, event.rolled_back], [[], 'rollback', joined - 4], JSON.stringify(event));
      assert.match(
        run.stdout,
        new RegExp(
          `step ${joined}: silent data corruption: at the join, ranks held states other than the leader's; rolling back to step 4, the last verified, and replaying ${joined - 4} step\\(s\\)`,
        ),
      );
      const read = readRun(run.dir);
      assert.deepEqual([read.resumes, read.corruptions.map((c) => [c.step, c.to])], [[], [[joined, 4]]]);
    }
    // --on-corruption stop: every rank stops instead, one line, nothing written as complete
    const stopped = await train(4, '--spares', '1', '--on-corruption', 'stop', ...drills);
    assertStopped(
      stopped,
      6,
      "silent data corruption found at step 6: at the join, ranks held states other than the leader's (--on-corruption stop); stopping",
    );
    const html = path.join(stopped.dir, 'report.html');
    await writeReport({ title: 'join', runs: [readRun(stopped.dir)], skipped: [] }, html);
    assert.ok(fs.readFileSync(html, 'utf8').includes('states differed at a join; stopped'), 'the timeline marks the stop');
  });

  it('a custom loop (elastic(), its own update from sum()): the rank evicted, its registered state rolled back, the same bits', async () => {
    const loop = async (...extra: string[]): Promise<Summary> => {
      const dir = path.join(scratch, `run-${++runs}`);
      const script = path.join(repoRoot, 'dist', 'examples', 'custom-loop', 'mlp.js');
      const argv = [path.join(repoRoot, 'launch', 'ft-run'), '-n', '3', '--script', script, '--'];
      const flags = ['--run-dir', dir, '--steps', '14', '--shards', '3', '--hang-timeout', '3', ...extra];
      return summaryOf({ dir, ...(await runCommand(process.execPath, [...argv, ...flags], process.env, 120_000, 'mlp.js')) });
    };
    const clean = await loop('--verify-every', '0');
    const repaired = await loop('--verify-every', String(every), '--drill', 'rank=1,step=5,action=corrupt');
    assert.equal(repaired.params_sha256, clean.params_sha256);
    assert.deepEqual([lost(repaired), repaired.corruptions], [[1], 1]);
  });

  describe('with sharded optimizer state (AdamW)', () => {
    const sharded = ['--optimizer', 'adamw', '--optimizer-state', 'sharded'];
    const reference = new Map<number, string>();

    before(async () => {
      reference.set(3, summaryOf(await train(3, ...sharded)).params_sha256);
      reference.set(4, summaryOf(await train(4, ...sharded, '--verify-every', '0')).params_sha256);
    });

    it('a faulty core under replicate:2 and ec:2+1, and the collective corrupted: evicted, the chunks rolled back, the same bits', async () => {
      for (const extra of [
        ['--drill', 'rank=1,step=5,action=corrupt'],
        ['--redundancy', 'ec:2+1', '--drill', 'rank=2,step=3,action=corrupt'],
        ['--drill', 'rank=0,step=6,phase=collective,action=corrupt'],
      ]) {
        const summary = summaryOf(await train(3, ...sharded, ...extra));
        assert.equal(summary.params_sha256, reference.get(3), extra.join(' '));
        assert.equal(summary.corruptions, 1);
      }
    });

    it('a flipped chunk of optimizer state: under replicate:3 its holder is evicted; under replicate:2 nobody can be named, so the job stops', async () => {
      const three = await train(
        3,
        ...sharded,
        '--redundancy',
        'replicate:3',
        '--drill',
        'rank=2,step=5,phase=update,action=flip,target=state',
      );
      assert.equal(summaryOf(three).params_sha256, reference.get(3));
      const [event] = corruptionsOf(three);
      assert.deepEqual([event.step, event.ranks, event.differed], [8, [2], ["optimizer state of chunk 2 (rank 2's)"]]);
      const two = await train(3, ...sharded, '--drill', 'rank=2,step=5,phase=update,action=flip,target=state');
      assert.equal(two.code, 1, `${two.stdout}\n${two.stderr}`);
      assert.match(
        two.stdout,
        /silent data corruption found at step 8: ranks [01] and 2 hold the optimizer state of chunk 2 \(rank 2's\) with different bits, and no majority of copies can tell which is wrong; stopping/,
      );
    });

    it("a flip on the leader, then a spare joins in a kill's place before the next check: the spare, which holds no chunk of the verified layout, rolls back with the others, the same bits", async () => {
      const drills = ['--drill', 'rank=0,step=5,phase=update,action=flip', '--drill', 'rank=1,step=6'];
      const run = await train(3, ...sharded, '--spares', '1', '--shards', '3', ...drills);
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, reference.get(3));
      assert.deepEqual(
        [lost(summary), summary.corruptions, corruptionsOf(run).map((e) => [e.step, e.action])],
        [[1], 1, [[6, 'rollback']]],
      );
    });

    it("a flipped chunk of optimizer state, then a kill before the next check: the copies, compared before the recovery lays them out afresh from the owner's chunk, differ; all roll back, the same bits", async () => {
      const drills = ['--drill', 'rank=0,step=5,phase=update,action=flip,target=state', '--drill', 'rank=2,step=6'];
      const run = await train(4, ...sharded, ...drills);
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, reference.get(4));
      assert.deepEqual([lost(summary), corruptionsOf(run).map((e) => [e.step, e.action, e.rolled_back])], [[2], [[6, 'rollback', 2]]]);
      assert.match(
        run.stdout,
        /step 6: silent data corruption: before the recovery's rebuild, copies of chunk\(s\) 0 of sharded optimizer state differed; rolling back to step 4, the last verified, and replaying 2 step\(s\)/,
      );
      // the recovery's own line, after the rollback: the loss, and the rows of the step computed next
      assert.match(
        run.stdout,
        /\[ft-train\] step 4: lost rank\(s\) 2; read back the next step's \d+ bytes in [\d.]+ ms \(the rest of the lost shards in the background\); 3 ranks work\n/,
      );
    });

    it('the same flip and kill, then a second kill that cuts the comparison of the copies short: compared again after the repair, they differ; the same bits', async () => {
      const drills = ['--drill', 'rank=0,step=5,phase=update,action=flip,target=state', '--drill', 'rank=2,step=6'];
      const run = await train(4, ...sharded, '--redundancy', 'replicate:3', ...drills, '--drill', 'rank=3,step=6,phase=copies');
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, reference.get(4));
      assert.deepEqual([lost(summary), corruptionsOf(run).map((e) => [e.step, e.action, e.rolled_back])], [[2, 3], [[6, 'rollback', 2]]]);
      assert.match(
        run.stdout,
        /step 6: silent data corruption: before the recovery's rebuild, copies of chunk\(s\) 0 of sharded optimizer state differed/,
      );
    });

    it("with --on-corruption stop, the copies that differ before the recovery's rebuild stop every rank; the checkpoint written since the last check, holding the flipped chunk, removed", async () => {
      const drills = ['--drill', 'rank=1,step=4,phase=update,action=flip,target=state', '--drill', 'rank=2,step=6'];
      const run = await train(
        4,
        ...sharded,
        '--redundancy',
        'replicate:3',
        '--on-corruption',
        'stop',
        '--checkpoint-every',
        '5',
        ...drills,
      );
      assertStopped(
        run,
        6,
        "silent data corruption found at step 6: before the recovery's rebuild, copies of chunk(s) 1 of sharded optimizer state differed (--on-corruption stop); stopping",
      );
      assert.deepEqual(checkpointsOf(run), []);
    });

    it('a rank lost since the last check: the rollback rebuilds from the copies of then, with a respawned rank or a spare, the same bits', async () => {
      const respawned = summaryOf(
        await ftRun(4, ...sharded, ...respawnWaiting, '--drill', 'rank=3,step=5,action=kill', '--drill', 'rank=1,step=6,action=corrupt'),
      );
      assert.equal(respawned.params_sha256, reference.get(4));
      assert.deepEqual([lost(respawned), respawned.world_final], [[1, 3], 4]);
      const spare = summaryOf(
        await train(5, ...sharded, '--spares', '1', '--drill', 'rank=3,step=5,action=kill', '--drill', 'rank=1,step=6,action=corrupt'),
      );
      assert.equal(spare.params_sha256, reference.get(4));
      assert.deepEqual([lost(spare), spare.world_final], [[1, 3], 3]);
    });

    it('more ranks lost since the last check than its copies cover: one line, exit 3 (the limit of rolling back sharded state)', async () => {
      // replicate:2 at 4 ranks keeps chunks 0 and 1 on ranks 0 and 1 alone (group placement)
      const run = await train(4, ...sharded, '--drill', 'rank=0,step=5,action=kill', '--drill', 'rank=1,step=6,action=corrupt');
      assert.equal(run.code, 3, `${run.stdout}\n${run.stderr}`);
      assert.match(
        run.stdout,
        /the optimizer state of rank\(s\) 0, 1 \(chunk\(s\) 0, 1 of 4\) is lost: no copy of it survives in memory under --redundancy replicate:2/,
      );
    });
  });
});
