// A cluster of unlike hosts on one machine: ranks limited to a lower instruction-set level
// (FT_CPU_LEVEL_MAX, as hosts with older CPUs would be) and started with an environment that steers
// oneDNN and OpenBLAS to other kernels, beside ranks started without it (as sshd starts them). The
// job agrees on the best level every rank runs and gives the bits of a run where every rank is
// alike at that level, also after a kill that moves shards from one kind of rank to the other; a
// level some rank cannot run, asked for or a resumed checkpoint's, is refused in one line.
import { strict as assert } from 'node:assert';
import * as path from 'node:path';
import { mpirunCommand } from '../../src/cli/mpirun';
import { cpuLevels } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import type { EventRecord } from '../../src/run/records';
import { fewTestSamples, lenetOnFashion, repoRoot, runCommand, runTrain } from '../helpers/mpi-job';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-unlike-');
const common = [...lenetOnFashion, '--steps', '12', '--batch', '64', '--shards', '4', ...fewTestSamples];
const low = cpuLevels[0];
let runs = 0;

/** ft-train on 4 ranks, `limited` of them acting as hosts of level `low` started with a steering environment. */
async function unlikeRun(limited: number[], extra: string[]): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const unlike = `FT_CPU_LEVEL_MAX=${low} OPENBLAS_CORETYPE=Prescott ONEDNN_MAX_CPU_ISA=SSE41 ONEDNN_CPU_ISA_HINTS=PREFER_YMM`;
  const wrapper = `case " ${limited.join(' ')} " in *" $OMPI_COMM_WORLD_RANK "*) export ${unlike};; esac; exec "$@"`;
  const { command, args, env } = mpirunCommand({
    ranks: 4,
    program: [
      '/bin/sh',
      '-c',
      wrapper,
      'rank',
      process.execPath,
      path.join(repoRoot, 'launch', 'ft-train.js'),
      ...common,
      '--run-dir',
      dir,
      ...extra,
    ],
  });
  return { dir, ...(await runCommand(command, args, env, 120_000, `unlike hosts ${limited.join(',')} ${extra.join(' ')}`)) };
}

describe("unlike hosts: the kernels' level agreed by the job", function () {
  this.timeout(300_000);
  const host = cpu.hostLevel();
  let reference: string;

  before(async function () {
    if (host === low) {
      console.log(`    skipped: this host runs ${low} only, so no rank can run more than another`);
      this.skip();
    }
    const dir = path.join(scratch, 'alike');
    const job = await runTrain(4, [...common, '--run-dir', dir, '--isa', low]);
    const summary = summaryOf({ dir, ...job });
    assert.equal(summary.kernels!.level, low);
    reference = summary.params_sha256;
  });

  after(() => removeScratch(scratch));

  it(`ranks 0 and 2 limited to ${low}, with a steering environment: the job runs at ${low} with the bits of alike ranks`, async () => {
    const run = await unlikeRun([0, 2], []);
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference);
    assert.deepEqual([summary.kernels!.level, summary.settings!.isa], [low, low]);
    assert.match(run.stdout, new RegExp(`kernels at ${low}; run dir`));
  });

  it('an unlimited rank killed: its shard moves to a limited one, the same bits', async () => {
    const run = await unlikeRun([0, 2], ['--drill', 'rank=1,step=5']);
    const summary = summaryOf(run);
    assert.deepEqual(
      summary.failures.map((f) => f.lost),
      [[1]],
    );
    assert.equal(summary.params_sha256, reference);
    const readback = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'readback') as { ranks?: unknown } | undefined;
    assert.ok(readback, 'no readback event');
  });

  it(`--isa ${host}, which limited ranks cannot run: one line, exit 2, nothing trained`, async () => {
    const run = await unlikeRun([1, 3], ['--isa', host]);
    assert.equal(run.code, 2, run.stderr);
    assert.deepEqual(
      run.stderr
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('ft-train')),
      [
        `ft-train: --isa ${host} needs ${host}, but the hosts of ranks 1, 3 run up to ${low}: run on hosts that have ${host}, or pass --isa ${low} (or auto)`,
      ],
    );
  });

  it(`a checkpoint computed at ${host} resumed where a rank runs ${low} only: refused in one line`, async () => {
    const first = path.join(scratch, 'at-host');
    const job = await runTrain(4, [...common, '--run-dir', first, '--checkpoint-every', '6']);
    assert.equal(summaryOf({ dir: first, ...job }).kernels!.level, host);
    const run = await unlikeRun([2], ['--resume', first]);
    assert.equal(run.code, 2, run.stderr);
    const line = run.stderr
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('ft-train'));
    assert.equal(line.length, 1, run.stderr);
    assert.match(
      line[0],
      new RegExp(
        `^ft-train: .*/ckpt/step-\\d+, computed at ${host}, needs ${host}, but the host of rank 2 runs up to ${low}: run on hosts that have ${host}$`,
      ),
    );
  });
});
