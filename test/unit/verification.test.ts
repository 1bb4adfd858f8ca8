// The decisions of the check for silent data corruption, alike on every rank from the same gathered
// digests: the rotation that checks every working rank at every check, the majority on the state,
// the third rank that settles a gradient dispute, and the cases where nobody can be named. Also the
// flip drills: the same bit from the same seed, once for flip, at every step for corrupt.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ShardMap } from '../../src/data/shard-map';
import { applyFlip, FaultInjector, parseDrill } from '../../src/liveness/drills';
import {
  chunkCopiesDiffer,
  encodeChunkCopies,
  encodeRecord,
  firstRound,
  recordWords,
  secondRound,
  spotAssignments,
  VerifiedState,
  type SpotAssignment,
} from '../../src/protocol/verification';
import { makeScratch, removeScratch } from '../helpers/scratch';

const A = '00000000000000aa';
const B = '00000000000000bb';
const C = 'ffffffff000000cc';

/** Every rank's record: the same state digest but where `states` says, shard s's gradient `G<s>`, and the spots given. */
function gather(ranks: number[], shards: number, map: ShardMap, states: Record<number, string>, spots: Record<number, Spot>): Int32Array {
  const words = recordWords(shards);
  const all = new Int32Array(ranks.length * words);
  ranks.forEach((rank, i) => {
    const held = new Map(map.shardsOf(rank).map((s) => [s, gradient(s)]));
    all.set(encodeRecord({ state: states[rank] ?? A, shards: held, spot: spots[rank] }, shards), i * words);
  });
  return all;
}
const gradient = (shard: number): string => (0x1000 + shard).toString(16).padStart(16, '0');

type Spot = SpotAssignment & { digest: string };

/** Spots as an honest checker would get them (the owner's digest), but for the checkers in `wrong`. */
function spots(assignments: readonly SpotAssignment[], wrong: Record<number, string> = {}): Record<number, Spot> {
  return Object.fromEntries(assignments.map((a) => [a.checker, { ...a, digest: wrong[a.checker] ?? gradient(a.shard) }]));
}

