// Faults anywhere, at 4 ranks under the launcher's settings (ULFM's detector on, --hang-timeout 3):
// a rank SIGSTOPped in any phase of a step, an evaluation, a recovery or a checkpoint, rank 0
// included, is declared dead and killed by the survivors (one whose main thread is stuck kills
// itself), and the run ends with the parameters of the run without failure and with mpirun gone; a kill -9 in each step of a JIT, periodic or
// SIGTERM-triggered checkpoint, in the final write, at resume and at start-up ends in the same
// bits, a resumable checkpoint, or one line and a non-zero exit. Every fault is a drill at a fixed
// (rank, step, phase): nothing depends on timing.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { EventRecord, Summary } from '../../src/run/records';
import { trainCommand } from '../../src/cli/mpirun';
import { readPid } from '../../src/run/pids';
import { fewTestSamples, lenetOnFashion, runCommand, runTrain, type JobResult } from '../helpers/mpi-job';
import { logMessages } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-faults-');
const common = [...lenetOnFashion, '--steps', '20', '--hang-timeout', '3', ...fewTestSamples];
let runs = 0;

interface Run {
  dir: string;
  job: JobResult<never>;
}

async function train(...extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(4, [...common, '--run-dir', dir, ...extra], 60_000);
  return { dir, job };
}

const summaryOf = (run: Run): Summary => {
  const file = path.join(run.dir, 'summary.json');
  assert.ok(fs.existsSync(file), `no summary.json in ${run.dir} (exit ${run.job.code})\n${run.job.stdout}\n${run.job.stderr}`);
  return JSON.parse(fs.readFileSync(file, 'utf8')) as Summary;
};

