// Checkpoints under mpirun: a JIT checkpoint written by the survivors of a kill, then every rank
// killed, then --resume on 3 ranks ends bit-identical to the uninterrupted run; the same after
// SIGTERM (preemption) and below --min-ranks; a corrupt or truncated checkpoint is reported in one
// line and the previous complete one is used; at the end, a spare state file still being written to
// a slow disk (a real FUSE file system, test/helpers) is cut short rather than waited for.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readRun } from '../../src/report/run-data';
import { withFaultyFs } from '../helpers/faulty-fs';
import { fewTestSamples, lenetOnFashion, repoRoot, runCommand, runTrain, type JobResult } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-resume-');
const common = [...lenetOnFashion, '--steps', '60', '--shards', '4', ...fewTestSamples];
let runs = 0;

const newDir = (): string => path.join(scratch, `run-${++runs}`);
const sha = (dir: string): string => JSON.parse(fs.readFileSync(path.join(dir, 'summary.json'), 'utf8')).params_sha256;
const events = (dir: string): { event: string; reason?: string; step?: number }[] =>
  fs
    .readFileSync(path.join(dir, 'events.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
/** The checkpoints in a run directory (a job killed whole may leave the spare, ckpt/step-next, beside them). */
const checkpoints = (dir: string): string[] =>
  fs
    .readdirSync(path.join(dir, 'ckpt'))
    .filter((name) => /^step-\d{8}$/.test(name))
    .sort();

async function train(ranks: number, dir: string, ...extra: string[]): Promise<JobResult<never>> {
  return runTrain(ranks, [...common, '--run-dir', dir, ...extra]);
}

async function resumed(ranks: number, from: string, ...extra: string[]): Promise<{ dir: string; job: JobResult<never> }> {
  const dir = newDir();
  const job = await train(ranks, dir, '--resume', from, ...extra);
  assert.equal(job.code, 0, job.stdout + job.stderr);
  return { dir, job };
}

function flipByte(file: string, position: number): void {
  const bytes = fs.readFileSync(file);
  bytes[position] ^= 0x10;
  fs.writeFileSync(file, bytes);
}

describe('checkpoints and --resume', function () {
  this.timeout(120_000);
  let baseline: string;

  before(async () => {
    baseline = newDir();
    const job = await train(4, baseline, '--checkpoint-every', '30');
    assert.equal(job.code, 0, job.stderr);
    assert.deepEqual(fs.readdirSync(path.join(baseline, 'ckpt')), ['step-00000030'], 'a run that ended left its spare behind');
  });
  after(() => removeScratch(scratch));

  it('rank 1 killed at step 20 (JIT checkpoint), every rank killed at 35, resumed on 3 ranks: the same bits', async () => {
    const dir = newDir();
    await train(4, dir, '--drill', 'rank=1,step=20', ...[0, 2, 3].flatMap((r) => ['--drill', `rank=${r},step=35`]));
    assert.ok(!fs.existsSync(path.join(dir, 'summary.json')));
    assert.deepEqual(checkpoints(dir), ['step-00000020']);
    const jit = events(dir).find((e) => e.event === 'checkpoint')!;
    assert.deepEqual([jit.reason, jit.step], ['jit', 20]);
    const run = await resumed(3, dir);
    assert.equal(sha(run.dir), sha(baseline));
    assert.match(run.job.stdout, /resumed from .*step-00000020 at step 20 on 3 ranks/);
  });

  it('--resume into the same run directory (launch/ft-run): its history kept, this run appended, the same bits; a completed one refused', async () => {
    const dir = newDir();
    await train(4, dir, '--drill', 'rank=1,step=20', ...[0, 2, 3].flatMap((r) => ['--drill', `rank=${r},step=35`]));
    const ftRun = (args: string[]) =>
      runCommand(
        path.join(repoRoot, 'launch', 'ft-run'),
        ['-n', '2', '--', ...common, '--run-dir', dir, ...args],
        process.env,
        120_000,
        'ft-run --resume',
      );
    const job = await ftRun(['--resume', dir]);
    assert.equal(job.code, 0, job.stdout + job.stderr);
    assert.equal(sha(dir), sha(baseline));
    const steps = fs
      .readFileSync(path.join(dir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).step);
    assert.deepEqual(steps, [...Array.from({ length: 35 }, (_, i) => i), ...Array.from({ length: 40 }, (_, i) => 20 + i)]);
    const marks = events(dir)
      .filter((e) => ['start', 'resume'].includes(e.event))
      .map((e) => [e.event, e.step]);
    assert.deepEqual(marks, [
      ['start', undefined],
      ['start', undefined],
      ['resume', 20],
    ]);
    // the report reads it as one run: each step once (the resumed run's records past step 20), the resume marked
    const read = readRun(dir);
    assert.deepEqual(
      read.steps.map((r) => r.step),
      Array.from({ length: 60 }, (_, i) => i),
    );
    assert.deepEqual(read.resumes, [20]);
    assert.equal(read.summary?.params_sha256, JSON.parse(fs.readFileSync(path.join(baseline, 'summary.json'), 'utf8')).params_sha256);
    const again = await ftRun(['--resume', dir]);
    assert.equal(again.code, 2);
    assert.match(
      again.stderr,
      new RegExp(`ft-train: ${dir}: --run-dir holds a run that completed \\(summary.json\\); resume into a new directory`),
    );
  });

  it('SIGTERM to one rank: a checkpoint at the next step, exit 0, and the resumed run ends the same', async () => {
    const dir = newDir();
    // rank 2 sends itself SIGTERM as it computes step 15: a preemption at a known step (from
    // outside, a 60-step run on a loaded host could end before the signal came)
    const done = await train(4, dir, '--drill', 'rank=2,step=15,phase=compute,action=term');
    assert.equal(done.code, 0, done.stdout + done.stderr);
    assert.match(done.stdout, /stopped \(SIGTERM\) at step \d+; continue with --resume/);
    assert.ok(!fs.existsSync(path.join(dir, 'summary.json')));
    const stop = events(dir).at(-1)!;
    assert.deepEqual([stop.event, stop.reason], ['stop', 'sigterm']);
    assert.equal(sha((await resumed(2, dir)).dir), sha(baseline));
  });

  it('below --min-ranks: a checkpoint, exit 3, and the resumed run ends the same', async () => {
    const dir = newDir();
    const job = await train(2, dir, '--min-ranks', '2', '--drill', 'rank=1,step=10');
    assert.equal(job.code, 3, job.stdout + job.stderr);
    assert.deepEqual(checkpoints(dir), ['step-00000010']);
    assert.equal(sha((await resumed(4, dir)).dir), sha(baseline));
  });

  it('periodic checkpoints; a flipped byte and a truncated file are reported and passed over', async () => {
    const dir = newDir();
    const job = await train(2, dir, '--checkpoint-every', '20');
    assert.equal(job.code, 0, job.stderr);
    assert.deepEqual(checkpoints(dir), ['step-00000020', 'step-00000040']);
    const newest = path.join(dir, 'ckpt', 'step-00000040', 'state.safetensors');
    flipByte(newest, fs.statSync(newest).size - 100);
    const run = await resumed(3, dir);
    assert.match(
      run.job.stdout,
      /step-00000040\/state\.safetensors: corrupt: stripe 3 \(bytes \d+\.\.\d+\) fails the manifest checksum; using .*step-00000020/,
    );
    assert.equal(sha(run.dir), sha(baseline));
    const older = path.join(dir, 'ckpt', 'step-00000020', 'state.safetensors');
    fs.truncateSync(older, 1000);
    const broken = newDir();
    const failed = await runCommand(
      process.execPath,
      [path.join(repoRoot, 'launch', 'ft-train.js'), ...common, '--run-dir', broken, '--resume', dir],
      process.env,
      30_000,
      'resume from broken checkpoints',
    );
    assert.equal(failed.code, 2);
    assert.equal(failed.stderr.trim().split('\n').length, 1, failed.stderr);
    assert.match(
      failed.stderr,
      new RegExp(`^ft-train: ${dir}: no complete checkpoint \\(.*corrupt: stripe 3.*; .*truncated: 1000 bytes, the manifest says \\d+\\)`),
    );
    assert.ok(!fs.existsSync(broken));
  });

  it("on a disk stuck under the spare file's refill the end waits for it no longer than the disk deadline: one line, the spare left, exit 0", async function () {
    await withFaultyFs(this, path.join(scratch, 'stuck-refill'), ['stall-refill'], async (disk) => {
      const dir = newDir();
      const checkpoints = path.join(disk.mountpoint, 'ck');
      // through launch/ft-run: the leader's process stays a zombie while its write is stuck in the
      // kernel, and ft-run ends an mpirun that outlives the run it ran
      const argv = [path.join(repoRoot, 'launch', 'ft-run'), '-n', '4', '--', ...common, '--run-dir', dir, '--steps', '12'];
      argv.push('--checkpoint-every', '11', '--hang-timeout', '2', '--checkpoint-dir', checkpoints);
      const job = await runCommand(process.execPath, argv, process.env, 150_000, 'ft-run with a stuck refill');
      assert.equal(job.code, 0, job.stdout + job.stderr);
      assert.ok(fs.existsSync(path.join(dir, 'summary.json')));
      // on one host mpirun gets one comm deadline (3 x --hang-timeout) + 10 s after the run ended, not the 9T + 10 s of a cut-off host
      assert.ok(
        job.stderr.includes('ft-run: the run ended 16 s ago but mpirun has not (a rank stuck in the kernel?): ending it\n'),
        job.stderr,
      );
      assert.ok(
        job.stdout.includes(`removing the spare checkpoint file did not finish within 4 s: the disk is stuck; left in ${checkpoints}`),
        job.stdout,
      );
      const left = fs.readdirSync(path.join(disk.backing, 'ck'));
      assert.deepEqual(
        left.filter((name) => !name.startsWith('step-next.partial-')),
        ['step-00000011'],
      );
      // the first fill went through and step 11's checkpoint wrote its stripes into it
      const writes = disk.writes();
      const committed = writes.map((w) => w.path).lastIndexOf('/ck/step-next/state.safetensors');
      assert.ok(committed >= 0, 'the checkpoint wrote its stripes there');
      // the refill begun once step 11's checkpoint was in place wrote nothing: its first write is stuck
      const refilled = writes.slice(committed + 1).filter((w) => /^\/ck\/step-next\.partial-\d+\//.test(w.path));
      assert.deepEqual(refilled, []);
    });
  });

  it('refuses to resume with settings that change the result, in one line', async () => {
    const failed = await runCommand(
      process.execPath,
      [
        path.join(repoRoot, 'launch', 'ft-train.js'),
        ...common,
        '--run-dir',
        newDir(),
        '--resume',
        path.join(baseline, 'ckpt'),
        '--lr',
        '0.02',
      ],
      process.env,
      30_000,
      'resume with another lr',
    );
    assert.equal(failed.code, 2);
    assert.equal(
      failed.stderr.trim(),
      `ft-train: ${path.join(baseline, 'ckpt', 'step-00000030')}: written with lr 0.01, this run has 0.02`,
    );
  });
});
