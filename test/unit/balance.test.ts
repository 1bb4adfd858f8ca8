// The slow-rank decisions (protocol/balance.ts) and the map they make (ShardMap.withCounts): the plan
// against every way of dealing the shards, the fewest moves, the warm-up, the margin, the pause
// between changes, the way back once a rank is fast again, and the eviction, on made-up times.
import { strict as assert } from 'node:assert';
import { stream } from '../../src/base/random';
import { ShardMap } from '../../src/data/shard-map';
import { Balancer, makespan, planCounts, ShardTimes, type BalanceSettings } from '../../src/protocol/balance';

const settings: BalanceSettings = { slowMargin: 0.5, slowSteps: 3, evictSlower: 4 };

/** A step's sideband: `ms[r]` for each shard of rank r under `map`, then the step's time: its slowest rank's shards, one after another. */
const timesOf = (map: ShardMap, ms: number[]): Float32Array =>
  Float32Array.from([...map.owners.map((owner) => ms[owner]), Math.max(...map.ranks.map((r) => map.shardsOf(r).length * ms[r]))]);

/** The smallest makespan of any counts >= 1 each summing to `shards` (all of them tried). */
function bestMakespan(ms: Map<number, number>, shards: number): number {
  const ranks = [...ms.keys()];
  let best = Infinity;
  const walk = (i: number, left: number, counts: Map<number, number>): void => {
    if (i === ranks.length - 1) {
      if (left >= 1) best = Math.min(best, makespan(new Map([...counts, [ranks[i], left]]), ms));
      return;
    }
    for (let n = 1; n <= left - (ranks.length - 1 - i); ++n) walk(i + 1, left - n, new Map([...counts, [ranks[i], n]]));
  };
  walk(0, shards, new Map());
  return best;
}

describe('slow ranks: the plan', () => {
  it('deals whole shards so that the longest expected time is the shortest possible', () => {
    const next = stream(7);
    for (let trial = 0; trial < 200; ++trial) {
      const n = 2 + Math.floor(next() * 3);
      const shards = n + Math.floor(next() * 9);
      const ms = new Map(Array.from({ length: n }, (_, r) => [r * 2, 1 + Math.floor(next() * 40) / 4]));
      const counts = planCounts(ms, shards);
      assert.equal(
        [...counts.values()].reduce((a, b) => a + b, 0),
        shards,
      );
      assert.ok([...counts.values()].every((c) => c >= 1));
      assert.equal(makespan(counts, ms), bestMakespan(ms, shards), JSON.stringify([...ms]));
    }
    assert.deepEqual(
      [
        ...planCounts(
          new Map([
            [0, 1],
            [1, 8],
            [2, 1],
          ]),
          6,
        ),
      ],
      [
        [0, 3],
        [1, 1],
        [2, 2],
      ],
    );
    assert.deepEqual(
      [
        ...planCounts(
          new Map([
            [0, 1],
            [1, 1],
          ]),
          8,
        ),
      ],
      [
        [0, 4],
        [1, 4],
      ],
    );
    assert.throws(
      () =>
        planCounts(
          new Map([
            [0, 1],
            [1, 1],
            [2, 1],
          ]),
          2,
        ),
      /3 ranks cannot each hold one of 2 shards/,
    );
  });

  it('moves only the shards a rank gives up, lowest first, and each rank keeps its lowest', () => {
    const map = ShardMap.initial(8, [0, 1, 2]); // [0,0,0,1,1,1,2,2]
    const next = map.withCounts(
      new Map([
        [0, 4],
        [1, 1],
        [2, 3],
      ]),
    );
    assert.deepEqual(next.toJSON(), [0, 0, 0, 1, 0, 2, 2, 2]);
    assert.deepEqual(
      [...map.movedTo(next)],
      [
        [0, [4]],
        [2, [5]],
      ],
    );
    // back to the counts, not to the owners: rank 2 keeps shard 5, its lowest, and gives up 7
    assert.deepEqual(next.withCounts(map.counts()).toJSON(), [0, 0, 0, 1, 1, 2, 2, 1], 'and back');
    const random = stream(3);
    for (let trial = 0; trial < 100; ++trial) {
      const counts = planCounts(
        new Map([
          [0, 1 + random() * 5],
          [1, 1 + random() * 5],
          [2, 1 + random() * 5],
        ]),
        8,
      );
      const moved = [...map.movedTo(map.withCounts(counts)).values()].flat().length;
      const given = [...counts].reduce((n, [r, c]) => n + Math.max(0, c - map.shardsOf(r).length), 0);
      assert.equal(moved, given, 'no shard moves that need not');
      assert.deepEqual(map.withCounts(counts).counts(), counts);
    }
    assert.throws(
      () =>
        map.withCounts(
          new Map([
            [0, 8],
            [1, 0],
            [2, 0],
          ]),
        ),
      /expected a count >= 1 for each of ranks \[0,1,2\] summing to 8/,
    );
    assert.throws(
      () =>
        map.withCounts(
          new Map([
            [0, 4],
            [1, 4],
          ]),
        ),
      /expected a count >= 1/,
    );
  });
});

