// Logical shards without files: the layout of record batches into shards, the shard -> rank map and
// its reassignment after losses, and micro-batch iteration over an epoch.
import { strict as assert } from 'node:assert';
import { MicroBatches } from '../../src/data/micro-batches';
import { ShardLayout } from '../../src/data/shard-layout';
import { ShardMap } from '../../src/data/shard-map';

/** record batches of `rowsPerBatch`, the last one shorter when `rows` does not divide */
function batchRows(rows: number, rowsPerBatch: number): number[] {
  return Array.from({ length: Math.ceil(rows / rowsPerBatch) }, (_, i) => Math.min(rowsPerBatch, rows - i * rowsPerBatch));
}

function loads(map: ShardMap, ranks: number[]): number[] {
  return ranks.map((r) => map.shardsOf(r).length);
}

describe('ShardLayout', () => {
  it('splits record batches into S contiguous shards whose sizes differ by at most one batch', () => {
    const rows = batchRows(1037, 10); // 104 batches, the last of 7 rows
    for (const S of [1, 3, 7, 64, 104]) {
      const layout = new ShardLayout(rows, S, 'train.arrow');
      let next = 0;
      const counts: number[] = [];
      for (let s = 0; s < S; ++s) {
        assert.equal(layout.firstRow(s), next);
        const { first, end } = layout.batches(s);
        assert.equal(
          layout.rows(s),
          rows.slice(first, end).reduce((a, b) => a + b, 0),
        );
        counts.push(end - first);
        next += layout.rows(s);
      }
      assert.equal(next, 1037);
      assert.ok(Math.max(...counts) - Math.min(...counts) <= 1, `S=${S}: ${counts}`);
    }
  });

  it("finds the record batch of a shard's row, and where each batch starts in the shard", () => {
    const layout = new ShardLayout([10, 10, 5, 10, 7], 2, 'train.arrow'); // shard 1: batches 2..4, 22 rows
    assert.deepEqual(
      [0, 4, 5, 14, 15, 21].map((row) => layout.batchOf(1, row)),
      [2, 2, 3, 3, 4, 4],
    );
    assert.deepEqual(
      [0, 9, 10, 19].map((row) => layout.batchOf(0, row)),
      [0, 0, 1, 1],
    );
    assert.deepEqual(
      [2, 3, 4].map((b) => layout.batchRow(1, b)),
      [0, 5, 15],
    );
    assert.throws(() => layout.batchOf(1, 22), { message: 'batchOf: expected a row in [0, 22) of shard 1, got 22' });
    assert.throws(() => layout.batchRow(1, 1), { message: 'batchRow: shard 1 holds record batches [2, 5), not 1' });
  });

  it('refuses more shards than record batches, naming the file', () => {
    assert.throws(() => new ShardLayout([5, 5, 5], 4, 'data/train.arrow'), {
      name: 'DatasetError',
      message: 'data/train.arrow: 4 shards asked, but it has 3 record batches: at most 3 shards',
    });
    assert.throws(() => new ShardLayout([5], 0, 'x.arrow'), { message: 'x.arrow: shard count must be an integer >= 1, got 0' });
  });
});

