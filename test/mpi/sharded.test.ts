// Sharded optimizer state under mpirun: the same parameters as replicated state (SGD and AdamW, at
// 1 to 4 ranks, S = 4), with P/N of the state per rank; real kill -9s in every phase of a step and
// during the state's rebuild, under replicate:2, ec:2+1 and ec:2+2 at 4 and 6 ranks, after a resume
// (replicas made from the checkpoint's state), and a second kill or stop as the survivors compare the
// chunks' copies before the rebuild (the lost shards still read back exactly once), end with the
// bits of the run without failure; losing more than the redundancy covers stops with exit 3 and
// one line naming the lost chunks, writing nothing.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { EventRecord, Summary } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, runTrain } from '../helpers/mpi-job';
import { readbackBytes } from '../helpers/readback';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-sharded-');
const common = [...lenetOnFashion, '--batch', '64', '--shards', '4', ...fewTestSamples];
const lenetParams = 431080; // models/lenet.json's P
let runs = 0;

type Run = { dir: string; code: number | null; stdout: string; stderr: string };

/** A run of `steps` steps on `ranks` ranks (`train`: 12 steps). */
async function trainFor(steps: number, ranks: number, ...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(ranks, [...common, '--steps', String(steps), '--run-dir', dir, ...extra]);
  return { dir, ...job };
}

const train = (ranks: number, ...extra: string[]): Promise<Run> => trainFor(12, ranks, ...extra);

function summaryOf(run: Run): Summary {
  assert.equal(run.code, 0, `ft-train exited ${run.code}\n${run.stdout}\n${run.stderr}`);
  return JSON.parse(fs.readFileSync(path.join(run.dir, 'summary.json'), 'utf8'));
}

