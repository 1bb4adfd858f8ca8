// A rank's own error after MPI started (a label out of range, a record batch that fails its checksum
// when a lost shard is read back, a full disk under the checkpoint or the run directory, a stuck disk
// or a failed rename under the checkpoint directory: a real FUSE file system, test/helpers) stops the
// whole job: the lowest rank that erred prints one line naming the file and the problem, every rank
// exits 1, no summary is written, no process of the job outlives mpirun, and the leader records the
// stop in events.jsonl. The faults are put in place before they are met, so no test waits on a sleep.
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { AsyncRecordBatchFileReader, RecordBatchReader } from 'apache-arrow';
import { crc64 } from '../../src/base/checksum';
import type { Manifest } from '../../src/data/manifest';
import { writeDataset, type SplitSource } from '../../src/data/writer';
import type { EventRecord, StepRecord } from '../../src/run/records';
import { readPid } from '../../src/run/pids';
import { verifyCheckpoint } from '../../src/checkpoint/checkpoint';
import { withFaultyFs } from '../helpers/faulty-fs';
import { repoRoot, runTrain, type JobResult } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-stops-');
const common = ['--model', 'models/lenet.json', '--hang-timeout', '5', '--eval-samples', '400'];
const jobTimeoutMs = 45_000;
let runs = 0;

const newDir = (): string => path.join(scratch, `run-${++runs}`);
const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The bad-label dataset: 40 record batches of 100 samples, so shard 3 of 4 is batches 30..39. */
const badLabel = { batch: 35, row: 50, label: 99 };

function readLines<T>(file: string): T[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as T];
      } catch {
        return []; // a blank line, or one still being written
      }
    });
}

/** Where each record batch's IPC block (metadata + body) lies in an Arrow file, from its footer. */
async function recordBatchBlocks(file: string): Promise<{ offset: number; length: number }[]> {
  const handle = await fs.promises.open(file, 'r');
  try {
    const reader = await RecordBatchReader.from(handle);
    await reader.open();
    assert.ok(reader instanceof AsyncRecordBatchFileReader, `${file}: not an Arrow IPC file`);
    const footer = reader.footer!;
    return Array.from({ length: footer.numRecordBatches }, (_, i) => {
      const block = footer.getRecordBatch(i)!;
      return { offset: Number(block.offset), length: block.metaDataLength + Number(block.bodyLength) };
    });
  } finally {
    await handle.close();
  }
}

/** Samples of shape [1, 28, 28] with labels 0..9 in turn. */
function cyclicSource(rows: number): SplitSource {
  return {
    rows,
    fill(first, images, labels) {
      for (let i = 0; i < labels.length; ++i) labels[i] = (first + i) % 10;
      for (let j = 0; j < images.length; ++j) images[j] = (first * 784 + j * 7) & 0xff;
    },
  };
}

/**
 * A dataset whose checksums all agree but one training label is out of range, as a converter with a
 * bug would write it. writeDataset refuses such a label, so it is written in range, then rewritten
 * in the file with the batch's CRC-64 and the file's sha256 updated in the manifest.
 */
async function writeBadLabelDataset(dir: string): Promise<void> {
  const info = {
    name: 'bad-label',
    source: 'test/mpi/stops.test.ts',
    sampleShape: [1, 28, 28] as [number, number, number],
    classNames: Array.from({ length: 10 }, (_, c) => `class-${c}`),
  };
  await writeDataset(dir, info, { train: cyclicSource(4000), test: cyclicSource(400) }, 100);
  const file = path.join(dir, 'train.arrow');
  const block = (await recordBatchBlocks(file))[badLabel.batch];
  const bytes = fs.readFileSync(file);
  const blockBytes = bytes.subarray(block.offset, block.offset + block.length);
  const labels = new Int32Array(100);
  cyclicSource(4000).fill(badLabel.batch * 100, new Uint8Array(100 * 784), labels);
  const labelBytes = Buffer.from(labels.buffer);
  const at = blockBytes.indexOf(labelBytes);
  assert.ok(at >= 0 && blockBytes.lastIndexOf(labelBytes) === at, `record batch ${badLabel.batch}'s labels are not found once in ${file}`);
  blockBytes.writeInt32LE(badLabel.label, at + 4 * badLabel.row);
  fs.writeFileSync(file, bytes);
  const manifestFile = path.join(dir, 'manifest.json');
  const manifest = JSON.parse(fs.readFileSync(manifestFile, 'utf8')) as Manifest;
  manifest.splits.train.record_batches[badLabel.batch].crc64 = crc64(blockBytes);
  manifest.splits.train.sha256 = createHash('sha256').update(bytes).digest('hex');
  fs.writeFileSync(manifestFile, JSON.stringify(manifest, null, 1) + '\n');
}

