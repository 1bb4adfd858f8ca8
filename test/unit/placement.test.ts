// Redundancy placement without MPI: the spec's text and its errors, the exact holders of replicas and
// parities for small worlds, balanced load, which simultaneous losses each placement survives
// (against Gemini's closed form and counts done by hand), and how a spec shrinks with the world.
import { strict as assert } from 'node:assert';
import {
  formatRedundancy,
  geminiRecoveryProbability,
  heldBy,
  parseRedundancy,
  planRedundancy,
  unrecoverableChunks,
  type EcPlan,
  type RedundancyPlan,
  type RedundancySpec,
  type ReplicaPlan,
} from '../../src/sharding/placement';

/** all k-subsets of 0..n-1, each ascending */
function subsets(n: number, k: number): number[][] {
  if (k === 0) return [[]];
  if (k > n) return [];
  return [...subsets(n - 1, k), ...subsets(n - 1, k - 1).map((s) => [...s, n - 1])];
}

const replicas = (n: number, copies: number, placement: 'auto' | 'group' | 'ring'): ReplicaPlan =>
  planRedundancy({ kind: 'replicate', copies, placement }, n).plan as ReplicaPlan;
const ec = (n: number, data: number, parity: number): EcPlan => planRedundancy({ kind: 'ec', data, parity }, n).plan as EcPlan;
const recovers = (plan: RedundancyPlan, n: number, lost: number[]): boolean => unrecoverableChunks(plan, n, lost).length === 0;
const recoverableOf = (plan: RedundancyPlan, n: number, k: number): number[][] => subsets(n, k).filter((lost) => recovers(plan, n, lost));

const ACCEPTED =
  'accepted: none, replicate:M, replicate:M:group, replicate:M:ring (M >= 2 copies in all), ec:K+M (K >= 1 data and M >= 1 parity chunks per group)';

describe('redundancy spec', () => {
  it('formats back to the text it was parsed from', () => {
    const specs: [string, RedundancySpec][] = [
      ['none', { kind: 'none' }],
      ['replicate:2', { kind: 'replicate', copies: 2, placement: 'auto' }],
      ['replicate:3:ring', { kind: 'replicate', copies: 3, placement: 'ring' }],
      ['replicate:4:group', { kind: 'replicate', copies: 4, placement: 'group' }],
      ['ec:2+2', { kind: 'ec', data: 2, parity: 2 }],
      ['ec:10+4', { kind: 'ec', data: 10, parity: 4 }],
    ];
    for (const [text, spec] of specs) {
      assert.deepEqual(parseRedundancy(text), spec);
      assert.equal(formatRedundancy(spec), text);
    }
  });

  it('rejects bad text with one line naming it and the accepted forms', () => {
    const errors: [string, string][] = [
      [
        'replicate:1',
        "bad redundancy 'replicate:1': 1 copy is no redundancy, the owner's own copy being the only one (that is 'none'); needs M >= 2",
      ],
      ['replicate:0', "bad redundancy 'replicate:0': M = 0 copies, needs M >= 2"],
      ['replicate:x', "bad redundancy 'replicate:x': the number of copies 'x' is not a whole number"],
      ['replicate:2:auto', "bad redundancy 'replicate:2:auto': placement 'auto' is neither group nor ring"],
      ['ec:0+1', "bad redundancy 'ec:0+1': K = 0 data chunks per group, needs K >= 1"],
      ['ec:2+0', "bad redundancy 'ec:2+0': M = 0 parity chunks per group is no redundancy, needs M >= 1"],
      ['ec:2', "bad redundancy 'ec:2': '2' is not of the form K+M"],
      ['foo', "bad redundancy 'foo': not understood"],
      ['', "bad redundancy '': not understood"],
    ];
    for (const [text, why] of errors) {
      assert.throws(
        () => parseRedundancy(text),
        (e: Error) => {
          assert.equal(e.message, `${why}; ${ACCEPTED}`);
          assert.ok(!e.message.includes('\n'));
          return true;
        },
      );
    }
  });
});

