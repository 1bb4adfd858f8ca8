// ft-train end to end under mpirun, with real kill -9s: in exact mode every run that loses ranks
// (any rank, several at once, in any phase of the step, during recovery itself, killed from
// outside) ends with parameters bit-identical to the run without failure, and so do runs at other
// world sizes with the same shards. Readback reads the retried step's record batches of the lost
// shards first and the rest in the background, each batch once (the bytes asserted exactly); shrink
// mode carries on with a smaller world and batch (bad input: inputs.test.ts).
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { decodeSafetensors } from '../../src/checkpoint/safetensors';
import { Dataset } from '../../src/data/dataset';
import { MicroBatches } from '../../src/data/micro-batches';
import { trainCommand } from '../../src/cli/mpirun';
import type { EventRecord, StepRecord, Summary } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, runCommand, runLaunchDrill, runTrain } from '../helpers/mpi-job';
import { readbackBytes } from '../helpers/readback';
import type { Run as JobRun } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-train-');
// --rebalance off: these runs count what each recovery reads back, and after a loss (S > N) ranks
// sharing 2 cores can be measured slow and given shards to read (slow-ranks.test.ts tests that)
const common = [...lenetOnFashion, '--steps', '60', '--batch', '64', '--rebalance', 'off', ...fewTestSamples];
let runs = 0;

interface Run extends JobRun {
  summary: Summary;
  metrics: StepRecord[];
  events: EventRecord[];
}

function readLines<T>(file: string): T[] {
  return fs.existsSync(file)
    ? fs
        .readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as T)
    : [];
}

function load(dir: string, job: { code: number | null; stdout: string; stderr: string }): Run {
  const summaryFile = path.join(dir, 'summary.json');
  assert.ok(fs.existsSync(summaryFile), `no summary.json in ${dir} (exit ${job.code})\n${job.stdout}\n${job.stderr}`);
  return {
    dir,
    ...job,
    summary: JSON.parse(fs.readFileSync(summaryFile, 'utf8')),
    metrics: readLines(path.join(dir, 'metrics.jsonl')),
    events: readLines(path.join(dir, 'events.jsonl')),
  };
}

async function train(ranks: number, ...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(ranks, [...common, '--run-dir', dir, ...extra]);
  assert.equal(job.code, 0, `ft-train exited ${job.code}\n${job.stdout}\n${job.stderr}`);
  return load(dir, job);
}

/** The run read back exactly `expected`: the retried step's batches first (the readback event), every batch once in all (the summary). */
function assertReadBack(run: Run, expected: { total: number; beforeRetry: number }): void {
  const readback = run.events.filter((e) => e.event === 'readback');
  assert.equal(readback.length, 1, JSON.stringify(readback));
  assert.equal(readback[0].bytes_before_retry, expected.beforeRetry, 'bytes read before the retried step');
  assert.ok(
    expected.beforeRetry < expected.total / 2,
    `the retried step's batches, ${expected.beforeRetry} bytes, are not the whole lost shards, ${expected.total}`,
  );
  assert.equal(run.summary.bytes_read_back, expected.total, "bytes read back in all: the lost shards' record batches, each once");
}

function assertSurvived(run: Run, baseline: Run, lost: number[], worldFinal: number): void {
  assert.equal(run.summary.params_sha256, baseline.summary.params_sha256, `${run.dir}: parameters differ from the run without failure`);
  assert.equal(run.summary.final_loss, baseline.summary.final_loss);
  assert.deepEqual(run.summary.failures.flatMap((f) => f.lost).sort(), [...lost].sort());
  assert.equal(run.summary.world_final, worldFinal);
  assert.deepEqual(
    run.metrics.map((m) => m.step),
    Array.from({ length: 60 }, (_, i) => i),
    'one metrics line per committed step',
  );
  assert.deepEqual(
    run.metrics.map((m) => m.loss),
    baseline.metrics.map((m) => m.loss),
    'the same loss at every step',
  );
}

