// The fault-tolerance protocol's decisions (src/protocol/), in the spirit of torchft's
// manager_test.py: N simulated ranks in one process over a scripted communicator
// (test/helpers/scripted-comm.ts), no MPI. The vote (AND over the survivors, one failure event per
// step, --on-failure none), the membership (leader, spares, shard handover), the repair (lost
// ranks, history, the majority rule, a rank's own error) and the Manager's step (which step
// commits, the retry, a SIGTERM stop at the commit). The real-MPI tests (test/mpi/) stay the proof
// that MPI behaves as scripted here.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { generateSynthetic } from '../../datasets/synthetic';
import type { TrainingState } from '../../src/checkpoint/checkpoint';
import type { Communicator } from '../../src/comm/communicator';
import { CommTimeoutError, ProcFailedError } from '../../src/comm/errors';
import { Dataset } from '../../src/data/dataset';
import { ShardMap } from '../../src/data/shard-map';
import { FaultInjector } from '../../src/liveness/drills';
import type { Failure, ProtocolConfig, RunHistory, StateSource } from '../../src/protocol/contracts';
import { Manager } from '../../src/protocol/manager';
import { Membership } from '../../src/protocol/membership';
import { losslessRepairsLimit, WorldRepair } from '../../src/protocol/repair';
import { ProtocolStop } from '../../src/liveness/stop';
import { OK, Vote } from '../../src/protocol/vote';
import { onRanks, RankDeadError, RecordingObserver, ScriptedWorld } from '../helpers/scripted-comm';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-protocol-');
/** pid files: none (a lost rank then counts as maybe running elsewhere) */
const noPids = path.join(scratch, 'no-pids');
fs.mkdirSync(noPids);
const commTimeoutMs = 2000;

const range = (n: number): number[] => Array.from({ length: n }, (_, r) => r);

/** The value each rank got, failing on any rank that threw. */
function values<T>(results: Map<number, { value?: T; error?: unknown }>): Map<number, T> {
  for (const [r, { error }] of results) if (error !== undefined) throw new Error(`rank ${r} threw: ${(error as Error).stack}`);
  return new Map([...results].map(([r, { value }]) => [r, value as T]));
}

/** The error each rank threw, failing on any rank that did not. */
function errors(results: Map<number, { value?: unknown; error?: unknown }>): Map<number, unknown> {
  for (const [r, { error }] of results) if (error === undefined) throw new Error(`rank ${r} did not throw`);
  return new Map([...results].map(([r, { error }]) => [r, error]));
}

/** One simulated rank's protocol parts below the Manager, over its own scripted communicator. */
interface Parts {
  position: { step: number; trainingDone: boolean };
  observer: RecordingObserver;
  membership: Membership;
  vote: Vote;
  history: RunHistory;
  repair: WorldRepair;
}

function parts(
  world: ScriptedWorld,
  options: { shards: number; spares?: number; step?: number; pidsDir?: string; onFailure?: 'exact' | 'shrink' | 'none' },
): Parts[] {
  return world.comms.map((comm) => {
    const position = { step: options.step ?? 0, trainingDone: false };
    const observer = new RecordingObserver();
    const membership = new Membership(
      {
        shards: options.shards,
        spares: options.spares ?? 0,
        joined: false,
        launchJob: true,
        commTimeoutMs,
        pidsDir: options.pidsDir ?? '',
      },
      comm,
      position,
      observer,
      () => undefined,
    );
    const vote = new Vote(
      options.onFailure ?? 'shrink',
      () => membership.comm,
      position,
      observer,
      () => undefined,
    );
    const history: RunHistory = { failures: [], worldHistory: [] };
    const repair = new WorldRepair(
      { maxRetries: 3, commTimeoutMs, pidsDir: options.pidsDir ?? noPids },
      membership,
      vote,
      position,
      history,
      observer,
      () => undefined,
    );
    return { position, observer, membership, vote, history, repair };
  });
}