const eventsOf = (run: Run): EventRecord[] =>
  fs
    .readFileSync(path.join(run.dir, 'events.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as EventRecord);

/** The run's stop events, as [step, reason]. */
const stopsOf = (run: Run): [number | undefined, unknown][] =>
  eventsOf(run)
    .filter((e) => e.event === 'stop')
    .map((e) => [e.step, e.reason]);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const pidOf = (run: Run, rank: number): number => readPid(path.join(run.dir, 'pids'), rank)!;

/** The lines ft-train printed on stderr (Open MPI adds its own). */
const ftLines = (job: JobResult<never>): string[] => job.stderr.split('\n').filter((line) => line.startsWith('ft-train:'));

describe('faults anywhere: hangs, checkpoints, the end and the start', function () {
  this.timeout(90_000);
  let baseline: Summary;

  before(async () => {
    const run = await train();
    assert.equal(run.job.code, 0, run.job.stderr);
    baseline = summaryOf(run);
  });
  after(() => removeScratch(scratch));

  /** Finished with the baseline's bits, having lost `lost`; mpirun ended and left nothing behind. */
  function assertRecovered(run: Run, lost: number[]): Summary {
    assert.equal(run.job.code, 0, `exit ${run.job.code}\n${run.job.stdout}\n${run.job.stderr}`);
    assert.equal(run.job.stragglers, 0, 'processes of the job outlived mpirun');
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, baseline.params_sha256, `${run.dir}: parameters differ from the run without failure`);
    assert.deepEqual(
      summary.failures.flatMap((f) => f.lost).sort(),
      [...lost].sort(),
      `${run.dir}: ${JSON.stringify(summary.failures)}\n${run.job.stdout}${run.job.stderr}`,
    );
    assert.equal(summary.world_final, 4 - lost.length);
    return summary;
  }

  const stops: [string, number, string, ...string[]][] = [
    ['compute', 0, 'rank=0,step=10,phase=compute,action=stop'],
    ['collective', 2, 'rank=2,step=10,phase=collective,action=stop'],
    ['agree', 1, 'rank=1,step=10,phase=agree,action=stop'],
    ['update', 3, 'rank=3,step=10,phase=update,action=stop'],
    ['evaluation', 2, 'rank=2,step=10,phase=evaluation,action=stop', '--eval-every', '10'],
    ['checkpoint stripe', 1, 'rank=1,step=10,phase=checkpoint-stripe,action=stop', '--checkpoint-every', '10'],
    ['checkpoint gather', 2, 'rank=2,step=10,phase=checkpoint-gather,action=stop', '--checkpoint-every', '10'],
    ['checkpoint commit (the leader)', 0, 'rank=0,step=10,phase=checkpoint-commit,action=stop', '--checkpoint-every', '10'],
    ['final write (the leader)', 0, 'rank=0,step=20,phase=final-write,action=stop'],
  ];
  for (const [phase, rank, drill, ...extra] of stops) {
    it(`SIGSTOP of rank ${rank} in the ${phase} phase: declared dead, killed, same bits`, async () => {
      const run = await train('--drill', drill, ...extra);
      assertRecovered(run, [rank]);
      assert.ok(!alive(pidOf(run, rank)), `the stopped rank ${rank} (pid ${pidOf(run, rank)}) is still there`);
    });
  }

  it("a main thread that never returns (a stuck kernel): its comm thread keeps the heartbeats going, the rank's watchdog kills it, same bits", async () => {
    // ULFM's detector at half the watchdog's timeout: had the stuck rank stopped sending heartbeats,
    // the survivors would declare it dead (and kill it) before its watchdog speaks.
    const dir = path.join(scratch, `run-${++runs}`);
    const job = trainCommand(4, [
      ...common,
      '--hang-timeout',
      '4',
      '--run-dir',
      dir,
      '--drill',
      'rank=2,step=10,phase=compute,action=hang',
    ]);
    job.args[job.args.indexOf('mpi_ft_detector_period') + 1] = '0.5';
    job.args[job.args.indexOf('mpi_ft_detector_timeout') + 1] = '2';
    const run = { dir, job: await runCommand(job.command, job.args, job.env, 60_000, 'ft-train with a fast detector') };
    assertRecovered(run, [2]);
    assert.deepEqual(
      ftLines(run.job),
      [
        'ft-train: rank 2: no progress for 4 s (stuck in a computation or a blocking call; a step that computes longer needs a larger --hang-timeout); this rank declares itself failed',
      ],
      run.job.stderr,
    );
  });

  it('SIGSTOP during a recovery and during its readback', async () => {
    for (const phase of ['recovery', 'readback']) {
      const run = await train('--drill', 'rank=1,step=10', '--drill', `rank=3,step=10,phase=${phase},action=stop`);
      assertRecovered(run, [1, 3]);
      assert.ok(!alive(pidOf(run, 3)));
    }
  });

  it("a kill during a recovery's readback: the survivors meet it at the retried step's collective (without a JIT checkpoint between), recover again, and report both readbacks at once", async () => {
    const run = await train('--jit-checkpoint', 'off', '--drill', 'rank=1,step=10', '--drill', 'rank=3,step=10,phase=readback');
    assertRecovered(run, [1, 3]);
    assert.deepEqual(
      eventsOf(run)
        .filter((e) => e.event === 'readback')
        .map((e) => [e.step, e.shards]),
      [[10, [1, 3]]],
    );
  });

  it("a kill or a SIGSTOP between the repair's shrink and its agreement: repaired again, the same bits; with --max-retries 1 the repair cannot finish: one line, exit 1, nothing left running", async () => {
    for (const action of ['kill', 'stop']) {
      const drills = ['--drill', 'rank=1,step=10', '--drill', `rank=2,step=10,phase=repair,action=${action}`];
      const repaired = await train(...drills);
      assertRecovered(repaired, [1, 2]);
      assert.deepEqual(
        eventsOf(repaired)
          .filter((e) => e.event === 'revoke+shrink')
          .map((e) => [e.step, e.lost, e.attempts]),
        [[10, [1, 2], 2]],
        action,
      );
      assert.ok(!alive(pidOf(repaired, 2)), `${action}: rank 2 outlived the job`);
      const stopped = await train('--max-retries', '1', ...drills);
      assert.equal(stopped.job.code, 1, `${action}: ${stopped.job.stderr}`);
      assert.equal(stopped.job.stragglers, 0, `${action}: processes of the job outlived mpirun`);
      // each survivor (0 and 3) meets the same end; the first to claim the line prints it
      const lines = ftLines(stopped.job);
      assert.equal(lines.length, 1, `${action}: ${stopped.job.stderr}`);
      assert.match(lines[0], /^ft-train: rank [03]: the communicator could not be repaired in 1 attempt at step 10$/);
      assert.ok(!fs.existsSync(path.join(stopped.dir, 'summary.json')), `${action}: a summary was written`);
      // recorded once, by the rank that printed the line
      assert.deepEqual(stopsOf(stopped), [[10, 'unrecoverable']], action);
    }
  });

  it('a kill in each step of a JIT checkpoint and of a periodic one', async () => {
    for (const phase of ['checkpoint-stripe', 'checkpoint-gather', 'checkpoint-commit']) {
      const jit = await train('--drill', 'rank=1,step=5', '--drill', `rank=0,step=5,phase=${phase}`);
      assertRecovered(jit, [0, 1]);
      const periodic = await train('--checkpoint-every', '10', '--drill', `rank=2,step=10,phase=${phase}`);
      assertRecovered(periodic, [2]);
      assert.ok(
        fs.existsSync(path.join(periodic.dir, 'ckpt', 'step-00000010', 'manifest.json')),
        `${phase}: the checkpoint was written after all`,
      );
    }
  });

  it('a kill in the SIGTERM checkpoint leaves a resumable one; a kill at resume; the resumed run ends with the same bits', async () => {
    // rank 1's SIGTERM at step 5 rides on step 6's vote: everyone stops after it, at step 7
    const stopped = await train('--drill', 'rank=1,step=5,action=term', '--drill', 'rank=2,step=7,phase=checkpoint-gather');
    assert.equal(stopped.job.code, 0, stopped.job.stderr);
    assert.ok(!fs.existsSync(path.join(stopped.dir, 'summary.json')), 'a stopped run is not passed off as complete');
    assert.deepEqual(stopsOf(stopped), [[7, 'sigterm']]);
    const resumed = await train('--resume', stopped.dir, '--drill', 'rank=3,step=7,phase=resume');
    assertRecovered(resumed, [3]);
  });

  it('a kill of the leader while it writes the final results: a survivor writes them', async () => {
    const run = await train('--drill', 'rank=0,step=20,phase=final-write');
    const summary = assertRecovered(run, [0]);
    assert.equal(summary.failures[0].step, 20);
    assert.deepEqual(
      fs.readdirSync(run.dir).filter((name) => name.includes('.partial-')),
      [],
      'no stray partial file',
    );
  });

  it('SIGTERM during start-up still means stop cleanly, with a checkpoint', async () => {
    const run = await train('--drill', 'rank=2,step=0,phase=startup,action=term');
    assert.equal(run.job.code, 0, run.job.stderr);
    assert.deepEqual(
      stopsOf(run).map(([, reason]) => reason),
      ['sigterm'],
    );
  });

  it('without the detector, a SIGSTOP meets the comm deadline: CommTimeoutError, the survivors find the rank stopped, kill it and recover, the same bits', async () => {
    const dir = path.join(scratch, `run-${++runs}`);
    const job = trainCommand(4, [...common, '--hang-timeout', '2', '--run-dir', dir, '--drill', 'rank=2,step=10,action=stop']);
    job.args[job.args.indexOf('mpi_ft_detector') + 1] = 'false';
    const run = { dir, job: await runCommand(job.command, job.args, job.env, 60_000, 'ft-train without the detector') };
    assertRecovered(run, [2]);
    assert.ok(!alive(pidOf(run, 2)), 'the stopped rank is still there');
    // said by the survivor that found it first (another finds it gone), in its log
    assert.ok(
      logMessages(run.dir).includes('step 10: killed rank(s) 2, found stopped when a wait on them ran past its deadline'),
      logMessages(run.dir).join('\n'),
    );
    assert.ok(
      eventsOf(run).some((e) => e.event === 'failure' && e.error === 'CommTimeoutError'),
      'the collective ran into its deadline',
    );
  });

  for (const action of ['kill', 'stop']) {
    it(`a ${action} during the agreement on the kernels' level ends every rank with one line, nothing left`, async () => {
      const run = await train('--drill', `rank=2,step=0,phase=kernels,action=${action}`);
      assert.notEqual(run.job.code, 0);
      assert.equal(run.job.stragglers, 0);
      const lines = ftLines(run.job);
      assert.equal(lines.length, 1, run.job.stderr);
      assert.match(lines[0], /^ft-train: rank 0: .+ \(a rank died or hung while starting\)$/);
      assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')), 'a summary was written');
    });
  }

  it('a kill or a SIGSTOP during start-up ends every rank within the start-up bound, with one line', async () => {
    for (const action of ['kill', 'stop']) {
      const run = await train('--drill', `rank=2,step=0,phase=startup,action=${action}`);
      assert.notEqual(run.job.code, 0, action);
      assert.equal(run.job.stragglers, 0, action);
      assert.deepEqual(
        ftLines(run.job),
        [
          'ft-train: rank 0: MPI start-up did not return within 10000 ms: a peer is alive but does not take part (a rank died or hung while starting)',
        ],
        action,
      );
      // recorded once (launch/ft-run's sign that the run ended), by the rank that printed the line
      assert.deepEqual(stopsOf(run), [[0, 'startup']], action);
    }
  });
});