describe('ShardMap', () => {
  it('starts with contiguous, balanced blocks over the live ranks in ascending order', () => {
    assert.deepEqual(ShardMap.initial(8, [3, 0, 2, 1]).toJSON(), [0, 0, 1, 1, 2, 2, 3, 3]);
    assert.deepEqual(ShardMap.initial(5, [7, 4]).toJSON(), [4, 4, 4, 7, 7]);
    assert.deepEqual(ShardMap.initial(3, [0, 1, 2, 3]).toJSON(), [0, 1, 2]);
  });

  it("gives only the lost ranks' shards to survivors, balanced, whatever order the ranks are listed in", () => {
    for (const [S, N] of [
      [4, 4],
      [8, 4],
      [7, 3],
      [64, 8],
      [13, 5],
      [16, 16],
      [2, 4],
      [3, 8],
    ]) {
      const ranks = Array.from({ length: N }, (_, r) => r);
      for (let lost = 0; lost < N; ++lost) {
        const before = ShardMap.initial(S, ranks);
        const survivors = ranks.filter((r) => r !== lost);
        const after = before.without([lost], survivors);
        assert.deepEqual(
          after.toJSON(),
          ShardMap.initial(S, [...ranks].reverse())
            .without([lost], [...survivors].reverse())
            .toJSON(),
        );
        for (let s = 0; s < S; ++s) {
          if (before.owner(s) !== lost) assert.equal(after.owner(s), before.owner(s), `S=${S} N=${N} lost ${lost}: shard ${s} moved`);
          assert.notEqual(after.owner(s), lost);
        }
        const held = loads(after, survivors);
        assert.ok(Math.max(...held) - Math.min(...held) <= 1, `S=${S} N=${N} lost ${lost}: loads ${held}`);
        const moved = [...before.movedTo(after).values()].flat().sort((a, b) => a - b);
        assert.deepEqual(moved, before.shardsOf(lost));
      }
    }
  });

  it('with fewer shards than ranks, gives a lost shard to the least-loaded live rank, holder or not', () => {
    // 2 shards on 4 ranks start on ranks 0 and 2: rank 0's shard goes to rank 1 (no shard, lowest)
    assert.deepEqual(ShardMap.initial(2, [0, 1, 2, 3]).toJSON(), [0, 2]);
    assert.deepEqual(ShardMap.initial(2, [0, 1, 2, 3]).without([0], [1, 2, 3]).toJSON(), [1, 2]);
    // held by ranks 0 and 1: rank 0's shard goes to rank 2, not to the holder 1
    assert.deepEqual(ShardMap.fromOwners([0, 1]).without([0], [1, 2, 3]).toJSON(), [2, 1]);
    // every holder lost at once: the shards go to the ranks that held none, one each
    assert.deepEqual(ShardMap.fromOwners([0, 1]).without([0, 1], [2, 3]).toJSON(), [2, 3]);
    // more lost shards than live ranks: round the live ranks, fewest first
    assert.deepEqual(ShardMap.fromOwners([0, 0, 0, 1, 2]).without([0], [1, 2, 3]).toJSON(), [3, 1, 2, 1, 2]);
  });

  it('stays balanced through successive and simultaneous losses', () => {
    const map = ShardMap.initial(64, [0, 1, 2, 3, 4, 5, 6, 7]);
    const twice = map.without([2], [0, 1, 3, 4, 5, 6, 7]).without([5], [0, 1, 3, 4, 6, 7]);
    assert.deepEqual(loads(twice, [0, 1, 3, 4, 6, 7]), [11, 11, 11, 11, 10, 10]);
    const together = map.without([5, 2], [0, 1, 3, 4, 6, 7]);
    assert.deepEqual(loads(together, [0, 1, 3, 4, 6, 7]), [11, 11, 11, 11, 10, 10]);
    assert.deepEqual(map.without([2, 5], [7, 6, 4, 3, 1, 0]).toJSON(), together.toJSON());
  });

  it('a rank joining after the lost shards went to survivors takes, in turn, the highest shard of the rank holding the most', () => {
    // 4 shards on ranks 0..3; rank 2 lost: its shard 2 goes to rank 0, the least loaded and lowest
    const after = ShardMap.initial(4, [0, 1, 2, 3]).without([2], [0, 1, 3]);
    assert.deepEqual(after.toJSON(), [0, 1, 0, 3]);
    assert.deepEqual(after.handOver([0, 1, 3, 4], [4]).toJSON(), [0, 1, 4, 3]);
    // 8 shards, 4 ranks, two lost and two joining later: each joiner takes 2, from the ranks holding 3
    const twoLost = ShardMap.initial(8, [0, 1, 2, 3]).without([1, 3], [0, 2]);
    assert.deepEqual(
      twoLost.counts(),
      new Map([
        [0, 4],
        [2, 4],
      ]),
    );
    const shared = twoLost.handOver([0, 2, 5, 6], [5, 6]);
    assert.deepEqual(
      shared.counts(),
      new Map([
        [0, 2],
        [2, 2],
        [5, 2],
        [6, 2],
      ]),
    );
    // a joiner with a lost rank's place takes it whole; one without shares the others' (ties: the highest rank gives)
    const oneLost = ShardMap.initial(6, [0, 1, 2]).without([1], [0, 2]);
    const refilled = ShardMap.initial(6, [0, 1, 2]).handOver([0, 2, 7, 8], [7, 8]);
    assert.deepEqual(refilled.toJSON(), [0, 0, 7, 8, 2, 2]);
    assert.deepEqual(
      oneLost.handOver([0, 2, 8], [8]).counts(),
      new Map([
        [0, 2],
        [2, 2],
        [8, 2],
      ]),
    );
    // more joiners than shards to spare: the last holds none
    assert.deepEqual(ShardMap.initial(2, [0, 1]).handOver([0, 1, 4], [4]).toJSON(), [0, 1]);
  });

  it('refuses lists that do not describe the map', () => {
    const map = ShardMap.initial(2, [0, 1]);
    assert.throws(() => map.without([0, 1], []), {
      name: 'RangeError',
      message: 'without: losing ranks [0,1] leaves no rank to hold the shards',
    });
    assert.throws(() => map.without([0], [0, 1]), { name: 'RangeError', message: 'without: ranks [0] are both lost and live' });
    assert.throws(() => map.without([0], [2]), {
      name: 'RangeError',
      message: 'without: ranks [1] hold shards but are neither lost nor live',
    });
  });

  it('round-trips through toJSON', () => {
    const map = ShardMap.initial(10, [1, 4, 6]).without([4], [1, 6]);
    assert.deepEqual(ShardMap.fromOwners(map.toJSON()).toJSON(), map.toJSON());
    assert.deepEqual(map.ranks, [1, 6]);
  });
});