function events(dir: string): EventRecord[] {
  return fs
    .readFileSync(path.join(dir, 'events.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as EventRecord);
}

describe('sharded optimizer state', function () {
  this.timeout(600_000);
  const reference = new Map<string, string>();

  after(() => removeScratch(scratch));

  for (const optimizer of ['sgd', 'adamw']) {
    it(`${optimizer}: sharded state gives replicated state's parameters at 1, 2, 3 and 4 ranks, holding P/N of it per rank`, async () => {
      const replicated = summaryOf(await train(4, '--optimizer', optimizer));
      const slots = optimizer === 'sgd' ? 1 : 2;
      assert.equal(replicated.optimizer_state_bytes_per_rank, 4 * slots * lenetParams);
      reference.set(optimizer, replicated.params_sha256);
      for (const ranks of [1, 2, 3, 4]) {
        const sharded = summaryOf(await train(ranks, '--optimizer', optimizer, '--optimizer-state', 'sharded'));
        assert.equal(sharded.params_sha256, replicated.params_sha256, `${ranks} ranks`);
        // the leader (rank 0) holds chunk 0 of P + 1 (the sum's last element is the loss)
        assert.equal(
          sharded.optimizer_state_bytes_per_rank,
          4 * slots * Math.min(Math.floor((lenetParams + 1) / ranks), lenetParams),
          `${ranks} ranks`,
        );
        assert.equal(sharded.redundancy, 'replicate:2');
      }
    });
  }

  const drills: { ranks: number; redundancy: string; optimizer: string; kills: string[]; world: number; extra?: string[] }[] = [
    {
      ranks: 4,
      redundancy: 'replicate:2',
      optimizer: 'sgd',
      kills: ['rank=1,step=3,phase=compute', 'rank=2,step=6,phase=update'],
      world: 2,
    },
    {
      ranks: 4,
      redundancy: 'replicate:2',
      optimizer: 'adamw',
      kills: ['rank=3,step=5,phase=redundancy', 'rank=0,step=5,phase=rebuild'],
      world: 2,
    },
    { ranks: 4, redundancy: 'ec:2+1', optimizer: 'adamw', kills: ['rank=2,step=4,phase=update'], world: 3 },
    // groups [0, 1] and [2]: rank 2's chunk is a copy on rank 0, replayed
    { ranks: 3, redundancy: 'ec:2+1', optimizer: 'adamw', kills: ['rank=2,step=4,phase=compute'], world: 2 },
    // ec:1+1 on 2 ranks: each chunk a copy on the other rank
    { ranks: 2, redundancy: 'ec:2+1', optimizer: 'sgd', kills: ['rank=0,step=5,phase=redundancy'], world: 1 },
    {
      ranks: 4,
      redundancy: 'ec:2+2',
      optimizer: 'sgd',
      kills: ['rank=0,step=4,phase=collective', 'rank=1,step=4,phase=collective'],
      world: 2,
    },
    {
      ranks: 6,
      redundancy: 'ec:2+2',
      optimizer: 'adamw',
      kills: ['rank=0,step=2,phase=update', 'rank=1,step=2,phase=update', 'rank=4,step=7,phase=redundancy'],
      world: 3,
    },
    {
      ranks: 6,
      redundancy: 'ec:2+1',
      optimizer: 'sgd',
      kills: ['rank=5,step=3,phase=compute', 'rank=2,step=3,phase=rebuild', 'rank=3,step=8,phase=agree'],
      world: 3,
    },
    {
      ranks: 6,
      redundancy: 'replicate:3',
      optimizer: 'sgd',
      kills: ['rank=4,step=2,phase=redundancy', 'rank=5,step=2,phase=redundancy', 'rank=1,step=8,phase=checkpoint-stripe'],
      world: 3,
      extra: ['--checkpoint-every', '4'],
    },
  ];
  for (const d of drills) {
    it(`${d.ranks} ranks, --redundancy ${d.redundancy}, ${d.optimizer}, kills ${d.kills.join('; ')}: the bits of the run without failure`, async () => {
      const run = await train(
        d.ranks,
        '--optimizer',
        d.optimizer,
        '--optimizer-state',
        'sharded',
        '--redundancy',
        d.redundancy,
        ...d.kills.flatMap((k) => ['--drill', k]),
        ...(d.extra ?? []),
      );
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, reference.get(d.optimizer));
      assert.equal(summary.world_final, d.world);
      const rebuilds = events(run.dir).filter((e) => e.event === 'redundancy-rebuild');
      assert.ok(rebuilds.length >= new Set(d.kills.map((k) => k.match(/step=(\d+)/)![1])).size, JSON.stringify(rebuilds));
    });
  }

  it("replicas made from a checkpoint's state: resumed on 3 ranks (replicate:2 on a ring), a kill -9 three steps on ends with the bits of the run without failure", async () => {
    const stopped = await train(
      4,
      '--optimizer',
      'adamw',
      '--optimizer-state',
      'sharded',
      '--checkpoint-every',
      '6',
      ...[0, 1, 2, 3].flatMap((r) => ['--drill', `rank=${r},step=8`]),
    );
    assert.ok(fs.existsSync(path.join(stopped.dir, 'ckpt', 'step-00000006')), stopped.stderr);
    const resumed = summaryOf(
      await train(
        3,
        '--optimizer',
        'adamw',
        '--optimizer-state',
        'sharded',
        '--resume',
        stopped.dir,
        '--drill',
        'rank=1,step=9,phase=compute',
      ),
    );
    assert.equal(resumed.params_sha256, reference.get('adamw'));
    assert.equal(resumed.world_final, 2);
  });

  // 30 steps, so that the lost shards' background pass ends before training does (the end of a run
  // stops it: at 12, a loaded machine's survivors could finish first), and --rebalance off, so that
  // no shard moved to a faster rank is read from disk beside the lost ones
  const longRun = ['--optimizer', 'adamw', '--rebalance', 'off'];
  let longReference: string | undefined;
  for (const action of ['kill', 'stop']) {
    it(`a second fault (${action}) as the survivors compare the chunks' copies: the repair starts again, and the shards handed over in the attempt cut short are read back too, each batch once, the same bits`, async () => {
      longReference ??= summaryOf(await trainFor(30, 4, ...longRun)).params_sha256;
      const lost = [2, 3];
      const drills = ['rank=2,step=6', `rank=3,step=6,phase=copies,action=${action}`].flatMap((drill) => ['--drill', drill]);
      const flags = [...longRun, '--optimizer-state', 'sharded', '--redundancy', 'replicate:3', '--hang-timeout', '3'];
      const run = await trainFor(30, 4, ...flags, ...drills);
      const summary = summaryOf(run);
      assert.equal(summary.params_sha256, longReference);
      // two repairs at step 6: the second one after the fault that cut the first recovery short
      assert.deepEqual(
        summary.failures.map((f) => [f.step, f.lost]),
        [
          [6, [2]],
          [6, [3]],
        ],
      );
      const expected = await readbackBytes(4, lost, 6);
      const readback = events(run.dir).filter((e) => e.event === 'readback');
      assert.deepEqual(
        readback.map((e) => [e.step, e.shards, e.bytes_before_retry]),
        [[6, lost, expected.beforeRetry]],
      );
      assert.equal(summary.bytes_read_back, expected.total);
    });
  }

  it('losing both copies of a chunk (replicate:2, group placement) stops with exit 3 and one line, writing no checkpoint or summary', async () => {
    const run = await train(4, '--optimizer-state', 'sharded', '--drill', 'rank=2,step=5', '--drill', 'rank=3,step=5');
    assert.equal(run.code, 3, `${run.stdout}\n${run.stderr}`);
    assert.ok(
      run.stdout.includes(
        '[ft-train] the optimizer state of rank(s) 2, 3 (chunk(s) 2, 3 of 4) is lost: no copy of it survives in memory under ' +
          '--redundancy replicate:2 (group placement); stopping: no complete checkpoint to go back to\n',
      ),
      run.stdout,
    );
    assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')));
    assert.ok(
      !fs.existsSync(path.join(run.dir, 'ckpt')) || fs.readdirSync(path.join(run.dir, 'ckpt')).every((name) => name === '.made-by-run'),
    );
    // the stop is recorded: launch/ft-run knows by it that the run ended
    assert.deepEqual(
      events(run.dir)
        .filter((e) => e.event === 'stop')
        .map((e) => [e.step, e.reason]),
      [[5, 'state-lost']],
    );
  });
});
