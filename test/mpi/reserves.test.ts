// Reserves (--reserves R, with --respawn): the launch's last R ranks sleep outside the world until
// woken, one at a time and in launch order, to take a lost rank's place before any rank is
// spawned. A woken reserve joins as a spawned rank does; the ones never woken are dismissed at the
// end, and leave by themselves once every rank before them in the launch is gone. A reserve killed
// or stopped as it is woken is given up and the next one woken; one woken whose wakers all die
// gives up its connect at its own deadline, and kills those of them it finds stopped (hung). Every run that finishes ends with the bits of the run
// without failure, and none leaves a process behind.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { processStat, readPid } from '../../src/run/pids';
import type { EventRecord, StepRecord } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, runTrain, type JobResult } from '../helpers/mpi-job';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-reserves-');
const common = [...lenetOnFashion, '--steps', '12', '--batch', '64', '--shards', '4', ...fewTestSamples];
/** the survivors wait for the newcomer at the retried step's end: the world's size at each step is known */
const waiting = ['--respawn', '--respawn-join', 'wait'];
let runs = 0;

type Job = Run & Pick<JobResult<never>, 'stragglers'>;

async function train(ranks: number, ...extra: string[]): Promise<Job> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(ranks, [...common, '--run-dir', dir, ...extra], 150_000);
  return { dir, ...job };
}

/** The working world of each committed step, in step order. */
function worlds(run: Run): number[] {
  return lines<StepRecord>(run, 'metrics.jsonl').map((r) => r.world);
}

/** The spawn events: the ids each gave, and the launch rank of the reserve woken (undefined: spawned). */
function spawns(run: Run): { ranks: number[]; reserve?: number }[] {
  return lines<EventRecord>(run, 'events.jsonl')
    .filter((e) => e.event === 'spawn')
    .map((e) => ({ ranks: e.ranks as number[], reserve: e.reserve as number | undefined }));
}

/** The job ended well and left nothing running (the reserves never woken were dismissed). */
function assertClean(run: Job): void {
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stragglers, 0);
}