describe('slow ranks: the decisions', () => {
  const map = ShardMap.initial(6, [0, 1, 2]);

  /** Feeds `steps` steps of per-rank times under `map`; the decisions, with the step each came at. */
  function feed(
    balancer: Balancer,
    at: ShardMap,
    ms: number[],
    steps: number,
    canReplace = false,
  ): [number, ReturnType<Balancer['observe']>][] {
    const made: [number, ReturnType<Balancer['observe']>][] = [];
    for (let step = 0; step < steps; ++step) {
      const decision = balancer.observe(timesOf(at, ms), at, canReplace);
      if (decision) made.push([step, decision]);
    }
    return made;
  }

  it('measures nothing in the warm-up, then moves shards off a rank slower by the margin, once the window shows it', () => {
    const balancer = new Balancer(settings);
    // the first slowSteps steps are warm-up, the next slowSteps fill the window
    const made = feed(balancer, map, [1, 3, 1], 6);
    assert.equal(made.length, 1);
    const [step, decision] = made[0];
    assert.equal(step, 5);
    assert.equal(decision?.kind, 'rebalance');
    if (decision?.kind !== 'rebalance') return;
    assert.deepEqual(
      [...decision.map.counts()],
      [
        [0, 3],
        [1, 1],
        [2, 2],
      ],
    );
    assert.deepEqual(
      [...decision.msPerShard],
      [
        [0, 1],
        [1, 3],
        [2, 1],
      ],
    );
  });

  it('leaves alone a rank within the margin, noise of one step in the window, and an even map', () => {
    assert.deepEqual(feed(new Balancer(settings), map, [1, 1.4, 1], 20), [], 'below the margin');
    const noisy = new Balancer(settings);
    const made = [];
    for (let step = 0; step < 30; ++step) {
      // rank 1 is 5 times slower at one step in three: the median never sees it
      const ms = step % 3 === 0 ? [1, 5, 1] : [1, 1, 1];
      if (noisy.observe(timesOf(map, ms), map, false)) made.push(step);
    }
    assert.deepEqual(made, []);
    // 7 shards on 3 ranks: uneven by one already; a slightly faster rank does not take the extra shard
    const seven = ShardMap.initial(7, [0, 1, 2]);
    assert.deepEqual(feed(new Balancer(settings), seven, [1.2, 1, 1], 20), []);
  });

  it('changes the map no more than once per window, gives the shards back once the rank is fast again, and starts over after a reset', () => {
    const balancer = new Balancer(settings);
    let at = map;
    const changes: number[] = [];
    for (let step = 0; step < 30; ++step) {
      const ms = step < 15 ? [1, 4, 1] : [1, 1, 1];
      const decision = balancer.observe(timesOf(at, ms), at, false);
      if (decision?.kind !== 'rebalance') continue;
      changes.push(step);
      at = decision.map;
    }
    // fast from step 15: at step 16 two of rank 1's last three times are fast
    assert.deepEqual(changes, [5, 16]);
    assert.deepEqual([...at.counts().values()], [2, 2, 2]);
    balancer.reset();
    assert.deepEqual(feed(balancer, map, [1, 4, 1], 5), [], 'warm-up and a fresh window again');
  });

  it('undoes a change that made the step longer, and waits twice as long each time before the next', () => {
    // ranks sharing cores: moving shards to ranks 2 and 3 loads their core, and their shards slow down
    const four = ShardMap.initial(8, [0, 1, 2, 3]);
    const balancer = new Balancer(settings);
    let at = four;
    const made: [number, boolean][] = [];
    let before = at;
    for (let step = 0; step < 60; ++step) {
      const even = at.counts().get(0) === 2;
      const decision = balancer.observe(timesOf(at, even ? [12, 11, 7, 7] : [10, 9, 9.5, 10]), at, false);
      if (decision?.kind !== 'rebalance') continue;
      made.push([step, decision.undone !== undefined]);
      if (decision.undone) {
        assert.deepEqual(decision.undone, { beforeMs: 24, sinceMs: 30 });
        // the shards moved go back where they came from (their data is still there), not others of the same count
        assert.deepEqual(decision.map.owners, before.owners);
        assert.deepEqual(decision.map.counts(), before.counts());
        at = decision.map;
        continue;
      }
      // a change moves the fewest shards to its counts
      assert.deepEqual(decision.map.owners, at.withCounts(decision.map.counts()).owners);
      before = at;
      at = decision.map;
    }
    // judged by the K step times after each change's first two (the step before it, the one reading the moved shards); the next waits 2K, 4K, 8K steps
    assert.deepEqual(made, [
      [5, false],
      [10, true],
      [16, false],
      [21, true],
      [33, false],
      [38, true],
    ]);
    assert.deepEqual([...at.counts().values()], [2, 2, 2, 2]);
  });

  it('evicts a rank far slower at 4 x slowSteps steps in a row, only when it can be replaced', () => {
    const one = ShardMap.initial(3, [0, 1, 2]);
    const nobody = feed(new Balancer(settings), one, [1, 5, 1], 40, false);
    assert.deepEqual(nobody, [], 'S = N: nothing to move, and no spare');
    const evicted = feed(new Balancer(settings), one, [1, 5, 1], 40, true);
    assert.deepEqual(evicted[0], [14, { kind: 'evict', rank: 1, slower: 5, steps: 12 }]);
    const broken = new Balancer(settings);
    // one step below the factor restarts the count
    for (let step = 0; step < 14; ++step)
      assert.equal(broken.observe(timesOf(one, step === 10 ? [1, 3, 1] : [1, 5, 1]), one, true), undefined);
    assert.deepEqual(feed(new Balancer({ ...settings, evictSlower: 0 }), one, [1, 50, 1], 40, true), [], 'evictSlower 0: never');
  });

  it("sends each shard's last time in its own element of its sideband, and shard 0 the step's time", () => {
    const times = new ShardTimes(4);
    assert.equal(ShardTimes.sidebandLength(4), 5);
    assert.deepEqual([...times.sideband(2)], [0, 0, 0, 0, 0], 'never computed here: unknown');
    times.record(2, 1.5);
    times.record(3, 2.5);
    times.record(0, 0.5);
    times.stepEnded(100);
    times.stepEnded(112.5);
    assert.deepEqual([...times.sideband(2)], [0, 0, 1.5, 0, 0]);
    assert.deepEqual([...times.sideband(3)], [0, 0, 0, 2.5, 0]);
    assert.deepEqual([...times.sideband(0)], [0.5, 0, 0, 0, 12.5], "shard 0's owner sends the last step's time too");
  });
});