describe('replica placement', () => {
  it('places replicas in groups, on a ring, or mixed, as Gemini does', () => {
    assert.deepEqual(replicas(4, 2, 'auto'), { kind: 'replicate', placement: 'group', copies: 2, holders: [[1], [0], [3], [2]] });
    assert.deepEqual(replicas(4, 2, 'group').holders, [[1], [0], [3], [2]]);
    assert.deepEqual(replicas(4, 2, 'ring'), { kind: 'replicate', placement: 'ring', copies: 2, holders: [[1], [2], [3], [0]] });
    assert.deepEqual(replicas(6, 3, 'auto'), {
      kind: 'replicate',
      placement: 'group',
      copies: 3,
      holders: [
        [1, 2],
        [0, 2],
        [0, 1],
        [4, 5],
        [3, 5],
        [3, 4],
      ],
    });
    assert.deepEqual(replicas(5, 3, 'ring').holders, [
      [1, 2],
      [2, 3],
      [3, 4],
      [0, 4],
      [0, 1],
    ]);
    // 5 = one group {0,1} and a ring over {2,3,4}
    assert.deepEqual(replicas(5, 2, 'auto'), { kind: 'replicate', placement: 'mixed', copies: 2, holders: [[1], [0], [3], [4], [2]] });
    // 7 = one group {0,1,2} and a ring of 3 copies over {3,4,5,6}
    assert.deepEqual(replicas(7, 3, 'auto'), {
      kind: 'replicate',
      placement: 'mixed',
      copies: 3,
      holders: [
        [1, 2],
        [0, 2],
        [0, 1],
        [4, 5],
        [5, 6],
        [3, 6],
        [3, 4],
      ],
    });
    // 4 copies on 5..7 ranks: no whole group fits besides the ring's, so all of it is ring
    assert.deepEqual(replicas(5, 4, 'auto').holders, replicas(5, 4, 'ring').holders);
    // an explicit group placement that does not divide the world is mixed too: the world shrinks under it
    assert.deepEqual(replicas(5, 2, 'group'), replicas(5, 2, 'auto'));
  });

  it('gives each chunk M-1 holders other than its owner, and each rank M-1 replicas', () => {
    for (let n = 1; n <= 9; ++n) {
      for (let copies = 2; copies <= Math.min(4, n); ++copies) {
        for (const placement of ['auto', 'ring'] as const) {
          const plan = replicas(n, copies, placement);
          assert.equal(plan.holders.length, n);
          plan.holders.forEach((holders, chunk) => {
            assert.equal(new Set(holders).size, copies - 1, `n=${n} ${placement} chunk ${chunk}`);
            assert.ok(!holders.includes(chunk));
            assert.deepEqual(
              holders,
              [...holders].sort((a, b) => a - b),
            );
            assert.ok(holders.every((r) => Number.isInteger(r) && r >= 0 && r < n));
          });
          for (let rank = 0; rank < n; ++rank) {
            const held = heldBy(plan, rank);
            assert.equal(held.replicas.length, copies - 1, `n=${n} M=${copies} ${plan.placement} rank ${rank}`);
            assert.deepEqual(held.parities, []);
            assert.ok(held.replicas.every((chunk) => plan.holders[chunk].includes(rank)));
          }
        }
      }
    }
    assert.deepEqual(heldBy(replicas(5, 2, 'auto'), 2).replicas, [4]);
    assert.deepEqual(heldBy(replicas(4, 2, 'ring'), 0).replicas, [3]);
  });

  it('survives any M-1 losses on every placement, and not every M', () => {
    for (let n = 2; n <= 8; ++n) {
      for (let copies = 2; copies <= Math.min(3, n); ++copies) {
        for (const placement of ['auto', 'ring'] as const) {
          const plan = replicas(n, copies, placement);
          for (let k = 0; k < copies; ++k)
            assert.equal(recoverableOf(plan, n, k).length, subsets(n, k).length, `n=${n} M=${copies} ${plan.placement} k=${k}`);
          // a chunk's owner and all its holders
          assert.ok(unrecoverableChunks(plan, n, [0, ...plan.holders[0]]).includes(0));
        }
      }
    }
  });

  it("recovers exactly Gemini's fraction of k-rank losses under group placement", () => {
    for (let n = 4; n <= 8; ++n) {
      for (let m = 2; m <= 3; ++m) {
        if (n % m !== 0) continue;
        const plan = replicas(n, m, 'group');
        assert.equal(plan.placement, 'group');
        for (let k = 0; k <= n; ++k) {
          const fraction = recoverableOf(plan, n, k).length / subsets(n, k).length;
          assert.equal(geminiRecoveryProbability(n, m, k), fraction, `n=${n} m=${m} k=${k}`);
          if (k < m) assert.equal(fraction, 1);
          if (m <= k && k < 2 * m) {
            // the closed form as Gemini prints it
            const C = (a: number, b: number): number => (b < 0 || b > a ? 0 : b === 0 ? 1 : (C(a - 1, b - 1) * a) / b);
            assert.ok(Math.abs(fraction - (1 - (n * C(n - m, k - m)) / (m * C(n, k)))) < 1e-12, `n=${n} m=${m} k=${k}`);
          }
        }
      }
    }
    assert.throws(() => geminiRecoveryProbability(5, 2, 2), /m \| n/);
  });

  it('on 4 ranks with 2 copies, groups survive 4 of the 6 pairs and the ring 2', () => {
    assert.deepEqual(recoverableOf(replicas(4, 2, 'group'), 4, 2), [
      [0, 2],
      [1, 2],
      [0, 3],
      [1, 3],
    ]);
    assert.deepEqual(recoverableOf(replicas(4, 2, 'ring'), 4, 2), [
      [0, 2],
      [1, 3],
    ]);
    assert.deepEqual(unrecoverableChunks(replicas(4, 2, 'ring'), 4, [3, 0]), [3]);
    assert.deepEqual(unrecoverableChunks(replicas(4, 2, 'group'), 4, [1, 0, 0]), [0, 1]);
  });
});