/** Flips one byte of a file in place. */
function flipByte(file: string, position: number): void {
  const fd = fs.openSync(file, 'r+');
  try {
    const byte = Buffer.alloc(1);
    fs.readSync(fd, byte, 0, 1, position);
    byte[0] ^= 0x40;
    fs.writeSync(fd, byte, 0, 1, position);
  } finally {
    fs.closeSync(fd);
  }
}

/** Waits until metrics.jsonl in `runDir` holds step `step`; fails if the job ends or 30 s pass first. */
async function untilStep(runDir: string, step: number, ended: () => boolean): Promise<void> {
  const metrics = path.join(runDir, 'metrics.jsonl');
  for (const deadline = Date.now() + 30_000; Date.now() < deadline && !ended();) {
    if (readLines<StepRecord>(metrics).some((record) => record.step >= step)) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${metrics}: no step ${step} (the job ${ended() ? 'ended' : 'did not get there in 30 s'})`);
}

/**
 * The job stopped for an error: exit 1, `line` the one line ft-train printed on stderr (mpirun's own
 * noise left out), no summary, no process left. Returns the erring rank that the line names.
 */
function assertStopped(job: JobResult<never>, runDir: string, line: string | RegExp): number {
  const output = `${job.stdout}\n${job.stderr}`;
  const lines = job.stderr.split('\n').filter((l) => l.startsWith('ft-train:'));
  assert.equal(lines.length, 1, output);
  if (typeof line === 'string') assert.equal(lines[0], line, output);
  else assert.match(lines[0], line, output);
  assert.equal(job.code, 1, output);
  assert.ok(!fs.existsSync(path.join(runDir, 'summary.json')), `${runDir}: a summary.json was written\n${output}`);
  assert.equal(job.stragglers, 0, `processes of the job outlived mpirun\n${output}`);
  return Number(/^ft-train: rank (\d+):/.exec(lines[0])![1]);
}

/** The ranks that erred, as the leader's record of the error stop, the last line of events.jsonl, names them. */
function stopEventRanks(runDir: string): unknown {
  const last = readLines<EventRecord>(path.join(runDir, 'events.jsonl')).at(-1);
  assert.deepEqual({ event: last?.event, reason: last?.reason }, { event: 'stop', reason: 'error' }, JSON.stringify(last));
  return last!.ranks;
}

describe("a rank's own error stops every rank", function () {
  this.timeout(60_000);
  const badData = path.join(scratch, 'bad-label');
  const badLine = `ft-train: rank 3: ${path.join(badData, 'train.arrow')}: corrupt: record batch ${badLabel.batch} holds label ${badLabel.label}, outside [0, 10)`;
  const mounted: string[] = [];

  /** A tmpfs of `size` at `dir`, or false (and one line saying so) when this process may not mount. */
  function mountTmpfs(dir: string, size: string): boolean {
    if (process.getuid?.() !== 0) {
      console.log(`      skipped: mounting a tmpfs of ${size} needs root`);
      return false;
    }
    fs.mkdirSync(dir, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir]);
    mounted.push(dir);
    return true;
  }

  before(async () => {
    await writeBadLabelDataset(badData);
  });
  after(() => {
    // lazily: a process that still holds a file there must not keep the mount (its test failed already)
    for (const dir of mounted) execFileSync('umount', ['--lazy', dir]);
    removeScratch(scratch);
  });

  it('a label out of range on rank 3: its line, exit 1, the stop recorded', async function () {
    this.timeout(60_000);
    const runDir = newDir();
    const job = await runTrain(4, [...common, '--data', badData, '--steps', '20', '--run-dir', runDir], jobTimeoutMs);
    assert.equal(assertStopped(job, runDir, badLine), 3);
    assert.deepEqual(stopEventRanks(runDir), [3]);
  });

  it("a record batch that fails its checksum when the survivors read back a killed rank's shard", async function () {
    this.timeout(60_000);
    const data = path.join(scratch, 'fashion-mnist');
    // realpath: the checkout may hold a link to the dataset, which must not be what gets corrupted
    fs.cpSync(fs.realpathSync(path.join(repoRoot, 'datasets', 'fashion-mnist')), data, { recursive: true });
    const file = path.join(data, 'train.arrow');
    // 600 record batches: shard 2 of 4 is batches 300..449
    const corrupted = 375;
    const block = (await recordBatchBlocks(file))[corrupted];
    const runDir = newDir();
    let ended = false;
    const running = runTrain(4, [...common, '--data', data, '--steps', '60', '--run-dir', runDir], jobTimeoutMs);
    const markEnded = (): void => {
      ended = true;
    };
    running.then(markEnded, markEnded);
    const faults = untilStep(runDir, 5, () => ended).then(() => {
      // rank 2 read its shard long ago: only a survivor reading it back meets the flipped byte
      flipByte(file, block.offset + Math.floor(block.length / 2));
      process.kill(readPid(path.join(runDir, 'pids'), 2)!, 'SIGKILL');
    });
    const [job, injected] = await Promise.allSettled([running, faults]);
    if (injected.status === 'rejected') throw injected.reason;
    if (job.status === 'rejected') throw job.reason;
    const rank = assertStopped(
      job.value,
      runDir,
      new RegExp(`^ft-train: rank [013]: ${escape(file)}: corrupt: record batch ${corrupted} fails the manifest checksum$`),
    );
    assert.deepEqual(stopEventRanks(runDir), [rank]);
  });

  it('a full disk under the checkpoint directory: ENOSPC naming the stripe file or the manifest, no manifest', async function () {
    this.timeout(60_000);
    const disk = path.join(scratch, 'full-checkpoints');
    if (!mountTmpfs(disk, '1m')) this.skip();
    const checkpoints = path.join(disk, 'ck');
    const runDir = newDir();
    const job = await runTrain(
      4,
      [
        ...common,
        '--data',
        'datasets/fashion-mnist',
        '--steps',
        '40',
        '--checkpoint-dir',
        checkpoints,
        '--checkpoint-every',
        '10',
        '--run-dir',
        runDir,
      ],
      jobTimeoutMs,
    );
    // (written into the staging directory, which the commit renames step-00000010; the spare file
    // that would have spared the state file's blocks did not fit either)
    const staging = path.join(checkpoints, 'step-next');
    const files = ['state.safetensors', 'manifest.json'].map((name) => escape(path.join(staging, name))).join('|');
    const rank = assertStopped(job, runDir, new RegExp(`^ft-train: rank \\d: (${files}): ENOSPC: no space left on device$`));
    // every rank writes its stripe, and the leader the manifest meanwhile: any of them may find the
    // disk full, and the lowest of those speaks
    const erred = stopEventRanks(runDir) as number[];
    assert.ok(
      Array.isArray(erred) && erred[0] === rank && erred.every((r, i) => r >= 0 && r < 4 && (i === 0 || r > erred[i - 1])),
      `ranks ${JSON.stringify(erred)}`,
    );
    // nothing committed and nothing left: the run made the directory (for the spare) and removes it
    const left = fs.existsSync(checkpoints) ? fs.readdirSync(checkpoints, { recursive: true }).map(String) : undefined;
    assert.equal(left, undefined, `left on a full disk: ${left}`);
  });

  it('a full disk under the run directory: ENOSPC naming metrics.jsonl, from the leader', async function () {
    this.timeout(60_000);
    const disk = path.join(scratch, 'full-run');
    if (!mountTmpfs(disk, '48k')) this.skip();
    const runDir = path.join(disk, 'run');
    const job = await runTrain(4, [...common, '--data', 'datasets/fashion-mnist', '--steps', '400', '--run-dir', runDir], jobTimeoutMs);
    // the pid files, logs and events take a page each; metrics.jsonl, which only the leader writes,
    // is what keeps growing (about 95 steps fill the tmpfs); the stop event still fits its page
    assertStopped(job, runDir, `ft-train: rank 0: ${path.join(runDir, 'metrics.jsonl')}: ENOSPC: no space left on device`);
    assert.deepEqual(stopEventRanks(runDir), [0]);
  });

  it('a stuck disk under the checkpoint directory: its writes meet their deadline (2 x --hang-timeout), one line, exit 1, nothing committed', async function () {
    this.timeout(90_000);
    await withFaultyFs(this, path.join(scratch, 'stuck'), ['stall'], async (disk) => {
      const runDir = newDir();
      const checkpoints = path.join(disk.mountpoint, 'ck');
      const args = [
        '--model',
        'models/lenet.json',
        '--data',
        'datasets/fashion-mnist',
        '--steps',
        '12',
        '--checkpoint-every',
        '5',
        '--hang-timeout',
        '2',
      ];
      // the disk stays stuck until the job has said so: only its deadline can end the wait
      const job = await runTrain(4, [...args, '--checkpoint-dir', checkpoints, '--run-dir', runDir], jobTimeoutMs, (stderr) => {
        if (stderr.includes('the disk is stuck')) disk.set([]);
      });
      const line = `ft-train: rank 0: the checkpoint's writes into ${path.join(checkpoints, 'step-next')} did not finish within 4 s: the disk is stuck`;
      // the leader's manifest and the last rank's stripes wait alike: the lowest of them speaks
      const rank = assertStopped(job, runDir, new RegExp(`^${escape(line).replace('rank 0', 'rank \\d')}$`));
      // the stripes' writer (the last rank) too, where its own deadline passed before the stop reached it
      const erred = stopEventRanks(runDir) as number[];
      assert.ok(erred[0] === rank && erred.every((r) => r === 0 || r === 3), `ranks ${JSON.stringify(erred)}`);
      const left = fs.existsSync(path.join(disk.backing, 'ck')) ? fs.readdirSync(path.join(disk.backing, 'ck')) : [];
      assert.ok(!left.some((name) => /^step-\d{8}$/.test(name)), `committed: ${left}`);
    });
  });

  it('a rename that fails after the checkpoint vote: one line naming it, exit 1, the complete checkpoint kept in the staging directory', async function () {
    this.timeout(90_000);
    await withFaultyFs(this, path.join(scratch, 'no-rename'), ['fail-rename'], async (disk) => {
      const runDir = newDir();
      const checkpoints = path.join(disk.mountpoint, 'ck');
      const job = await runTrain(
        4,
        [
          ...common,
          '--data',
          'datasets/fashion-mnist',
          '--steps',
          '12',
          '--checkpoint-every',
          '5',
          '--checkpoint-dir',
          checkpoints,
          '--run-dir',
          runDir,
        ],
        jobTimeoutMs,
      );
      const staging = path.join(checkpoints, 'step-next');
      const dir = path.join(checkpoints, 'step-00000005');
      assertStopped(
        job,
        runDir,
        `ft-train: rank 0: ${dir}: the checkpoint of step 5 could not be put in place (EIO: i/o error, rename '${staging}' -> '${dir}'); ` +
          `it is complete in ${staging}, kept there (rename that directory to step-00000005 to resume from it)`,
      );
      assert.deepEqual(stopEventRanks(runDir), [0]);
      disk.set([]);
      // the kept checkpoint is whole: renamed by hand, a run resumes from it
      fs.renameSync(staging, dir);
      assert.equal(verifyCheckpoint(dir).step, 5);
    });
  });

  it('the same label with --on-failure shrink: the same line, exit 1', async function () {
    this.timeout(60_000);
    const runDir = newDir();
    const job = await runTrain(
      4,
      [...common, '--data', badData, '--steps', '20', '--on-failure', 'shrink', '--run-dir', runDir],
      jobTimeoutMs,
    );
    assert.equal(assertStopped(job, runDir, badLine), 3);
    assert.deepEqual(stopEventRanks(runDir), [3]);
  });
});