describe('silent data corruption: the check', () => {
  const scratch = makeScratch('ft-verify-');
  after(() => removeScratch(scratch));

  it('the rotation is a permutation: every working rank checked at every check, by each other rank in turn, each of its shards in turn', () => {
    const map = ShardMap.initial(7, [0, 2, 5]);
    const checkers = new Map<number, Set<number>>();
    const shardsChecked = new Map<number, Set<number>>();
    for (let check = 0; check < 12; ++check) {
      const assignments = spotAssignments(map, check);
      assert.deepEqual(assignments.map((a) => a.checker).sort(), [0, 2, 5]);
      assert.deepEqual(assignments.map((a) => a.owner).sort(), [0, 2, 5]);
      for (const a of assignments) {
        assert.notEqual(a.checker, a.owner);
        assert.equal(map.owner(a.shard), a.owner);
        checkers.set(a.owner, (checkers.get(a.owner) ?? new Set()).add(a.checker));
        shardsChecked.set(a.owner, (shardsChecked.get(a.owner) ?? new Set()).add(a.shard));
      }
    }
    for (const owner of [0, 2, 5]) {
      assert.equal(checkers.get(owner)!.size, 2);
      assert.deepEqual([...shardsChecked.get(owner)!].sort(), map.shardsOf(owner));
    }
    assert.deepEqual(spotAssignments(ShardMap.initial(3, [4]), 0), []);
  });

  it('all equal: nobody is suspect and nothing is disputed', () => {
    const ranks = [0, 1, 2, 3];
    const map = ShardMap.initial(8, ranks);
    const assignments = spotAssignments(map, 3);
    const finding = firstRound(ranks, gather(ranks, 8, map, {}, spots(assignments)), 8, 'parameters');
    assert.deepEqual([finding.suspects.size, finding.disputes.length, finding.unattributable], [0, 0, undefined]);
  });

  it('a state off the majority names its rank; with no majority nobody is named', () => {
    const ranks = [0, 1, 2, 3];
    const map = ShardMap.initial(4, ranks);
    const assignments = spotAssignments(map, 0);
    const one = firstRound(ranks, gather(ranks, 4, map, { 3: B }, spots(assignments)), 4, 'parameters');
    assert.deepEqual([...one.suspects], [[3, 'parameters']]);
    const split = firstRound(ranks, gather(ranks, 4, map, { 2: B, 3: B }, spots(assignments)), 4, 'parameters');
    assert.equal(split.unattributable, "the ranks' parameters digests differ with no majority (ranks 0, 1 | 2, 3)");
    assert.deepEqual(split.involved, [0, 1, 2, 3]);
  });

  it('a gradient dispute goes to a third rank, whose digest names the owner or the checker', () => {
    const ranks = [0, 1, 2];
    const map = ShardMap.initial(6, ranks);
    const assignments = spotAssignments(map, 1);
    const bad = assignments.find((a) => a.owner === 1)!;
    const finding = firstRound(ranks, gather(ranks, 6, map, {}, spots(assignments, { [bad.checker]: C })), 6, 'parameters');
    assert.equal(finding.disputes.length, 1);
    const [dispute] = finding.disputes;
    assert.deepEqual([dispute.shard, dispute.owner, dispute.checker], [bad.shard, 1, bad.checker]);
    assert.equal(
      dispute.third,
      [0, 1, 2].find((r) => r !== 1 && r !== bad.checker),
    );
    // the third agrees with the owner: the checker computed wrong bits
    assert.deepEqual([...secondRound(finding, [gradient(bad.shard)]).suspects], [[bad.checker, `gradient of shard ${bad.shard}`]]);
    // with the checker: the owner did
    assert.deepEqual([...secondRound(finding, [C]).suspects], [[1, `gradient of shard ${bad.shard}`]]);
    // with neither
    assert.equal(
      secondRound(finding, [B]).unattributable,
      `ranks 0, 1, 2 computed shard ${bad.shard}'s gradient with three different results`,
    );
  });

  it("a spare, whose shard map a rebalance left as it was, judges from the checkers' records alike: nothing disputed where they match, and a dispute's third rank is a checker, never the spare", () => {
    const ranks = [0, 1, 2, 3];
    // the spare is the lowest rank: a third rank picked from every rank, not the checkers, would be it
    const workers = [1, 2, 3];
    const rebalanced = ShardMap.initial(6, workers).withCounts(
      new Map([
        [1, 3],
        [2, 1],
        [3, 2],
      ]),
    );
    // what the spare (rank 0) would have taken for the rotation, from the map before the rebalance
    const stale = spotAssignments(ShardMap.initial(6, workers), 1);
    const assignments = spotAssignments(rebalanced, 1);
    assert.notDeepEqual(stale, assignments);
    const clean = firstRound(ranks, gather(ranks, 6, rebalanced, {}, spots(assignments)), 6, 'parameters');
    assert.deepEqual([clean.suspects.size, clean.disputes.length, clean.unattributable], [0, 0, undefined]);
    const bad = assignments[0];
    const disputed = firstRound(ranks, gather(ranks, 6, rebalanced, {}, spots(assignments, { [bad.checker]: C })), 6, 'parameters');
    assert.deepEqual(
      disputed.disputes.map((d) => [d.owner, d.checker, d.shard, d.third]),
      [[bad.owner, bad.checker, bad.shard, workers.find((r) => r !== bad.owner && r !== bad.checker)]],
    );
  });

  it('two working ranks: a dispute names both and nobody is suspect', () => {
    const ranks = [0, 1];
    const map = ShardMap.initial(2, ranks);
    const assignments = spotAssignments(map, 0);
    const finding = firstRound(ranks, gather(ranks, 2, map, {}, spots(assignments, { 0: C })), 2, 'parameters');
    assert.equal(
      finding.unattributable,
      "ranks 0 and 1 computed shard 1's gradient with different bits, and no third rank can tell which is wrong",
    );
    assert.deepEqual(finding.involved, [0, 1]);
  });

  it('a rank whose state is suspect is not also asked about the gradients it computed from that state', () => {
    const ranks = [0, 1, 2, 3];
    const map = ShardMap.initial(4, ranks);
    const assignments = spotAssignments(map, 2);
    const checker = assignments.find((a) => a.owner === 2)!.checker;
    const finding = firstRound(ranks, gather(ranks, 4, map, { [checker]: B }, spots(assignments, { [checker]: C })), 4, 'parameters');
    assert.deepEqual([...finding.suspects.keys()], [checker]);
    assert.equal(finding.disputes.length, 0);
  });

  it('sharded state: a chunk off the majority of its copies names its holder; two copies that differ name nobody', () => {
    const ranks = [0, 1, 2];
    const map = ShardMap.initial(3, ranks);
    const assignments = spotAssignments(map, 0);
    const words = recordWords(3, 3);
    /** chunk c owned by rank c, copies on every other rank (or only on `copyHolders[c]`); `bad` holds chunk 2 with other bits */
    const records = (copyHolders: number[][], bad: number): Int32Array => {
      const all = new Int32Array(ranks.length * words);
      ranks.forEach((rank, i) => {
        const chunks = new Map<number, { digest: string; own: boolean }>();
        copyHolders.forEach((holders, c) => {
          if (c !== rank && !holders.includes(rank)) return;
          chunks.set(c, { digest: rank === bad && c === 2 ? C : gradient(100 + c), own: c === rank });
        });
        const held = new Map(map.shardsOf(rank).map((shard) => [shard, gradient(shard)]));
        all.set(encodeRecord({ state: A, shards: held, spot: spots(assignments)[rank], chunks }, 3, 3), i * words);
      });
      return all;
    };
    const decide = (copyHolders: number[][], bad: number) => firstRound(ranks, records(copyHolders, bad), 3, 'state', 3);
    const everyOther = [
      [1, 2],
      [0, 2],
      [0, 1],
    ];
    assert.deepEqual([...decide(everyOther, 2).suspects], [[2, "optimizer state of chunk 2 (rank 2's)"]]);
    assert.deepEqual([...decide(everyOther, 0).suspects], [[0, "optimizer state of chunk 2 (rank 2's)"]]);
    const two = decide([[1], [2], [0]], 2);
    assert.equal(
      two.unattributable,
      "ranks 0 and 2 hold the optimizer state of chunk 2 (rank 2's) with different bits, and no majority of copies can tell which is wrong",
    );
    assert.deepEqual(two.involved, [0, 2]);
    assert.equal(decide([[1], [2], [0]], -1).suspects.size, 0);
  });

  it("sharded state before a recovery's rebuild: the chunks whose holders' copies differ, whoever holds them; a rank that holds none (joined since) counts for no chunk", () => {
    // 4 chunks, replicate:2 (chunk c's copy on rank c + 1, which holds it as chunk (rank + 3) mod 4); rank 3 lost, rank 4 joined holding nothing
    const held = (rank: number, bad?: number): Map<number, { digest: string; own: boolean }> =>
      new Map(
        [rank, (rank + 3) % 4]
          .filter((c) => c !== 3)
          .map((c) => [c, { digest: c === bad && rank === bad ? C : gradient(100 + c), own: c === rank }] as const),
      );
    const gather = (bad?: number) =>
      Int32Array.from([...[0, 1, 2].flatMap((rank) => [...encodeChunkCopies(held(rank, bad), 4)]), ...encodeChunkCopies(new Map(), 4)]);
    assert.deepEqual(chunkCopiesDiffer(gather(), 4), []);
    assert.deepEqual(chunkCopiesDiffer(gather(0), 4), [0]);
    assert.deepEqual(chunkCopiesDiffer(gather(1), 4), [1]);
    // chunk 2's copy was on rank 3: nothing to compare it with
    assert.deepEqual(chunkCopiesDiffer(gather(2), 4), []);
    // chunk 3's copy on rank 0 has no owner left to differ from
    assert.deepEqual(
      chunkCopiesDiffer(
        Int32Array.from([...encodeChunkCopies(new Map([[3, { digest: C, own: false }]]), 4), ...encodeChunkCopies(new Map(), 4)]),
        4,
      ),
      [],
    );
  });

  it('the verified state is a copy: restored after the live arrays changed, it brings back the kept step', () => {
    const params = Float32Array.of(1, 2, 3);
    const slot = Float32Array.of(4, 5, 6);
    const buffers = Float32Array.of(7);
    const state = {
      tensors: [],
      params,
      slots: [{ name: 'm', data: slot }],
      held: { from: 0, to: 3 },
      buffers: { tensors: [], data: buffers },
    };
    const kept = new VerifiedState(true);
    assert.throws(() => kept.restore(state), { message: 'no verified state to roll back to' });
    kept.keep(state, 8);
    params.fill(0);
    slot.fill(0);
    buffers.fill(0);
    assert.equal(kept.restore(state), 8);
    assert.deepEqual([...params, ...slot, ...buffers], [1, 2, 3, 4, 5, 6, 7]);
  });

  it('flip drills: parsed with their phases, the same bit from the same seed, once for flip, every step for corrupt', () => {
    assert.deepEqual(parseDrill('rank=1,step=2,phase=update,action=flip'), { rank: 1, step: 2, phase: 'update', action: 'flip' });
    assert.deepEqual(parseDrill('rank=0,step=4,phase=update,action=corrupt,target=state').target, 'state');
    assert.throws(() => parseDrill('rank=0,step=4,phase=compute,action=flip,target=state'), {
      message:
        '--drill: target expects params|state, with action flip|corrupt at phase update, in "rank=0,step=4,phase=compute,action=flip,target=state"',
    });
    assert.throws(() => parseDrill('rank=1,step=2,phase=agree,action=corrupt'), {
      message: '--drill: action corrupt needs phase compute|collective|update, got "agree"',
    });
    const note = path.join(scratch, 'note');
    const drills = [parseDrill('rank=1,step=3,action=flip'), parseDrill('rank=1,step=5,phase=update,action=corrupt')];
    const injector = () => new FaultInjector(drills, 1, note, scratch, 7);
    const first = injector();
    const flip = first.flipAt(3, 'compute', 1000, 2)!;
    assert.ok(flip.index >= 0 && flip.index < 1000 && flip.bit >= 16 && flip.bit <= 28);
    assert.deepEqual(injector().flipAt(3, 'compute', 1000, 2), flip);
    assert.equal(first.flipAt(3, 'compute', 1000, 2), undefined, 'a flip happens once');
    assert.equal(first.flipAt(4, 'update', 1000), undefined);
    assert.equal(first.flipAt(5, 'update', 1000, 0, 'state'), undefined, 'the drill names the parameters');
    assert.ok(first.flipAt(5, 'update', 1000) && first.flipAt(9, 'update', 1000), 'corrupt goes on');
    assert.equal(new FaultInjector(drills, 0, note, scratch, 7).flipAt(3, 'compute', 1000, 2), undefined, 'another rank');
    assert.match(
      fs.readFileSync(note, 'utf8'),
      /drill: rank 1 flips a bit at step 3, phase compute: bit \d+ of float \d+ of shard 2's gradient/,
    );
    const data = Float32Array.of(1.5, -2, 0.25);
    applyFlip(data, { index: 1, bit: 23 });
    assert.deepEqual([...data], [1.5, -4, 0.25]); // the lowest exponent bit of -2 (2^1) set: -2^2
    applyFlip(data, { index: 1, bit: 23 });
    assert.deepEqual([...data], [1.5, -2, 0.25]);
  });
});