describe('MicroBatches', () => {
  it("a global batch above the split's rows: each step takes all of it, and a step's buffers need hold no more than it", () => {
    const layout = new ShardLayout(batchRows(1037, 10), 3, 'train.arrow');
    const plan = new MicroBatches(layout, 100_000_000, 42);
    assert.equal(plan.stepsPerEpoch, 1);
    assert.equal(plan.samplesAt(0), 1037);
    assert.deepEqual(
      [0, 1, 2].map((s) => [plan.size(s), plan.fullest(s), layout.rows(s)]),
      [
        [33_333_334, 340, 340],
        [33_333_333, 350, 350],
        [33_333_333, 347, 347],
      ],
    );
    assert.equal(plan.largestBatch, 1037);
    assert.equal(new MicroBatches(layout, 64, 42).largestBatch, 64);
  });

  it('visits every sample of the split exactly once per epoch, for any S and global batch', () => {
    const rows = batchRows(1037, 10);
    for (const [S, batch] of [
      [1, 32],
      [3, 32],
      [7, 50],
      [16, 16],
      [64, 100],
      [5, 1037],
      [3, 100_000_000],
    ]) {
      const layout = new ShardLayout(rows, S, 'train.arrow');
      const plan = new MicroBatches(layout, batch, 42);
      for (const epoch of [0, 3]) {
        const seen = new Uint8Array(1037);
        const orders = Array.from({ length: S }, (_, s) => plan.order(s, epoch));
        let total = 0;
        for (let t = 0; t < plan.stepsPerEpoch; ++t) {
          let inStep = 0;
          for (let s = 0; s < S; ++s) {
            const picked = plan.rows(s, epoch, t);
            assert.ok(picked.length <= plan.fullest(s));
            for (const row of picked) seen[layout.firstRow(s) + row] += 1;
            inStep += picked.length;
          }
          assert.equal(inStep, plan.samplesAt(t));
          total += inStep;
        }
        assert.equal(total, 1037);
        // counting a step's samples draws no permutation: each shard's order for the epoch is computed once
        assert.ok(
          orders.every((order, s) => plan.order(s, epoch) === order),
          `S=${S} batch=${batch} epoch ${epoch}: a permutation was drawn again`,
        );
        assert.ok(
          seen.every((n) => n === 1),
          `S=${S} batch=${batch}: a sample seen ${Math.max(...seen)} times or never`,
        );
      }
    }
  });

  it('splits the global batch over the shards and depends only on (seed, epoch, shard, step)', () => {
    const layout = new ShardLayout(batchRows(1000, 10), 4, 'train.arrow');
    const plan = new MicroBatches(layout, 10, 7);
    assert.deepEqual(
      [0, 1, 2, 3].map((s) => plan.size(s)),
      [3, 3, 2, 2],
    );
    assert.equal(plan.stepsPerEpoch, 125);
    const again = new MicroBatches(new ShardLayout(batchRows(1000, 10), 4, 'other.arrow'), 10, 7);
    assert.deepEqual(again.rows(2, 5, 17), plan.rows(2, 5, 17));
    assert.notDeepEqual(plan.rows(2, 6, 17), plan.rows(2, 5, 17));
    assert.notDeepEqual(new MicroBatches(layout, 10, 8).rows(2, 5, 17), plan.rows(2, 5, 17));
    assert.throws(() => new MicroBatches(layout, 3, 1), /global batch: expected an integer >= the shard count 4/);
  });
});