describe('reserves: ranks of the launch asleep until woken', function () {
  this.timeout(600_000);
  let reference = '';

  after(() => removeScratch(scratch));

  before(async () => {
    reference = summaryOf(await train(4)).params_sha256;
  });

  it('4 ranks + 2 reserves, kill -9 of rank 2: the first reserve takes its place at the retried step, the other is dismissed', async () => {
    const run = await train(6, ...waiting, '--reserves', '2', '--drill', 'rank=2,step=3,phase=compute');
    assertClean(run);
    assert.equal(summaryOf(run).params_sha256, reference);
    assert.deepEqual(worlds(run), [4, 4, 4, 3, ...Array(8).fill(4)]);
    assert.deepEqual(spawns(run), [{ ranks: [4], reserve: 4 }]);
    const admit = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'admit')!;
    // recorded at the retried step's end, as the next step starts
    assert.deepEqual([admit.step, admit.ranks], [4, [4]]);
  });

  it('2 ranks + 1 reserve, two kills: the reserve takes the first place, a spawned rank the second', async () => {
    const run = await train(
      3,
      ...waiting,
      '--reserves',
      '1',
      '--drill',
      'rank=1,step=3,phase=compute',
      '--drill',
      'rank=2,step=6,phase=compute',
    );
    assertClean(run);
    assert.equal(summaryOf(run).params_sha256, reference);
    assert.deepEqual(worlds(run), [2, 2, 2, 1, 2, 2, 1, 2, 2, 2, 2, 2]);
    assert.deepEqual(spawns(run), [
      { ranks: [2], reserve: 2 },
      { ranks: [3], reserve: undefined },
    ]);
  });

  it('two ranks lost at one step, 2 reserves: woken one at a time, the world back to 4 ranks', async () => {
    const run = await train(
      6,
      ...waiting,
      '--reserves',
      '2',
      '--drill',
      'rank=1,step=3,phase=compute',
      '--drill',
      'rank=2,step=3,phase=compute',
    );
    assertClean(run);
    assert.equal(summaryOf(run).params_sha256, reference);
    const sizes = worlds(run);
    assert.deepEqual(sizes.slice(0, 4), [4, 4, 4, 2]);
    assert.equal(sizes[sizes.length - 1], 4);
    assert.ok(sizes.every((size) => size <= 4));
    assert.deepEqual(spawns(run), [
      { ranks: [4], reserve: 4 },
      { ranks: [5], reserve: 5 },
    ]);
  });

  for (const action of ['kill', 'stop']) {
    it(`a reserve ${action === 'kill' ? 'killed' : 'stopped'} as it is woken is given up, and the next one woken`, async () => {
      const run = await train(
        6,
        ...waiting,
        // the stopped one is given up after half the comm deadline (3 x T); at T = 2 a loaded
        // machine once overran one of the waits around it, and the give-up came from a recovery
        ...['--hang-timeout', '4', '--reserves', '2'],
        ...['--drill', 'rank=2,step=3,phase=compute', '--drill', `rank=4,step=3,phase=woken,action=${action}`],
      );
      assertClean(run);
      assert.equal(summaryOf(run).params_sha256, reference);
      assert.deepEqual(spawns(run), [
        { ranks: [4], reserve: 4 },
        { ranks: [5], reserve: 5 },
      ]);
      const lost = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'spawn-lost')!;
      assert.deepEqual(lost.ranks, [4]);
      assert.match(run.stdout, /step 3: lost rank\(s\) 2; .*; rank\(s\) 4 woken, to join once ready/);
      assert.match(
        run.stdout,
        /step 4: woken rank\(s\) 4 lost before joining \(died, or not ready within 6 s\); waking or spawning another/,
      );
      assert.equal(worlds(run).at(-1), 4);
    });
  }

  it('the leader killed as it wakes a reserve: the next one is woken, a rank spawned, and the one never woken dismissed', async () => {
    const run = await train(
      6,
      ...waiting,
      '--reserves',
      '2',
      '--drill',
      'rank=2,step=3,phase=compute',
      '--drill',
      'rank=0,step=3,phase=spawning',
    );
    assertClean(run);
    assert.equal(summaryOf(run).params_sha256, reference);
    // the wake of launch rank 4 (id 4) died with the leader: id 5 went to launch rank 5, id 6 was spawned
    assert.deepEqual(spawns(run), [
      { ranks: [5], reserve: 5 },
      { ranks: [6], reserve: undefined },
    ]);
    assert.equal(worlds(run).at(-1), 4);
  });

  /**
   * 3 ranks + 1 reserve: rank 1 killed at step 3 (reserve 2 woken), then rank 0 hit by `action` as
   * it accepts it at step 4: the job ends with no summary, and neither rank 0 nor the woken reserve
   * is left running.
   */
  async function wakersLost(action: 'kill' | 'stop'): Promise<Job> {
    const run = await train(
      3,
      ...waiting,
      ...['--hang-timeout', '2', '--reserves', '1'],
      ...['--drill', 'rank=1,step=3,phase=compute', '--drill', `rank=0,step=4,phase=accept,action=${action}`],
    );
    assert.equal(run.stragglers, 0);
    assert.deepEqual(spawns(run), [{ ranks: [2], reserve: 2 }]);
    assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')));
    const pids = path.join(run.dir, 'pids');
    for (const rank of [0, 2]) assert.equal(processStat(readPid(pids, rank)!), null, `rank ${rank} is still there`);
    return run;
  }

  it('every working rank killed after a reserve was woken, before it was accepted: its connect gives up at the comm deadline, and nothing is left running', async () => {
    // no waker is left to kill it by its pid file: what ends it is its own deadline (3 x --hang-timeout)
    await wakersLost('kill');
  });

  it('the last working rank stopped (SIGSTOP) after a reserve was woken, the others killed: the reserve, its connect past its deadline, kills the stopped rank, and nothing is left running', async () => {
    // no detector is left to declare rank 0 hung: without the reserve, mpirun would wait for it for good
    const run = await wakersLost('stop');
    assert.match(
      fs.readFileSync(path.join(run.dir, 'logs', 'rank-2.log'), 'utf8'),
      /rank 2: woken, but cannot join: MPI_Comm_connect did not return within 6000 ms: .* \(killed rank\(s\) 0 of the job, found stopped\); leaving\n$/,
    );
  });

  it('every working rank killed: the reserves leave by themselves', async () => {
    const run = await train(
      4,
      ...waiting,
      '--reserves',
      '2',
      '--drill',
      'rank=0,step=3,phase=compute',
      '--drill',
      'rank=1,step=3,phase=compute',
    );
    // mpirun waits for every process of the job: it returned, and nothing was left running
    assert.equal(run.stragglers, 0);
    assert.equal(lines<EventRecord>(run, 'events.jsonl').filter((e) => e.event === 'spawn').length, 0);
  });
});