describe('erasure-coded placement', () => {
  it('puts each group of K ranks’ parities on the M ranks after the group', () => {
    assert.deepEqual(ec(4, 2, 2), {
      kind: 'ec',
      data: 2,
      parity: 2,
      groups: [
        { data: [0, 1], parity: [2, 3] },
        { data: [2, 3], parity: [0, 1] },
      ],
    });
    assert.deepEqual(ec(4, 2, 1).groups, [
      { data: [0, 1], parity: [2] },
      { data: [2, 3], parity: [0] },
    ]);
    assert.deepEqual(ec(6, 2, 1).groups, [
      { data: [0, 1], parity: [2] },
      { data: [2, 3], parity: [4] },
      { data: [4, 5], parity: [0] },
    ]);
    assert.deepEqual(ec(6, 2, 2).groups, [
      { data: [0, 1], parity: [2, 3] },
      { data: [2, 3], parity: [4, 5] },
      { data: [4, 5], parity: [0, 1] },
    ]);
    // the last group is the one rank left over
    assert.deepEqual(ec(5, 2, 1).groups, [
      { data: [0, 1], parity: [2] },
      { data: [2, 3], parity: [4] },
      { data: [4], parity: [0] },
    ]);
    assert.deepEqual(heldBy(ec(5, 2, 1), 0), { replicas: [], parities: [{ group: 2, row: 0 }] });
    assert.deepEqual(heldBy(ec(4, 2, 2), 3), { replicas: [], parities: [{ group: 0, row: 1 }] });
    assert.deepEqual(heldBy(ec(4, 2, 1), 1), { replicas: [], parities: [] });
  });

  it('survives any M losses, and not every M+1', () => {
    for (let n = 2; n <= 8; ++n) {
      for (let data = 1; data <= 3; ++data) {
        for (let parity = 1; parity <= 3 && data + parity <= n; ++parity) {
          const plan = ec(n, data, parity);
          assert.ok(!planRedundancy({ kind: 'ec', data, parity }, n).degraded);
          assert.deepEqual(
            plan.groups.flatMap((g) => g.data),
            Array.from({ length: n }, (_, r) => r),
          );
          for (const group of plan.groups)
            assert.ok(group.parity.every((r) => !group.data.includes(r)) && new Set(group.parity).size === parity);
          for (let k = 0; k <= parity; ++k)
            assert.equal(recoverableOf(plan, n, k).length, subsets(n, k).length, `n=${n} ec:${data}+${parity} k=${k}`);
          // the first group's first data rank and all its parity holders
          assert.ok(unrecoverableChunks(plan, n, [0, ...plan.groups[0].parity]).includes(0));
        }
      }
    }
  });

  it('on 4 ranks, ec:2+2 survives all 6 pairs and ec:2+1 only {1,3}', () => {
    assert.equal(recoverableOf(ec(4, 2, 2), 4, 2).length, 6);
    // groups {0,1} with parity on 2 and {2,3} with parity on 0
    const lostChunks = subsets(4, 2).map((lost) => [lost, unrecoverableChunks(ec(4, 2, 1), 4, lost)]);
    assert.deepEqual(lostChunks, [
      [
        [0, 1],
        [0, 1],
      ],
      [
        [0, 2],
        [0, 2],
      ], // each group keeps 1 of the 2 fragments it needs: {0,1} keeps 1, {2,3} keeps 3
      [[1, 2], [1]], // {0,1} keeps 0 but lost its parity; {2,3} rebuilds 2 from 3 and the parity on 0
      [[0, 3], [3]],
      [[1, 3], []],
      [
        [2, 3],
        [2, 3],
      ],
    ]);
  });

  it('on 6 ranks, ec:2+2 survives exactly the triples that take one rank of each group', () => {
    // groups {0,1}, {2,3}, {4,5}, each with its parities on the next group: a group's 4 fragments lie
    // on its own and the next group's ranks, and it is lost when 3 of those 4 go. A triple inside
    // none of {0,1,2,3}, {2,3,4,5}, {4,5,0,1} takes one rank from each group: 2*2*2 = 8 of the 20.
    const plan = ec(6, 2, 2);
    const groupOf = (r: number): number => Math.floor(r / 2);
    let recovered = 0;
    for (const lost of subsets(6, 3)) {
      const oneFromEach = new Set(lost.map(groupOf)).size === 3;
      const gone = unrecoverableChunks(plan, 6, lost);
      if (oneFromEach) {
        assert.deepEqual(gone, [], `${lost}`);
        ++recovered;
      } else {
        // the group whose own and next group's ranks hold all 3: its lost data is gone
        const g = [0, 1, 2].find((g) => lost.every((r) => groupOf(r) === g || groupOf(r) === (g + 1) % 3))!;
        assert.deepEqual(
          gone,
          lost.filter((r) => groupOf(r) === g),
          `${lost}`,
        );
      }
    }
    assert.equal(recovered, 8);
  });
});