describe('ft-train', function () {
  this.timeout(120_000);
  let baseline: Run;

  before(async () => {
    baseline = await train(4);
  });
  after(() => removeScratch(scratch));

  it('writes the run directory contract, and model.safetensors holds the hashed parameters', () => {
    const { summary } = baseline;
    assert.equal(summary.status, 'complete');
    assert.equal(summary.steps, 60);
    assert.deepEqual([summary.world_initial, summary.world_final, summary.ranks_lost, summary.bytes_read_back], [4, 4, 0, 0]);
    assert.ok(summary.final_loss > 0 && summary.final_loss < 1.2, `final loss ${summary.final_loss}`);
    assert.ok((summary.test_accuracy ?? 0) > 0.6, `test accuracy ${summary.test_accuracy}`);
    // --eval-samples 500: the test split's first 500 samples scored, and said so
    assert.equal(summary.test_samples, 500);
    assert.equal((summary.test_accuracy! * 500) % 1, 0, `test accuracy ${summary.test_accuracy} is not a count out of 500`);
    assert.match(
      baseline.stdout,
      /\[ft-train\] done: 60 steps, final loss \d\.\d{4}, test accuracy \d+\.\d\d% \(the first 500 test samples\), 4 of 4 ranks left, /,
    );
    assert.ok(baseline.metrics.every((m) => m.world === 4 && m.samples === 64 && m.lr === 0.01));
    const model = decodeSafetensors(fs.readFileSync(path.join(baseline.dir, 'model.safetensors')), 'model.safetensors');
    const hash = createHash('sha256');
    for (const t of model.tensors) hash.update(Buffer.from(t.data.buffer));
    assert.equal(hash.digest('hex'), summary.params_sha256);
    assert.deepEqual(
      model.tensors.map((t) => t.name),
      ['conv1.weight', 'conv1.bias', 'conv2.weight', 'conv2.bias', 'ip1.weight', 'ip1.bias', 'ip2.weight', 'ip2.bias'],
    );
    // a pid file per rank, and the mark of the launch that made the directory (its PMIx namespace)
    const pids = fs.readdirSync(path.join(baseline.dir, 'pids')).sort();
    assert.deepEqual(pids.slice(0, 4), ['0', '1', '2', '3']);
    assert.equal(pids.length, 5, pids.join(' '));
    assert.match(pids[4], /^launch-\S+@\d+$/);
  });

  it('exact: rank 2 killed at step 30 of 60 ends bit-identical, reading back only its shard; a drill past the run is said not to have fired', async () => {
    const run = await train(4, '--drill', 'rank=2,step=30', '--drill', 'rank=1,step=60,phase=update,action=stop');
    assertSurvived(run, baseline, [2], 3);
    assert.deepEqual(
      run.stdout.split('\n').filter((line) => line.includes('did not fire')),
      ['[ft-train] warning: --drill rank=1,step=60,phase=update,action=stop did not fire: rank 1 never reached phase update of step 60'],
    );
    assert.deepEqual(
      run.metrics.slice(29, 31).map((m) => m.world),
      [4, 3],
    );
    const phases = run.events.filter((e) => e.step === 30).map((e) => e.event);
    assert.deepEqual(phases, ['failure', 'revoke+shrink', 'agree', 'checkpoint', 'readback', 'retry']);
    assert.ok(run.events.filter((e) => e.event !== 'start' && e.event !== 'failure').every((e) => typeof e.duration_ms === 'number'));
    assert.deepEqual(run.events.find((e) => e.event === 'readback')!.shards, [2]);
    assertReadBack(run, await readbackBytes(4, [2], 30));
  });

  it('exact: the same job at 1 and 2 ranks with 4 shards gives the same bits', async () => {
    for (const ranks of [1, 2]) {
      const run = await train(ranks, '--shards', '4');
      assert.equal(run.summary.params_sha256, baseline.summary.params_sha256, `${ranks} rank(s)`);
    }
  });

  it('exact: ranks of which one has a core for its comm thread and one has not cut the sum alike: no hang, the same bits', async function () {
    const cores = os.availableParallelism();
    if (cores < 2) this.skip();
    const dir = path.join(scratch, `run-${++runs}`);
    const { command, args, env } = trainCommand(2, [...common, '--shards', '4', '--run-dir', dir]);
    // rank 0 on one core (no overlap), rank 1 on all of them (overlap: DDP's buckets on its own)
    const cpus = `[ "$OMPI_COMM_WORLD_RANK" = 0 ] && echo 0 || echo 0-${cores - 1}`;
    const program = args.indexOf(process.execPath);
    args.splice(program, 0, 'bash', '-c', `exec taskset -c "$(${cpus})" "$@"`, 'cores-by-rank');
    const job = await runCommand(command, args, env, 60_000, 'ft-train on 2 ranks of 1 and all cores');
    assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
    assert.equal(load(dir, job).summary.params_sha256, baseline.summary.params_sha256);
  });

  it('exact: a kill of rank 0 (the leader) and of two ranks at the same step', async () => {
    assertSurvived(await train(4, '--drill', 'rank=0,step=30'), baseline, [0], 3);
    assertSurvived(await train(4, '--drill', 'rank=1,step=30', '--drill', 'rank=3,step=30'), baseline, [1, 3], 2);
  });

  for (const phase of ['compute', 'collective', 'agree', 'update']) {
    it(`exact: a kill in the ${phase} phase`, async () => {
      assertSurvived(await train(4, '--drill', `rank=2,step=30,phase=${phase}`), baseline, [2], 3);
    });
  }

  it('exact: a kill just before an evaluation: every rank votes on it, repairs, and evaluates again', async () => {
    const plain = await train(4, '--eval-every', '10');
    const run = await train(4, '--eval-every', '10', '--drill', 'rank=2,step=9,phase=update');
    assertSurvived(run, plain, [2], 3);
    const failure = run.events.find((e) => e.event === 'failure')!;
    assert.deepEqual([failure.step, failure.phase], [10, 'evaluation']);
    const accuracies = (r: Run) => r.metrics.map((m) => m.test_accuracy).filter((a) => a !== undefined);
    assert.equal(accuracies(run).length, 5);
    assert.deepEqual(accuracies(run), accuracies(plain));
  });

  it('exact: a kill during the recovery from another', async () => {
    const run = await train(4, '--drill', 'rank=1,step=20', '--drill', 'rank=3,step=20,phase=recovery');
    assertSurvived(run, baseline, [1, 3], 2);
  });

  it('exact: an external kill -9 from launch/drill', async () => {
    const dir = path.join(scratch, 'external');
    const job = await runLaunchDrill(['-n', '4', '--kill', '2@30', '--', ...common, '--run-dir', dir]);
    assert.equal(job.code, 0, job.stdout + job.stderr);
    assert.match(
      job.stdout,
      new RegExp(`\\[drill\\] run directory: ${dir}\\n\\[drill\\] PASS: killed rank 2@30; 3 of 4 ranks finished 60 steps`),
    );
    const run = load(dir, job);
    assert.ok(run.summary.failures[0].step >= 30, `failure at step ${run.summary.failures[0].step}`);
    assertSurvived(run, baseline, [2], 3);
  });

  it('exact: an external SIGSTOP from launch/drill: declared dead after --hang-timeout, killed by the survivors, the same bits', async () => {
    const dir = path.join(scratch, 'external-stop');
    const job = await runLaunchDrill(['-n', '4', '--stop', '2@30', '--', ...common, '--run-dir', dir, '--hang-timeout', '2']);
    assert.equal(job.code, 0, job.stdout + job.stderr);
    assert.match(
      job.stdout,
      new RegExp(`\\[drill\\] run directory: ${dir}\\n\\[drill\\] PASS: killed rank 2@30 \\(stopped\\); 3 of 4 ranks finished 60 steps`),
    );
    assert.equal(job.stragglers, 0);
    const run = load(dir, job);
    const stop = JSON.parse(fs.readFileSync(path.join(dir, 'drill.json'), 'utf8')).kills[0];
    assert.equal(stop.signal, 'SIGSTOP');
    assert.throws(() => process.kill(stop.pid, 0), { code: 'ESRCH' }, 'the stopped process is gone');
    assertSurvived(run, baseline, [2], 3);
  });

  it('launch/drill stopping every rank: none is left to declare the others dead, so the drill kills them past the start-up and comm deadlines: its line, FAIL, nothing left', async () => {
    const dir = path.join(scratch, 'external-stop-all');
    const job = await runLaunchDrill([
      '-n',
      '2',
      '--stop',
      '0@5',
      '--stop',
      '1@5',
      '--',
      ...common,
      '--run-dir',
      dir,
      '--hang-timeout',
      '2',
    ]);
    assert.notEqual(job.code, 0, job.stdout + job.stderr);
    // one line, or one per look where the two stops fell on either side of one
    const killed = [
      ...job.stdout.matchAll(
        /^\[drill\] rank\(s\) ([\d, ]+) stopped \(SIGSTOP\? a debugger\?\) and not scheduled once for 16 s, past the job's own deadlines: killed them as hung$/gm,
      ),
    ];
    assert.deepEqual(
      killed.flatMap((line) => line[1].split(', ').map(Number)),
      [0, 1],
      job.stdout,
    );
    assert.match(job.stdout, /^\[drill\] FAIL: .*no summary\.json$/m);
    assert.equal(job.stragglers, 0);
  });

  it('exact: a record batch found corrupt by the background readback stops the job in one line', async () => {
    const data = path.join(scratch, 'fashion-mnist-copy');
    fs.cpSync('datasets/fashion-mnist', data, { recursive: true, dereference: true });
    const file = path.join(data, 'train.arrow');
    // the first of lost shard 3's batches that the retried step (50) does not need: read by the background pass
    const dataset = await Dataset.open(data);
    const layout = dataset.train.layout(4);
    const needed = new Set(Array.from(new MicroBatches(layout, 64, 1).rows(3, 0, 50), (row) => layout.batchOf(3, row)));
    let batch = layout.batches(3).first;
    while (needed.has(batch)) ++batch;
    await dataset.close();
    // 600 record batches of one size between the 8-byte magic and the tail
    const tailOffset = JSON.parse(fs.readFileSync(path.join(data, 'manifest.json'), 'utf8')).splits.train.tail.offset;
    const offset = 8 + batch * ((tailOffset - 8) / 600) + 300;
    const dir = path.join(scratch, 'corrupt-readback');
    const job = runTrain(4, [
      ...common.map((arg) => (arg === 'datasets/fashion-mnist' ? data : arg)),
      '--run-dir',
      dir,
      '--drill',
      'rank=3,step=50',
    ]);
    // every rank has read its own shards once a step is committed; the readback comes 50 steps later
    const metrics = path.join(dir, 'metrics.jsonl');
    while (!(fs.existsSync(metrics) && fs.readFileSync(metrics, 'utf8').includes('\n')))
      await new Promise((resolve) => setTimeout(resolve, 5));
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.of(0xff), 0, 1, offset);
    fs.closeSync(fd);
    const { code, stderr } = await job;
    assert.equal(code, 1, stderr);
    assert.equal(
      stderr
        .trim()
        .split('\n')
        .filter((line) => line.startsWith('ft-train:'))
        .join('\n'),
      `ft-train: rank 0: ${file}: corrupt: record batch ${batch} fails the manifest checksum`,
    );
    assert.ok(!fs.existsSync(path.join(dir, 'summary.json')));
    const events = readLines<EventRecord>(path.join(dir, 'events.jsonl'));
    assert.deepEqual(
      events.filter((e) => e.event === 'readback').map((e) => e.step),
      [50],
    );
    assert.deepEqual([events.at(-1)!.event, events.at(-1)!.reason, events.at(-1)!.ranks], ['stop', 'error', [0]]);
  });

  describe('ranks holding several shards (S = 8)', () => {
    let reference: Run;
    before(async () => {
      reference = await train(2, '--shards', '8');
    });

    it("exact: rank 3 and its 2 shards lost at once: the retried step's batches first, the rest in the background, the same bits", async () => {
      const run = await train(4, '--shards', '8', '--drill', 'rank=3,step=10');
      assertSurvived(run, reference, [3], 3);
      assert.deepEqual(run.events.find((e) => e.event === 'readback')!.shards, [6, 7]);
      assertReadBack(run, await readbackBytes(8, [6, 7], 10));
    });

    it("exact: ranks 2 and 3 lost at once: each survivor reads back 2 shards, their retried step's batches first, the same bits", async () => {
      const run = await train(4, '--shards', '8', '--drill', 'rank=2,step=10', '--drill', 'rank=3,step=10');
      assertSurvived(run, reference, [2, 3], 2);
      assert.deepEqual(run.events.find((e) => e.event === 'readback')!.shards, [4, 5, 6, 7]);
      assertReadBack(run, await readbackBytes(8, [4, 5, 6, 7], 10));
    });
  });

  it('shrink: survivors keep their per-rank batch; world, global batch and rate shrink', async () => {
    const plain = await train(4, '--on-failure', 'shrink');
    for (const victim of [2, 0]) {
      const run = await train(4, '--on-failure', 'shrink', '--drill', `rank=${victim},step=30`);
      assert.equal(run.summary.steps, 60);
      assert.equal(run.summary.world_final, 3);
      assert.deepEqual(
        run.metrics.slice(0, 30),
        plain.metrics.slice(0, 30).map((m, i) => ({ ...m, step_ms: run.metrics[i].step_ms, time: run.metrics[i].time })),
      );
      assert.ok(
        run.metrics.slice(30).every((m) => m.world === 3 && m.samples === 48 && m.lr === 0.0075),
        JSON.stringify(run.metrics[30]),
      );
      assert.notEqual(run.summary.params_sha256, plain.summary.params_sha256);
      // shard 2 goes to rank 0, which takes its own shard 0 first: nothing of it is read before the retry, all of it
      // in the background; shard 0 goes to rank 1, which takes it first: its next 16 rows (as in exact mode) before the retry
      const expected = await readbackBytes(4, [victim], 30);
      assert.deepEqual(
        run.events.filter((e) => e.event === 'readback').map((e) => [e.shards, e.bytes_before_retry]),
        [[[victim], victim === 0 ? expected.beforeRetry : 0]],
      );
      assert.equal(run.summary.bytes_read_back, expected.total);
    }
  });

  it('shrink: survives kills in every phase, two at once, and during recovery', async () => {
    const drills: [string[], number][] = [
      [['rank=1,step=30,phase=collective'], 3],
      [['rank=1,step=30,phase=agree'], 3],
      [['rank=1,step=30,phase=update'], 3],
      [['rank=1,step=20', 'rank=3,step=20'], 2],
      [['rank=1,step=20', 'rank=2,step=20,phase=recovery'], 2],
    ];
    for (const [drill, world] of drills) {
      const run = await train(4, '--on-failure', 'shrink', ...drill.flatMap((d) => ['--drill', d]));
      assert.equal(run.summary.steps, 60, drill.join(' '));
      assert.equal(run.summary.world_final, world, drill.join(' '));
      assert.equal(run.summary.ranks_lost, 4 - world, drill.join(' '));
      assert.ok(run.metrics.at(-1)!.samples === 16 * world, `${drill.join(' ')}: last step took ${run.metrics.at(-1)!.samples} samples`);
    }
  });

  it('stops with exit code 3 below --min-ranks, without passing the run off as complete', async () => {
    const dir = path.join(scratch, 'min-ranks');
    const job = await runTrain(2, [...common, '--run-dir', dir, '--min-ranks', '2', '--drill', 'rank=1,step=10']);
    assert.equal(job.code, 3, job.stdout + job.stderr);
    assert.match(job.stdout, /1 rank\(s\) left, below --min-ranks 2: stopping/);
    assert.ok(!fs.existsSync(path.join(dir, 'summary.json')));
    assert.equal(readLines<{ event: string }>(path.join(dir, 'events.jsonl')).at(-1)!.event, 'stop');
  });
});
