// Slow ranks (--rebalance auto) at 3 ranks (2 where it matters that each has a core): a rank slowed by a drill (action=slow, a fixed (rank,
// step)) is found after the warm-up and its shards moved to faster ranks at a step end, every rank
// alike; the leader, a middle rank or the last; slowness that comes and goes (the map follows, no
// two changes closer than --slow-steps); a kill during a rebalance and a kill of the slow rank; with
// sharded optimizer state (its chunks stay where they are); at S = N (nothing to move) and with a
// spare, which takes the place of a rank evicted for staying far slower, and one kept through a
// rebalance, which judges the checks for corruption alike. Every run ends with the
// bits of the same run without the slowness, and reads from disk only the shards a rank had never
// held (worked out from the rebalance events). In shrink mode moving shards would change the
// samples each rank trains on: it is refused, and a slow rank there only costs time.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ShardMap } from '../../src/data/shard-map';
import { writeReport } from '../../src/report/report';
import { readRun } from '../../src/report/run-data';
import type { EventRecord } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, runLaunchDrill, runTrain } from '../helpers/mpi-job';
import { readbackBytes } from '../helpers/readback';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-slow-');
const common = [...lenetOnFashion, '--steps', '24', '--hang-timeout', '3', ...fewTestSamples];
let runs = 0;
/** The steps a moved shard's background pass is given to finish before the end (it reads 1 MiB at a time while training goes on). */
const passSteps = 8;

async function train(ranks: number, ...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(ranks, [...common, '--run-dir', dir, ...extra], 150_000);
  assert.equal(job.stragglers, 0, 'processes of the job outlived mpirun');
  return { dir, ...job };
}

const slow = (rank: number, step: number, factor: number): string[] => [
  '--drill',
  `rank=${rank},step=${step},action=slow,factor=${factor}`,
];
const rebalances = (run: Run): EventRecord[] => lines<EventRecord>(run, 'events.jsonl').filter((e) => e.event === 'rebalance');
const counts = (event: EventRecord, key: 'before' | 'after'): Map<number, number> =>
  new Map((event.ranks as number[]).map((r, i) => [r, (event[key] as number[])[i]]));

/** The shards a rank was given by the rebalances that it had never held: all the run reads from disk without a failure. */
function neverHeld(run: Run, shards: number, ranks: number): number[] {
  let map = ShardMap.initial(
    shards,
    Array.from({ length: ranks }, (_, r) => r),
  );
  const had = map.owners.map((owner) => new Set([owner]));
  const read: number[] = [];
  let previous = map;
  for (const event of rebalances(run)) {
    assert.deepEqual(counts(event, 'before'), map.counts(), `the event's counts before are the map's: ${JSON.stringify(event)}`);
    // an undoing puts back the map before the change it undoes, each moved shard where it came from
    const next = event.undone ? previous : map.withCounts(counts(event, 'after'));
    const moved = [...map.movedTo(next).values()].flat().sort((a, b) => a - b);
    assert.deepEqual(moved, event.shards, `the shards moved: ${JSON.stringify(event)}`);
    [previous, map] = [map, next];
    map.owners.forEach((owner, s) => {
      if (!had[s].has(owner)) read.push(s);
      had[s].add(owner);
    });
  }
  return read;
}