describe('redundancy on a shrunken world', () => {
  it('keeps as many copies as there are ranks', () => {
    const shrunk = planRedundancy(parseRedundancy('replicate:3'), 2);
    assert.deepEqual(shrunk, {
      plan: { kind: 'replicate', placement: 'group', copies: 2, holders: [[1], [0]] },
      degraded: 'replicate:3 needs 3 ranks; on 2 ranks using replicate:2',
    });
    assert.equal(
      planRedundancy(parseRedundancy('replicate:3:ring'), 2).degraded,
      'replicate:3:ring needs 3 ranks; on 2 ranks using replicate:2:ring',
    );
    assert.deepEqual(planRedundancy(parseRedundancy('replicate:2'), 1), {
      plan: { kind: 'none' },
      degraded: 'replicate:2 needs 2 ranks; on 1 rank using none',
    });
    assert.deepEqual(planRedundancy(parseRedundancy('replicate:3'), 3), { plan: replicas(3, 3, 'group') });
  });

  it('keeps the M parities and shrinks K, or uses K = 1 and M = n-1', () => {
    assert.deepEqual(planRedundancy(parseRedundancy('ec:2+2'), 3), {
      plan: {
        kind: 'ec',
        data: 1,
        parity: 2,
        groups: [
          { data: [0], parity: [1, 2] },
          { data: [1], parity: [2, 0] },
          { data: [2], parity: [0, 1] },
        ],
      },
      degraded: 'ec:2+2 needs 4 ranks; on 3 ranks using ec:1+2',
    });
    assert.equal(planRedundancy(parseRedundancy('ec:4+2'), 5).degraded, 'ec:4+2 needs 6 ranks; on 5 ranks using ec:3+2');
    assert.deepEqual(planRedundancy(parseRedundancy('ec:2+2'), 2), {
      plan: {
        kind: 'ec',
        data: 1,
        parity: 1,
        groups: [
          { data: [0], parity: [1] },
          { data: [1], parity: [0] },
        ],
      },
      degraded: 'ec:2+2 needs 4 ranks; on 2 ranks using ec:1+1',
    });
    assert.deepEqual(planRedundancy(parseRedundancy('ec:2+1'), 1), {
      plan: { kind: 'none' },
      degraded: 'ec:2+1 needs 3 ranks; on 1 rank using none',
    });
    const fits = planRedundancy(parseRedundancy('ec:2+2'), 4);
    assert.ok(!('degraded' in fits));
  });

  it('loses every lost chunk without redundancy, and checks its inputs', () => {
    const none = planRedundancy({ kind: 'none' }, 4).plan;
    assert.deepEqual(unrecoverableChunks(none, 4, [2, 0]), [0, 2]);
    assert.deepEqual(unrecoverableChunks(none, 4, []), []);
    assert.deepEqual(heldBy(none, 3), { replicas: [], parities: [] });
    assert.throws(() => planRedundancy({ kind: 'none' }, 0), /at least 1 rank, got 0/);
    assert.throws(() => planRedundancy({ kind: 'ec', data: 2, parity: 1 }, 2.5), /at least 1 rank, got 2.5/);
    assert.throws(() => planRedundancy({ kind: 'replicate', copies: 1, placement: 'auto' }, 4), /copies must be a whole number >= 2/);
    assert.throws(() => unrecoverableChunks(replicas(4, 2, 'auto'), 5, [0]), /plan is for 4 ranks, not 5/);
    assert.throws(() => unrecoverableChunks(ec(4, 2, 1), 4, [4]), /lost rank 4 is not a rank of the 4 ranks/);
    assert.throws(() => heldBy(ec(4, 2, 1), -1), /rank -1 is not a rank/);
  });
});