describe('protocol decisions (scripted world, no MPI)', function () {
  this.timeout(20_000);
  after(() => removeScratch(scratch));

  describe('the scripted world itself', () => {
    it('a rendezvous that cannot complete rejects at its deadline, and ranks in different calls reject at once', async () => {
      const world = new ScriptedWorld(2, 100);
      await assert.rejects(world.comms[0].allreduce(Float32Array.of(1)), /never completed: rank\(s\) 0 waited 100 ms for rank\(s\) 1/);
      const other = new ScriptedWorld(2, 100);
      const [a, b] = [other.comms[0].bcast(Float32Array.of(1), 0), other.comms[1].barrier()];
      await assert.rejects(a, /ranks in different calls/);
      await assert.rejects(b, /called barrier where its peers called bcast/);
      // (the next collective is matched after both: they line up again)
      const sums = [Float64Array.of(0.5, 1), Float64Array.of(0.25, -1)];
      await Promise.all([0, 1].map((r) => other.comms[r].allreduce(sums[r])));
      assert.deepEqual(
        sums.map((x) => [...x]),
        [
          [0.75, 0],
          [0.75, 0],
        ],
      );
    });
  });

  describe('Vote', () => {
    it("ANDs every rank's flag, and one rank's failed collective makes every rank's vote false", async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4 });
      const flags = [7, 5, 13, 15];
      assert.deepEqual(
        [...values(await onRanks(range(4), (r) => p[r].vote.agree(flags[r])))],
        [
          [0, 5],
          [1, 5],
          [2, 5],
          [3, 5],
        ],
      );
      // rank 3's collective fails (its own failure: nobody died), the others' succeed
      const ok = values(
        await onRanks(range(4), (r) =>
          p[r].vote.succeedsEverywhere('collective', async () => {
            if (r === 3) throw new ProcFailedError('scripted', 75);
          }),
        ),
      );
      assert.deepEqual([...ok.values()], [false, false, false, false]);
      assert.deepEqual(p[3].observer.named('failure'), [{ event: 'failure', step: 0, phase: 'collective', error: 'ProcFailedError' }]);
      for (const r of [0, 1, 2]) assert.deepEqual(p[r].observer.events, [], `rank ${r} noted a failure it did not meet`);
      assert.deepEqual(
        range(4).map((r) => p[r].vote.retrying),
        [false, false, false, true],
      );
    });

    it('a rank dying inside the collective: every survivor votes false and notes the failure once', async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4 });
      world.at(2, 'allreduce', 'kill');
      const results = await onRanks(range(4), (r) =>
        p[r].vote.succeedsEverywhere('collective', () => p[r].membership.comm.allreduce(Float32Array.of(r))),
      );
      assert.ok(results.get(2)!.error instanceof RankDeadError);
      results.delete(2);
      assert.deepEqual(
        [...values(results)],
        [
          [0, false],
          [1, false],
          [3, false],
        ],
      );
      for (const r of [0, 1, 3]) {
        const [failure] = p[r].observer.events;
        assert.equal(typeof failure.detect_ms, 'number');
        assert.deepEqual(p[r].observer.named('failure'), [{ event: 'failure', step: 0, phase: 'collective', error: 'ProcFailedError' }]);
        assert.equal(p[r].vote.retrying, true);
      }
      // the same step fails again (the comm still holds the dead rank): no second event
      assert.deepEqual(
        [...values(await onRanks([0, 1, 3], (r) => p[r].vote.succeedsEverywhere('readback', () => p[r].membership.comm.barrier())))],
        [
          [0, false],
          [1, false],
          [3, false],
        ],
      );
      for (const r of [0, 1, 3]) assert.equal(p[r].observer.named('failure').length, 1);
      // a new step's failure is noted again; one met by the agreement itself names the agree phase
      for (const r of [0, 1, 3]) p[r].position.step = 1;
      assert.deepEqual(
        [...values(await onRanks([0, 1, 3], (r) => p[r].vote.agree(OK)))],
        [
          [0, null],
          [1, null],
          [3, null],
        ],
      );
      for (const r of [0, 1, 3]) {
        assert.deepEqual(p[r].observer.named('failure'), [
          { event: 'failure', step: 0, phase: 'collective', error: 'ProcFailedError' },
          { event: 'failure', step: 1, phase: 'agree', error: 'ProcFailedError' },
        ]);
      }
    });

    it('a collective timing out on one rank (its comm revoked) fails the vote on all, each naming its own error', async () => {
      const world = new ScriptedWorld(3);
      const p = parts(world, { shards: 3 });
      world.at(1, 'allreduce', 'timeout');
      const ok = values(
        await onRanks(range(3), (r) =>
          p[r].vote.succeedsEverywhere('collective', () => p[r].membership.comm.allreduce(Float32Array.of(r))),
        ),
      );
      assert.deepEqual([...ok.values()], [false, false, false]);
      assert.deepEqual(
        range(3).map((r) => p[r].observer.named('failure')[0].error),
        ['RevokedError', 'CommTimeoutError', 'RevokedError'],
      );
    });

    it('--on-failure none: the failure passes through, unrecorded', async () => {
      const world = new ScriptedWorld(3);
      const p = parts(world, { shards: 3, onFailure: 'none' });
      world.at(1, 'allreduce', 'kill');
      const results = await onRanks(range(3), (r) =>
        p[r].vote.succeedsEverywhere('collective', () => p[r].membership.comm.allreduce(Float32Array.of(r))),
      );
      assert.ok(results.get(1)!.error instanceof RankDeadError);
      results.delete(1);
      for (const [r, error] of errors(results)) {
        assert.ok(error instanceof ProcFailedError, `rank ${r}: ${String(error)}`);
        assert.deepEqual(p[r].observer.events, []);
        assert.equal(p[r].vote.retrying, false);
      }
      // other errors pass through under every policy
      const q = parts(new ScriptedWorld(1), { shards: 1 });
      await assert.rejects(
        q[0].vote.completes('collective', async () => {
          throw new RangeError('a bug');
        }),
        RangeError,
      );
      assert.equal(
        await q[0].vote.completes('collective', async () => {
          throw new CommTimeoutError('t', 0);
        }),
        false,
      );
    });
  });

  describe('Membership', () => {
    it("without spares: every rank works, the lowest leads; a lost rank's shards go to the least-loaded survivors", async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 8 });
      assert.deepEqual(
        range(4).map((r) => [p[r].membership.rank, p[r].membership.working, p[r].membership.isLeader]),
        [
          [0, true, true],
          [1, true, false],
          [2, true, false],
          [3, true, false],
        ],
      );
      assert.deepEqual(p[0].membership.shardMap.toJSON(), [0, 0, 1, 1, 2, 2, 3, 3]);
      assert.deepEqual(
        range(4).map((r) => p[r].membership.heldShards),
        [
          [0, 1],
          [2, 3],
          [4, 5],
          [6, 7],
        ],
      );
      assert.deepEqual(p[0].membership.spares, []);
      world.kill(2);
      const survivors = [0, 1, 3];
      assert.deepEqual(
        [...values(await onRanks(survivors, (r) => p[r].repair.run(false)))],
        survivors.map((r) => [r, [2]]),
      );
      const moved = values(await onRanks(survivors, async (r) => p[r].membership.handOver([])));
      const expected = ShardMap.initial(8, range(4)).handOver(survivors, []);
      assert.deepEqual(expected.toJSON(), [0, 0, 1, 1, 0, 1, 3, 3]);
      for (const r of survivors) {
        assert.deepEqual(p[r].membership.shardMap.toJSON(), expected.toJSON());
        assert.deepEqual(
          [...moved.get(r)!],
          [
            [0, [4]],
            [1, [5]],
          ],
        );
      }
      assert.deepEqual(
        [...values(await onRanks(survivors, (r) => p[r].membership.formWorkers(p[r].vote)))].map(([, ok]) => ok),
        [true, true, true],
      );
      assert.deepEqual(
        survivors.map((r) => [p[r].membership.size, p[r].membership.rank, p[r].membership.isLeader]),
        [
          [3, 0, true],
          [3, 1, false],
          [3, 2, false],
        ],
      );
    });

    it('the leader is the lowest live working rank: rank 0 lost, rank 1 leads', async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4 });
      world.kill(0);
      await onRanks([1, 2, 3], (r) => p[r].repair.run(false));
      assert.deepEqual(
        [1, 2, 3].map((r) => p[r].membership.isLeader),
        [true, false, false],
      );
      assert.deepEqual(
        [1, 2, 3].map((r) => p[r].observer.leaders.at(-1)),
        [true, false, false],
      );
    });

    it("with a spare: it does not work, is fed the step's outcome, and takes the lost rank's shards whole", async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 6, spares: 1 });
      assert.deepEqual(
        range(4).map((r) => p[r].membership.working),
        [false, false, false, false],
      ); // until the split
      await onRanks(range(4), (r) => p[r].membership.splitWorkers());
      assert.deepEqual(
        range(4).map((r) => [p[r].membership.rank, p[r].membership.working, p[r].membership.size, p[r].membership.isLeader]),
        [
          [0, true, 3, true],
          [1, true, 3, false],
          [2, true, 3, false],
          [-1, false, 3, false],
        ],
      );
      for (const r of range(4)) assert.deepEqual(p[r].membership.spares, [3]);
      assert.deepEqual(p[3].membership.heldShards, []);
      assert.deepEqual(p[0].membership.shardMap.toJSON(), [0, 0, 1, 1, 2, 2]);
      // the workers' sum leaves the spare out; the leader's outcome reaches it
      const sums = range(4).map((r) => Float32Array.of(r + 1));
      await onRanks([0, 1, 2], (r) => p[r].membership.allreduce(sums[r]));
      assert.deepEqual(
        sums.map((s) => s[0]),
        [6, 6, 6, 4],
      );
      const outcomes = range(4).map((r) => (r === 0 ? Float32Array.of(1.5, -2) : new Float32Array(2)));
      values(await onRanks(range(4), (r) => p[r].membership.feedSpares(outcomes[r])));
      assert.deepEqual(
        outcomes.map((o) => [...o]),
        [
          [1.5, -2],
          [1.5, -2],
          [1.5, -2],
          [1.5, -2],
        ],
      ); // (a bcast over every live rank)
      // rank 1 dies: the spare takes its place and exactly its shards
      world.kill(1);
      const survivors = [0, 2, 3];
      values(await onRanks(survivors, (r) => p[r].repair.run(false)));
      const joiners = values(await onRanks(survivors, (r) => p[r].membership.grow(p[r].vote)));
      for (const r of survivors) assert.deepEqual(joiners.get(r), [3]);
      const moved = values(await onRanks(survivors, async (r) => p[r].membership.handOver([3])));
      const before = ShardMap.initial(6, [0, 1, 2]);
      const after = before.handOver(survivors, [3]);
      assert.deepEqual(after.toJSON(), [0, 0, 3, 3, 2, 2]);
      assert.deepEqual(after.shardsOf(3), before.shardsOf(1));
      for (const r of survivors) {
        assert.deepEqual(p[r].membership.shardMap.toJSON(), after.toJSON());
        assert.deepEqual([...moved.get(r)!], [[3, [2, 3]]]);
        assert.deepEqual(p[r].membership.spares, []);
      }
      values(await onRanks(survivors, (r) => p[r].membership.formWorkers(p[r].vote)));
      assert.deepEqual(
        survivors.map((r) => [p[r].membership.rank, p[r].membership.working, p[r].membership.isLeader]),
        [
          [0, true, true],
          [1, true, false],
          [2, true, false],
        ],
      );
      assert.deepEqual(p[3].membership.heldShards, [2, 3]);
    });
  });

  describe('WorldRepair', () => {
    it('one rank of 4 lost: every survivor repairs alike and records the failure', async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4, step: 5 });
      world.kill(2);
      const survivors = [0, 1, 3];
      const lost = values(await onRanks(survivors, (r) => p[r].repair.run(false)));
      for (const r of survivors) {
        assert.deepEqual(lost.get(r), [2]);
        assert.deepEqual(p[r].history.failures, [{ step: 5, lost: [2], world: 3 }] satisfies Failure[]);
        assert.deepEqual(p[r].history.worldHistory, [{ step: 5, world: 3, lost: [2] }]);
        assert.deepEqual(p[r].observer.named('revoke+shrink'), [{ event: 'revoke+shrink', step: 5, lost: [2], world: 3, attempts: 1 }]);
        assert.deepEqual(p[r].observer.named('agree'), [{ event: 'agree', step: 5 }]);
        assert.deepEqual(
          p[r].observer.events.map((e) => e.event),
          ['revoke+shrink', 'agree'],
        );
        assert.deepEqual(p[r].membership.comm.worldRanks, survivors);
      }
      // the old communicator was revoked (by every survivor) before the shrink
      assert.deepEqual(world.calls.filter((c) => c.endsWith('revoke')).sort(), ['0 revoke', '1 revoke', '3 revoke']);
    });

    it('a step repaired again and again with no rank lost (the ranks not meeting in one collective): after losslessRepairsLimit such repairs in a row its next failure stops every rank; a loss or the next step starts the count again', async () => {
      const world = new ScriptedWorld(3);
      const p = parts(world, { shards: 3, step: 7 });
      const repairAll = () => onRanks(range(3), (r) => p[r].repair.run(false));
      // as many lossless repairs of step 7, then of step 8
      for (let i = 0; i < losslessRepairsLimit; i++) values(await repairAll());
      for (const r of range(3)) p[r].position.step = 8;
      for (let i = 0; i < losslessRepairsLimit; i++) values(await repairAll());
      for (const [r, error] of errors(await repairAll())) {
        assert.ok(error instanceof ProtocolStop, `rank ${r}: ${String(error)}`);
        assert.equal(error.reason, 'unrecoverable');
        assert.equal(error.exitCode, 1);
        assert.equal(
          error.message,
          `step 8 failed again after ${losslessRepairsLimit} repairs in a row that lost no rank: the ranks do not meet in the same collective; stopping`,
        );
      }
      // no repair was begun for it: nothing more revoked
      assert.equal(world.calls.filter((c) => c.endsWith('revoke')).length, 2 * losslessRepairsLimit * 3);
      // a rank lost in between: the count starts again
      const other = new ScriptedWorld(3);
      const again = parts(other, { shards: 3, step: 2 });
      const runOn = (ranks: number[]) => onRanks(ranks, (r) => again[r].repair.run(false));
      for (let i = 0; i < losslessRepairsLimit - 1; i++) values(await runOn([0, 1, 2]));
      other.kill(2);
      assert.deepEqual(values(await runOn([0, 1])).get(0), [2]);
      for (let i = 0; i < losslessRepairsLimit; i++) values(await runOn([0, 1]));
    });

    it('two ranks of 4 lost, neither seen gone: an even split is no majority, every survivor stops (minority)', async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4, step: 3 });
      world.kill(2);
      world.kill(3);
      for (const [r, error] of errors(await onRanks([0, 1], (r) => p[r].repair.run(false)))) {
        assert.ok(error instanceof ProtocolStop, `rank ${r}: ${String(error)}`);
        assert.equal(error.reason, 'minority');
        assert.equal(error.exitCode, 4);
        assert.deepEqual(p[r].history.failures, []);
        assert.deepEqual(p[r].observer.named('revoke+shrink'), []);
      }
    });

    it('two ranks of 4 lost but seen gone from this host (their pid files, no process): the survivors go on', async () => {
      const pidsDir = makeScratch('ft-protocol-pids-');
      try {
        // a pid no process can have: the rank is gone from this host, and nothing is ever signalled
        const pidMax = Number(fs.readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
        for (const r of [2, 3]) fs.writeFileSync(path.join(pidsDir, String(r)), `${pidMax + 1 + r} ${os.hostname()} 12345\n`);
        const world = new ScriptedWorld(4);
        const p = parts(world, { shards: 4, step: 3, pidsDir });
        world.kill(2);
        world.kill(3);
        const lost = values(await onRanks([0, 1], (r) => p[r].repair.run(false)));
        for (const r of [0, 1]) {
          assert.deepEqual(lost.get(r), [2, 3]);
          assert.deepEqual(p[r].history.failures, [{ step: 3, lost: [2, 3], world: 2 }]);
        }
      } finally {
        removeScratch(pidsDir);
      }
    });

    it('a peer alive but silent (a stopped rank no detector sees, on a host without survivors): the shrink meets its deadline, every caller stops in one line', async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4, step: 10 });
      // rank 3 never calls anything: ULFM does not count it failed, so the shrink waits for it
      for (const [r, error] of errors(await onRanks([0, 1, 2], (r) => p[r].repair.run(false)))) {
        assert.ok(error instanceof ProtocolStop, `rank ${r}: ${String(error)}`);
        assert.equal(error.reason, 'unrecoverable');
        assert.equal(
          error.message,
          `the repair at step 10 cannot finish: MPIX_Comm_shrink did not return within ${commTimeoutMs} ms: a peer is alive but does not take part`,
        );
      }
    });

    it("a rank's own error: its peers' collective is revoked, and every rank stops for it, naming it", async () => {
      const world = new ScriptedWorld(4);
      const p = parts(world, { shards: 4, step: 2 });
      const results = await onRanks(range(4), async (r) => {
        if (r === 1) return p[r].repair.reportError();
        const ok = await p[r].vote.succeedsEverywhere('collective', () => p[r].membership.comm.allreduce(Float32Array.of(r)));
        assert.equal(ok, false);
        await p[r].repair.run(false);
        return 'went on';
      });
      const stop = values(new Map([[1, results.get(1)!]])).get(1); // reportError returns its ProtocolStop
      results.delete(1);
      for (const error of [stop, ...errors(results).values()]) {
        assert.ok(error instanceof ProtocolStop, String(error));
        assert.equal(error.reason, 'error');
        assert.deepEqual(error.erred, [1]);
        assert.equal(error.message, 'rank(s) 1 stopped the job for an error');
        assert.equal(error.exitCode, 1);
      }
      for (const r of [0, 2, 3])
        assert.deepEqual(p[r].observer.named('failure'), [{ event: 'failure', step: 2, phase: 'collective', error: 'RevokedError' }]);
      for (const r of range(4)) assert.deepEqual(p[r].history.failures, []);
    });

    it('survivors at different steps: the repair calls it a bug on every one of them', async () => {
      const world = new ScriptedWorld(3);
      const p = parts(world, { shards: 3, step: 4 });
      p[2].position.step = 5;
      for (const error of errors(await onRanks(range(3), (r) => p[r].repair.run(false))).values()) {
        assert.match((error as Error).message, /the survivors stand at different steps/);
      }
    });
  });

  describe('Manager', () => {
    let dataset: Dataset;
    const data = path.join(scratch, 'data');

    before(async () => {
      // 8 record batches of 10 rows: with 8 shards, shard s is record batch s
      await generateSynthetic(data, { shape: [1, 4, 4], classes: 2, trainRows: 80, testRows: 16, seed: 1, rowsPerBatch: 10 });
      dataset = await Dataset.open(data);
    });
    after(async () => dataset?.close());

    const tensors = [{ name: 'w', shape: [4] }];

    function source(): StateSource {
      const state: TrainingState = { tensors, params: Float32Array.of(1, 2, 3, 4), slots: [], held: { from: 0, to: 4 } };
      return {
        state: () => state,
        position: () => ({ epoch: 0 }),
        done: () => false,
        lastStep: () => false,
        // the retried step reads the first row of each shard taken over
        stepRows: (_map, shards) => new Map(shards.map((s) => [s, Int32Array.of(0)])),
        initialState: () => undefined,
        joinBuffers: () => [],
        joinAt: () => undefined,
        stateWritten: () => undefined,
      };
    }

    function managers(
      world: ScriptedWorld,
      name: string,
      extra: Partial<ProtocolConfig> = {},
    ): { managers: Manager[]; observers: RecordingObserver[]; config: ProtocolConfig } {
      const dir = path.join(scratch, name);
      fs.mkdirSync(dir);
      const config: ProtocolConfig = {
        onFailure: 'shrink',
        shards: 8,
        minRanks: 1,
        maxRetries: 3,
        jitCheckpoint: false,
        checkpointEvery: 0,
        checkpointDir: path.join(dir, 'checkpoints'),
        keepCheckpoints: 2,
        spareCheckpoint: false,
        launchJob: true,
        identity: { seed: 1 },
        commTimeoutMs,
        diskTimeoutMs: commTimeoutMs,
        pidsDir: noPids,
        logFile: path.join(dir, 'log'),
        verifyEvery: 0,
        onCorruption: 'evict',
        sumLength: 0,
        add: () => undefined,
        overlap: false,
        spares: 0,
        joined: false,
        ...extra,
      };
      const observers = world.comms.map(() => new RecordingObserver());
      const list = world.comms.map(
        (comm: Communicator, r) =>
          new Manager(
            config,
            comm,
            dataset,
            dataset.train.layout(config.shards),
            observers[r],
            new FaultInjector([], r, path.join(dir, 'drills'), noPids, 1),
          ),
      );
      return { managers: list, observers, config };
    }

    it('no failure: exchange() is true on every rank, and only commit() advances the step', async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers } = managers(world, 'plain');
      values(await onRanks(range(4), (r) => m[r].start(source())));
      const sums = range(4).map((r) => Float32Array.of(r + 1));
      assert.deepEqual(
        [...values(await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(sums[r]))))].map(([, ok]) => ok),
        [true, true, true, true],
      );
      assert.deepEqual(
        sums.map((s) => s[0]),
        [10, 10, 10, 10],
      );
      assert.deepEqual(
        range(4).map((r) => [m[r].step, m[r].retrying]),
        [
          [0, false],
          [0, false],
          [0, false],
          [0, false],
        ],
      );
      values(await onRanks(range(4), (r) => m[r].commit()));
      assert.deepEqual(
        range(4).map((r) => m[r].step),
        [1, 1, 1, 1],
      );
      assert.deepEqual(
        range(4).map((r) => m[r].world.isLeader),
        [true, false, false, false],
      );
      for (const r of range(4)) assert.deepEqual(observers[r].events, []);
      values(await onRanks(range(4), (r) => m[r].finish(() => undefined)));
      values(await onRanks(range(4), (r) => m[r].close()));
    });

    it('a rank dies inside exchange(): every survivor recovers, retries the same step, and commits it once', async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers } = managers(world, 'failure');
      values(await onRanks(range(4), (r) => m[r].start(source())));
      world.at(2, 'allreduce', 'kill');
      const first = await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r))));
      assert.ok(first.get(2)!.error instanceof RankDeadError);
      first.delete(2);
      const survivors = [0, 1, 3];
      assert.deepEqual(
        [...values(first)],
        [
          [0, false],
          [1, false],
          [3, false],
        ],
      );
      const expectedMap = ShardMap.initial(8, range(4)).handOver(survivors, []);
      const readBack = dataset.train.batchBytes(4, 6); // shards 4 and 5: record batches 4 and 5
      for (const r of survivors) {
        assert.equal(m[r].step, 0);
        assert.equal(m[r].retrying, true);
        assert.deepEqual(m[r].failures, [{ step: 0, lost: [2], world: 3 }]);
        assert.deepEqual(m[r].worldHistory, [
          { step: 0, world: 4, lost: [] },
          { step: 0, world: 3, lost: [2] },
        ]);
        assert.deepEqual(m[r].world.shardMap.toJSON(), expectedMap.toJSON());
        assert.equal(m[r].world.size, 3);
        // the readback is reported with the retried step's vote, which its counts' sum rides with
        assert.deepEqual(
          observers[r].events.map((e) => e.event),
          ['failure', 'revoke+shrink', 'agree'],
        );
        assert.deepEqual(observers[r].named('failure'), [{ event: 'failure', step: 0, phase: 'collective', error: 'ProcFailedError' }]);
      }
      assert.deepEqual([...m[0].world.shardMap.shardsOf(0)], [0, 1, 4]);
      // the retry, on the repaired world
      const sums = survivors.map((r) => Float32Array.of(r + 1));
      assert.deepEqual(
        [...values(await onRanks(survivors, (r) => m[r].exchange(() => m[r].world.allreduce(sums[survivors.indexOf(r)]))))].map(
          ([, ok]) => ok,
        ),
        [true, true, true],
      );
      assert.deepEqual(
        sums.map((s) => s[0]),
        [7, 7, 7],
      );
      values(await onRanks(survivors, (r) => m[r].commit()));
      for (const r of survivors) {
        assert.deepEqual([m[r].step, m[r].retrying], [1, false]);
        assert.deepEqual(
          observers[r].events.map((e) => e.event),
          ['failure', 'revoke+shrink', 'agree', 'readback', 'retry'],
        );
        assert.deepEqual(observers[r].named('readback'), [{ event: 'readback', step: 0, shards: [4, 5], bytes_before_retry: readBack }]);
        assert.deepEqual(observers[r].named('retry'), [{ event: 'retry', step: 0 }]);
      }
      // the end: one write, by the leader, and the job's readback summed on every rank
      const writes: number[] = [];
      values(await onRanks(survivors, (r) => m[r].finish(() => writes.push(r))));
      assert.deepEqual(writes, [0]);
      assert.deepEqual(
        survivors.map((r) => m[r].bytesReadBack),
        [readBack, readBack, readBack],
      );
      values(await onRanks(survivors, (r) => m[r].close()));
    });

    it('a death only one survivor sees inside exchange(): it revokes, so the others leave their waits now and recover with it', async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers } = managers(world, 'seen-by-one');
      values(await onRanks(range(4), (r) => m[r].start(source())));
      // ranks 0 to 2 wait in the sum when rank 3 dies in it; only rank 1's wait meets the death
      world.at(3, 'allreduce', 'kill', 1, [1]);
      const first = await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r))));
      assert.ok(first.get(3)!.error instanceof RankDeadError);
      first.delete(3);
      assert.deepEqual(
        [...values(first)],
        [
          [0, false],
          [1, false],
          [2, false],
        ],
      );
      assert.deepEqual(
        [0, 1, 2].map((r) => observers[r].named('failure')[0].error),
        ['RevokedError', 'ProcFailedError', 'RevokedError'],
      );
      assert.deepEqual(
        [0, 1, 2].map((r) => m[r].failures),
        [0, 1, 2].map(() => [{ step: 0, lost: [3], world: 3 }]),
      );
      const sums = [0, 1, 2].map((r) => Float32Array.of(r + 1));
      assert.deepEqual(
        [...values(await onRanks([0, 1, 2], (r) => m[r].exchange(() => m[r].world.allreduce(sums[r]))))].map(([, ok]) => ok),
        [true, true, true],
      );
      assert.deepEqual(
        sums.map((s) => s[0]),
        [6, 6, 6],
      );
      values(await onRanks([0, 1, 2], (r) => m[r].commit()));
      values(await onRanks([0, 1, 2], (r) => m[r].close()));
    });

    it('with a spare: a worker dies inside exchange(), the spare takes its shards and works from the retry on', async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers } = managers(world, 'spare', { spares: 1 });
      values(await onRanks(range(4), (r) => m[r].start(source())));
      assert.deepEqual(
        range(4).map((r) => [m[r].world.working, m[r].world.rank]),
        [
          [true, 0],
          [true, 1],
          [true, 2],
          [false, -1],
        ],
      );
      const step = (r: number, value: Float32Array) => async (): Promise<void> => {
        if (m[r].world.working) await m[r].world.allreduce(value);
        await m[r].world.feedSpares(value);
      };
      world.at(1, 'allreduce', 'kill');
      const first = await onRanks(range(4), (r) => m[r].exchange(step(r, Float32Array.of(r))));
      first.delete(1);
      const survivors = [0, 2, 3];
      assert.deepEqual(
        [...values(first)],
        [
          [0, false],
          [2, false],
          [3, false],
        ],
      );
      for (const r of survivors) {
        assert.deepEqual(m[r].world.shardMap.toJSON(), ShardMap.initial(8, [0, 1, 2]).handOver(survivors, [3]).toJSON());
        // (recorded by the repair, before the spare takes the place: 2, though the retry runs on 3
        // working ranks and contracts.ts says "working ranks after the recovery"; see the report)
        assert.deepEqual(m[r].failures, [{ step: 0, lost: [1], world: 2 }]);
        assert.deepEqual(observers[r].named('readback'), []);
      }
      assert.deepEqual(m[3].world.heldShards, [3, 4, 5]);
      assert.deepEqual(
        survivors.map((r) => [m[r].world.working, m[r].world.rank, m[r].world.size]),
        [
          [true, 0, 3],
          [true, 1, 3],
          [true, 2, 3],
        ],
      );
      const sums = survivors.map((r) => Float32Array.of(r + 1));
      assert.deepEqual(
        [...values(await onRanks(survivors, (r) => m[r].exchange(step(r, sums[survivors.indexOf(r)]))))].map(([, ok]) => ok),
        [true, true, true],
      );
      assert.deepEqual(
        sums.map((s) => s[0]),
        [8, 8, 8],
      );
      for (const r of survivors)
        assert.deepEqual(observers[r].named('readback'), [
          { event: 'readback', step: 0, shards: [3, 4, 5], bytes_before_retry: dataset.train.batchBytes(3, 6) },
        ]);
      values(await onRanks(survivors, (r) => m[r].commit()));
      values(await onRanks(survivors, (r) => m[r].finish(() => undefined)));
      values(await onRanks(survivors, (r) => m[r].close()));
    });

    it("a second rank dies at the recovery's sum of the bytes read back: the retried step meets it, recovers again, and reports both readbacks at once", async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers } = managers(world, 'twice');
      values(await onRanks(range(4), (r) => m[r].start(source())));
      world.at(2, 'allreduce', 'kill');
      world.at(3, 'allreduce', 'kill', 2); // its next one: the recovery's sum of the bytes read back
      // (2 of 4 lost, as in the minority test, but in two repairs: each judges the majority against
      // the world the one before agreed, {0, 1, 3}, so {0, 1} goes on)
      const first = await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r))));
      assert.ok(first.get(2)!.error instanceof RankDeadError);
      const survivors = [0, 1];
      for (const r of survivors) assert.equal(first.get(r)!.value, false);
      // the retried step's collective awaits that sum: it fails, and the step is retried again on {0, 1}
      const second = await onRanks(survivors, (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r))));
      for (const r of survivors) {
        assert.equal(second.get(r)!.value, false);
        assert.deepEqual(m[r].failures, [
          { step: 0, lost: [2], world: 3 },
          { step: 0, lost: [3], world: 2 },
        ]);
        assert.deepEqual(m[r].world.shardMap.toJSON(), [0, 0, 1, 1, 0, 1, 0, 1]);
        assert.deepEqual(
          observers[r].events.map((e) => e.event),
          ['failure', 'revoke+shrink', 'agree', 'revoke+shrink', 'agree'],
        );
      }
      assert.deepEqual(
        [...values(await onRanks(survivors, (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r)))))].map(([, ok]) => ok),
        [true, true],
      );
      for (const r of survivors)
        // one readback event for both recoveries: every shard taken over, and what both read first
        assert.deepEqual(observers[r].named('readback'), [
          { event: 'readback', step: 0, shards: [4, 5, 6, 7], bytes_before_retry: dataset.train.batchBytes(4, 8) },
        ]);
      values(await onRanks(survivors, (r) => m[r].commit()));
      assert.deepEqual(
        survivors.map((r) => [m[r].step, observers[r].named('retry').length]),
        [
          [1, 1],
          [1, 1],
        ],
      );
      values(await onRanks(survivors, (r) => m[r].finish(() => undefined)));
      assert.deepEqual(
        survivors.map((r) => m[r].bytesReadBack),
        [dataset.train.batchBytes(4, 8), dataset.train.batchBytes(4, 8)],
      );
      values(await onRanks(survivors, (r) => m[r].close()));
    });

    it('below --min-ranks after a failure: every survivor checkpoints the step and stops (min-ranks)', async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers, config } = managers(world, 'min-ranks', { minRanks: 4 });
      values(await onRanks(range(4), (r) => m[r].start(source())));
      values(await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r)))));
      values(await onRanks(range(4), (r) => m[r].commit()));
      world.at(0, 'allreduce', 'kill');
      const results = await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r))));
      results.delete(0);
      const dir = path.join(config.checkpointDir, 'step-00000001');
      for (const [r, error] of errors(results)) {
        assert.ok(error instanceof ProtocolStop, `rank ${r}: ${String(error)}`);
        assert.deepEqual([error.reason, error.exitCode, error.checkpoint], ['min-ranks', 3, dir]);
        assert.deepEqual(observers[r].named('stop'), [
          { event: 'stop', step: 1, reason: 'below-min-ranks', world: 3, min_ranks: 4, checkpoint: dir },
        ]);
        assert.equal(m[r].step, 1);
      }
      // rank 1 leads once rank 0 is lost: it commits the checkpoint
      assert.deepEqual(
        [1, 2, 3].map((r) => observers[r].named('checkpoint').length),
        [1, 0, 0],
      );
      assert.ok(fs.existsSync(path.join(dir, 'manifest.json')));
      values(await onRanks([1, 2, 3], (r) => m[r].close()));
    });

    it('a stop one rank asks for (SIGTERM): every rank commits the step, checkpoints and stops at that commit', async () => {
      const world = new ScriptedWorld(4);
      const { managers: m, observers, config } = managers(world, 'sigterm');
      values(await onRanks(range(4), (r) => m[r].start(source())));
      m[1].requestStop();
      assert.deepEqual(
        [...values(await onRanks(range(4), (r) => m[r].exchange(() => m[r].world.allreduce(Float32Array.of(r)))))].map(([, ok]) => ok),
        [true, true, true, true],
      );
      assert.deepEqual(
        range(4).map((r) => m[r].step),
        [0, 0, 0, 0],
      );
      const dir = path.join(config.checkpointDir, 'step-00000001');
      for (const [r, error] of errors(await onRanks(range(4), (r) => m[r].commit()))) {
        assert.ok(error instanceof ProtocolStop, `rank ${r}: ${String(error)}`);
        assert.deepEqual([error.reason, error.checkpoint, error.exitCode, m[r].step], ['sigterm', dir, 0, 1]);
        assert.deepEqual(observers[r].named('stop'), [{ event: 'stop', step: 1, reason: 'sigterm', checkpoint: dir }]);
      }
      // the leader commits the checkpoint (its manifest names the step)
      assert.deepEqual(
        range(4).map((r) => observers[r].named('checkpoint', ['duration_ms', 'bytes']).length),
        [1, 0, 0, 0],
      );
      assert.deepEqual(observers[0].named('checkpoint', ['duration_ms', 'bytes']), [
        { event: 'checkpoint', step: 1, reason: 'sigterm', dir, stripes: 4 },
      ]);
      assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')).step, 1);
      values(await onRanks(range(4), (r) => m[r].close()));
    });
  });
});