describe('slow ranks: found, their shards moved, the bits unchanged', function () {
  this.timeout(600_000);
  const baseline = new Map<string, string>();

  before(async () => {
    baseline.set('S6', summaryOf(await train(3, '--shards', '6', '--rebalance', 'off')).params_sha256);
    baseline.set('S3', summaryOf(await train(3, '--shards', '3', '--rebalance', 'off')).params_sha256);
  });
  after(() => removeScratch(scratch));

  /**
   * The run finished with `key`'s bits, and read from disk exactly the shards some rank was given
   * and had never held; where the last rebalance came within `passSteps` of the end, no more than
   * them (the end stops a background pass still reading the rows no step has asked for yet).
   */
  async function assertExact(run: Run, key: string, shards: number, ranks: number): Promise<void> {
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, baseline.get(key), `${run.dir}: the parameters differ from the run without the slowness`);
    if (summary.failures.length > 0) return;
    const expected = (await readbackBytes(shards, neverHeld(run, shards, ranks), 0)).total;
    const lastMove = Math.max(-1, ...rebalances(run).map((e) => e.step as number));
    if (lastMove < summary.steps - passSteps) assert.equal(summary.bytes_read_back, expected, 'bytes read from disk');
    else
      assert.ok(
        summary.bytes_read_back <= expected,
        `read ${summary.bytes_read_back} bytes, more than the ${expected} of the shards never held`,
      );
  }

  for (const [who, rank] of [
    ['the leader', 0],
    ['the last rank', 2],
  ] as const) {
    it(`moves shards off ${who} once it is slow, after the warm-up (S > N)`, async () => {
      const run = await train(3, '--shards', '6', ...slow(rank, 3, 8));
      await assertExact(run, 'S6', 6, 3);
      const [first] = rebalances(run);
      // warm-up: steps 0-2 unmeasured; the times of steps 2-4 reach the ranks at steps 3-5: the map changes for step 6
      assert.equal(first.step, 6, JSON.stringify(first));
      assert.ok(counts(first, 'after').get(rank)! < 2, `rank ${rank} keeps fewer shards: ${JSON.stringify(first)}`);
      assert.ok(counts(first, 'after').get(rank)! >= 1, 'a rank keeps one shard');
      const ms = first.ms_per_shard as number[];
      // 8 times slower alone; sharing 2 cores here, the others are slowed too
      assert.ok(ms[rank] > 2 * Math.max(...ms.filter((_, r) => r !== rank)), `rank ${rank} measured slow: ${JSON.stringify(first)}`);
      assert.match(
        run.stdout,
        new RegExp(`step 6: moving \\d shard\\(s\\) off slow ranks; rank: shards \\(time per shard vs the fastest\\) 0: 2->`),
      );
    });
  }

  it('follows slowness that comes and goes, no two changes closer than --slow-steps', async () => {
    // 2 ranks, a core each here; 8 shards, so that the slow rank keeps one and, fast again, has
    // room to take some back: a lone shard's time is the least even measure of a rank's speed here
    // (its backward overlaps the sum, whose sending shares the rank's core), and a rank of one
    // shard measured up to 2x the other's per shard would, at 4 shards, never get one back
    baseline.set('N2', summaryOf(await train(2, '--shards', '8', '--rebalance', 'off')).params_sha256);
    const run = await train(2, '--shards', '8', ...slow(1, 3, 8), ...slow(1, 10, 1));
    await assertExact(run, 'N2', 8, 2);
    const events = rebalances(run);
    assert.ok(events.length >= 2, JSON.stringify(events));
    assert.ok(counts(events[0], 'after').get(1)! < 4);
    // fast again, it gets shards back (a later change, judged by noisy step times, may take one
    // away again: the undo rule's business, tested in the unit tests, not this test's)
    assert.ok(
      events.some((e) => (e.step as number) > 10 && counts(e, 'after').get(1)! > counts(e, 'before').get(1)!),
      `fast again, it gets shards back: ${JSON.stringify(events)}`,
    );
    for (let i = 1; i < events.length; ++i)
      assert.ok((events[i].step as number) - (events[i - 1].step as number) >= 3, JSON.stringify(events));
    // the report draws each rank's shard count from the events
    assert.equal(readRun(run.dir).rebalances.length, events.length);
    const html = path.join(scratch, 'comes-and-goes.html');
    await writeReport({ title: 'slow', runs: [readRun(run.dir)], skipped: [] }, html);
    assert.ok(fs.readFileSync(html, 'utf8').includes('Shards per rank'), 'the report has the chart of shard counts');
  });

  it('launch/drill --slow slows a real process from outside by SIGSTOP/SIGCONT, and ends with it running: found, the same bits', async () => {
    const dir = path.join(scratch, 'external');
    const args = [
      '--model',
      'models/lenet.json',
      '--data',
      'datasets/fashion-mnist',
      '--steps',
      '40',
      '--shards',
      '4',
      '--hang-timeout',
      '3',
    ];
    const plain = summaryOf(await train(2, ...args.slice(4), '--rebalance', 'off')).params_sha256;
    const job = await runLaunchDrill(['-n', '2', '--slow', '1@8:4', '--slow', '1@30:1', '--', ...args, '--run-dir', dir], 150_000);
    assert.equal(job.code, 0, job.stdout + job.stderr);
    // a quarter of the time running: the rebalance cannot miss it
    assert.match(
      job.stdout,
      /\[drill\] PASS: slowed rank 1@8 4x, rank 1 at full speed @30, [1-9]\d* rebalance\(s\); 2 of 2 ranks finished 40 steps/,
    );
    const record = JSON.parse(fs.readFileSync(path.join(dir, 'drill.json'), 'utf8'));
    assert.deepEqual(
      record.slows.map((s: { rank: number; step: number; factor: number }) => [s.rank, s.step, s.factor]),
      [
        [1, 8, 4],
        [1, 30, 1],
      ],
    );
    assert.ok(record.slows.every((s: { pid: number; time: number }) => s.pid > 0 && s.time > 0));
    assert.equal(record.period_ms, 20);
    assert.equal(job.stragglers, 0, 'no process left behind');
    assert.equal(summaryOf({ dir, ...job }).params_sha256, plain);
  });

  it('survives a kill during a rebalance, a kill of the slow rank itself, and a kill after a rebalance that a spare replaces', async () => {
    const during = await train(3, '--shards', '6', ...slow(0, 3, 8), '--drill', 'rank=2,step=6,phase=rebalance');
    await assertExact(during, 'S6', 6, 3);
    assert.deepEqual(
      summaryOf(during).failures.flatMap((f) => f.lost),
      [2],
    );
    assert.equal(rebalances(during)[0].step, 6);
    const slowKilled = await train(3, '--shards', '6', ...slow(1, 3, 8), '--drill', 'rank=1,step=9');
    await assertExact(slowKilled, 'S6', 6, 3);
    assert.deepEqual(
      summaryOf(slowKilled).failures.flatMap((f) => f.lost),
      [1],
    );
    // a spare that takes a place after a rebalance takes the working ranks' map, not the one it started with
    const spared = await train(4, '--shards', '6', '--spares', '1', ...slow(1, 3, 8), '--drill', 'rank=2,step=10');
    await assertExact(spared, 'S6', 6, 3);
    assert.equal(rebalances(spared)[0].step, 6);
    const join = lines<EventRecord>(spared, 'events.jsonl').find((e) => e.event === 'join')!;
    assert.deepEqual([join.step, join.ranks], [10, [3]]);
  });

  it('a spare kept through a rebalance judges the checks for corruption with the working ranks (by what each checker recomputed: its map is not theirs): no failure, the bits', async () => {
    // --evict-slower 0: the spare stays a spare (a rank 8 times slower would be evicted for it)
    const run = await train(4, '--shards', '6', '--spares', '1', ...slow(1, 3, 8), '--verify-every', '8', '--evict-slower', '0');
    await assertExact(run, 'S6', 6, 3);
    // before the check at step 8, whenever the slowness was found (step 6 on an idle machine)
    assert.ok(rebalances(run)[0].step! < 8, JSON.stringify(rebalances(run)[0]));
    const events = lines<EventRecord>(run, 'events.jsonl');
    assert.deepEqual(
      events.filter((e) => ['failure', 'corruption', 'stop'].includes(e.event)),
      [],
    );
    assert.equal(summaryOf(run).world_final, 3);
  });

  it('with sharded optimizer state: the shards move, the chunks stay, the bits are those of the run without it', async () => {
    const sharded = ['--shards', '6', '--optimizer', 'adamw', '--optimizer-state', 'sharded'];
    baseline.set('sharded', summaryOf(await train(3, ...sharded, '--rebalance', 'off')).params_sha256);
    const run = await train(3, ...sharded, ...slow(1, 3, 8));
    await assertExact(run, 'sharded', 6, 3);
    assert.equal(rebalances(run)[0].step, 6);
  });

  it('at S = N nothing moves; a spare takes the place of a rank that stays far slower', async () => {
    const alone = await train(3, '--shards', '3', ...slow(1, 3, 8));
    await assertExact(alone, 'S3', 3, 3);
    assert.deepEqual(rebalances(alone), [], 'one shard each: nothing to move');
    assert.deepEqual(summaryOf(alone).failures, [], 'no spare: the slow rank stays');

    // 24 times slower, 6 times the --evict-slower of 4: at 8 times, one step whose other shards took
    // over twice the slow rank's own time (4 processes on 2 cores) broke the 12-step streak, once in
    // a CI run (no eviction by step 24)
    const spared = await train(4, '--shards', '3', '--spares', '1', ...slow(1, 3, 24));
    await assertExact(spared, 'S3', 3, 3);
    const [failure] = summaryOf(spared).failures;
    assert.deepEqual(failure.lost, [1]);
    // measured from step 3's times (at step 4), 4 x --slow-steps = 12 steps in a row: evicted at step 15's end
    assert.equal(failure.step, 16);
    assert.match(
      spared.stdout,
      /step 16: rank 1 computed \d+\.\dx slower than the others at 12 steps in a row: evicting it for a rank to take its place/,
    );
    const events = lines<EventRecord>(spared, 'events.jsonl');
    assert.ok(events.some((e) => e.event === 'failure' && e.error === 'SlowRank' && e.phase === 'rebalance'));
    assert.ok(events.some((e) => e.event === 'join' && (e.ranks as number[]).includes(3)));
  });

  it('in shrink mode moves nothing (it would change the samples): the slow rank only costs time', async () => {
    const shrink = ['--shards', '3', '--on-failure', 'shrink', '--batch', '48'];
    const plain = summaryOf(await train(3, ...shrink)).params_sha256;
    const run = await train(3, ...shrink, ...slow(2, 3, 4));
    assert.equal(summaryOf(run).params_sha256, plain);
    assert.deepEqual(rebalances(run), []);
  });
});
