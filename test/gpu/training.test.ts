// ft-train with --device cuda on real processes: lenet on Fashion-MNIST for 100 steps against the
// CPU's loss curve; exact mode on the GPU, where a kill -9 of a rank at 3 ranks sharing the GPU (the
// MPI path), with replicated or sharded optimizer state, ends with the parameters of the 1-rank run
// without failure; the optimizer state on the GPU (replicated) gives the host update's bits through a
// resume, a join and a rollback; a residual net's exact mode with a kill; gpt-tiny's exact mode with a
// kill and its loss curve against the CPU's; and a model the GPU cannot compute, refused in one line.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { StepRecord, Summary } from '../../src/run/records';
import { requireGpu } from '../helpers/gpu';
import { runTrain } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-gpu-');
let runs = 0;

async function train(ranks: number, ...extra: string[]): Promise<{ dir: string; summary: Summary; steps: StepRecord[] }> {
  const dir = path.join(scratch, `run-${++runs}`);
  const job = await runTrain(
    ranks,
    [
      ...(extra.includes('--model') ? [] : ['--model', 'models/lenet.json']),
      ...(extra.includes('--data') ? [] : ['--data', 'datasets/fashion-mnist']),
      '--run-dir',
      dir,
      ...extra,
    ],
    240_000,
  );
  assert.equal(job.code, 0, `exit ${job.code}\n${job.stdout}\n${job.stderr}`);
  assert.equal(job.stragglers, 0, 'processes of the job outlived mpirun');
  const summary = JSON.parse(fs.readFileSync(path.join(dir, 'summary.json'), 'utf8')) as Summary;
  const steps = fs
    .readFileSync(path.join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as StepRecord)
    .filter((record) => record.loss !== undefined);
  return { dir, summary, steps };
}

describe('GPU backend: training', function () {
  this.timeout(600_000);
  before(function () {
    requireGpu(this);
  });
  after(() => removeScratch(scratch));

  it('lenet, 100 steps: the GPU loss curve follows the CPU one (each step within 5%, the last 20 steps on average within 1%)', async () => {
    const gpu = await train(1, '--steps', '100', '--device', 'cuda');
    const cpu = await train(1, '--steps', '100');
    assert.equal(gpu.steps.length, 100);
    assert.equal(cpu.steps.length, 100);
    gpu.steps.forEach((record, i) => {
      const want = cpu.steps[i].loss;
      assert.ok(Math.abs(record.loss - want) <= 0.05 * want, `step ${record.step}: GPU loss ${record.loss}, CPU ${want}`);
    });
    const mean = (records: StepRecord[]): number => records.slice(-20).reduce((sum, r) => sum + r.loss, 0) / 20;
    assert.ok(
      Math.abs(mean(gpu.steps) - mean(cpu.steps)) <= 0.01 * mean(cpu.steps),
      `last 20 steps: GPU ${mean(gpu.steps)}, CPU ${mean(cpu.steps)}`,
    );
    assert.notEqual(gpu.summary.params_sha256, cpu.summary.params_sha256, 'the GPU run has the CPU bits: did it run on the GPU?');
  });

  it('exact mode on the GPU: 1 rank, 2 ranks, and 3 ranks with a kill -9 of rank 1 at step 10 end with the same bits', async () => {
    const common = ['--steps', '30', '--shards', '6', '--device', 'cuda', '--hang-timeout', '5'];
    const one = await train(1, ...common);
    const two = await train(2, ...common);
    const killed = await train(3, ...common, '--drill', 'rank=1,step=10,phase=compute');
    assert.equal(two.summary.params_sha256, one.summary.params_sha256, 'the 2-rank run differs from the 1-rank run');
    assert.deepEqual(
      killed.summary.failures.flatMap((f) => f.lost),
      [1],
      JSON.stringify(killed.summary.failures),
    );
    assert.equal(killed.summary.params_sha256, one.summary.params_sha256, 'the run with a kill differs from the run without');
    // optimizer state sharded over the ranks (kept on the host): the same bits, a kill included
    const sharded = await train(3, ...common, '--optimizer-state', 'sharded', '--drill', 'rank=2,step=12,phase=compute');
    assert.deepEqual(
      sharded.summary.failures.flatMap((f) => f.lost),
      [2],
    );
    assert.equal(sharded.summary.params_sha256, one.summary.params_sha256, 'the sharded run with a kill differs from the replicated run');
  });

  it("parameters and optimizer state on the GPU (AdamW): the host update's bits, through a resume, a respawned rank joining and flips rolled back", async () => {
    const common = ['--steps', '30', '--shards', '6', '--device', 'cuda', '--hang-timeout', '5', '--optimizer', 'adamw'];
    const one = await train(1, ...common, '--checkpoint-every', '10');
    const same = (run: { summary: Summary }, what: string): void =>
      assert.equal(run.summary.params_sha256, one.summary.params_sha256, `${what} differs from the 1-rank run`);
    // sharded state updates on the host, replicated state on the GPU
    same(await train(2, ...common, '--optimizer-state', 'sharded'), 'the run updating on the host');
    // the checkpoint's state goes up to the GPU
    same(await train(2, ...common, '--resume', path.join(one.dir, 'ckpt', 'step-00000010')), 'the resumed run');
    // the newcomer's state comes from a peer's GPU through the host
    const respawned = await train(3, ...common, '--respawn', '--respawn-join', 'wait', '--drill', 'rank=1,step=10,phase=compute');
    assert.deepEqual(
      respawned.summary.failures.flatMap((f) => f.lost),
      [1],
    );
    assert.equal(respawned.summary.world_final, 3, 'the respawned rank did not join');
    same(respawned, 'the run with a respawned rank');
    // a flip of the state, then of the parameters, made on the host after the update on the GPU: the
    // cross-check reads them from the GPU, and the rollback's state goes up again
    for (const [rank, target] of [
      [0, ',target=state'],
      [2, ''],
    ] as const) {
      const flipped = await train(3, ...common, '--verify-every', '4', '--drill', `rank=${rank},step=9,phase=update,action=flip${target}`);
      assert.equal(flipped.summary.corruptions, 1, `the flip (${target || 'parameters'}) was not caught once`);
      assert.deepEqual(
        flipped.summary.failures.flatMap((f) => f.lost),
        [rank],
      );
      same(flipped, `the run with a flip (${target || 'parameters'})`);
    }
  });

  it('a residual net (batchnorm, add, global pooling): exact mode at 1, 2 and 3 ranks with a kill -9 ends with the same bits, running statistics included', async () => {
    const spec = path.join(scratch, 'residual.json');
    const layers = [
      { type: 'conv', name: 'conv1', filters: 8, kernel: 3, pad: 1 },
      { type: 'batchnorm', name: 'bn1' },
      { type: 'relu', name: 'relu1' },
      { type: 'conv', name: 'conv2', filters: 8, kernel: 3, pad: 1 },
      { type: 'batchnorm', name: 'bn2' },
      { type: 'add', name: 'add', inputs: ['bn2', 'relu1'] },
      { type: 'relu', name: 'relu2' },
      { type: 'maxpool', name: 'pool1', kernel: 2, stride: 2 },
      { type: 'globalavgpool', name: 'pool2' },
      { type: 'linear', name: 'fc', outputs: 10 },
    ];
    fs.writeFileSync(spec, JSON.stringify({ name: 'residual', input: [1, 28, 28], classes: 10, layers }));
    const common = ['--model', spec, '--steps', '20', '--shards', '6', '--device', 'cuda', '--hang-timeout', '5'];
    const one = await train(1, ...common);
    const two = await train(2, ...common);
    const killed = await train(3, ...common, '--drill', 'rank=1,step=8,phase=compute');
    assert.ok(one.steps.every((record) => Number.isFinite(record.loss)));
    assert.ok(one.steps[19].loss < one.steps[0].loss, `the loss did not fall: ${one.steps[0].loss} -> ${one.steps[19].loss}`);
    assert.equal(two.summary.params_sha256, one.summary.params_sha256, 'the 2-rank run differs from the 1-rank run');
    assert.deepEqual(
      killed.summary.failures.flatMap((f) => f.lost),
      [1],
    );
    assert.equal(killed.summary.params_sha256, one.summary.params_sha256, 'the run with a kill differs from the run without');
  });

  it('gpt-tiny (embedding, attention, layernorm, GELU, dropout; AdamW on the GPU, clipping): exact mode at 1 rank and at 3 ranks with a kill -9 of rank 1 end with the same bits, and the loss curve follows the CPU one (each step within 2%)', async () => {
    const gpt = [
      ...['--model', 'models/gpt-tiny.json', '--data', 'datasets/text-char', '--steps', '12', '--batch', '8', '--shards', '4'],
      ...['--optimizer', 'adamw', '--lr', '3e-3', '--warmup-steps', '3', '--lr-schedule', 'cosine', '--clip-norm', '1'],
      ...['--hang-timeout', '5'],
    ];
    const one = await train(1, ...gpt, '--device', 'cuda');
    const killed = await train(3, ...gpt, '--device', 'cuda', '--drill', 'rank=1,step=6,phase=compute');
    const cpu = await train(1, ...gpt);
    assert.equal(one.steps.length, 12);
    assert.deepEqual(
      killed.summary.failures.flatMap((f) => f.lost),
      [1],
    );
    assert.equal(killed.summary.params_sha256, one.summary.params_sha256, 'the run with a kill differs from the run without');
    assert.notEqual(one.summary.params_sha256, cpu.summary.params_sha256, "the GPU's bits are its own");
    one.steps.forEach((record, i) => {
      const want = cpu.steps[i].loss;
      assert.ok(Math.abs(record.loss - want) <= 0.02 * want, `step ${record.step}: GPU loss ${record.loss}, CPU ${want}`);
    });
    assert.ok(one.steps[11].loss < one.steps[0].loss, `the loss did not fall: ${one.steps[0].loss} -> ${one.steps[11].loss}`);
  });

  it('a model with a layer the GPU does not compute: one line naming it, exit 2, nothing trained', async () => {
    const spec = path.join(scratch, 'lenet-concat.json');
    const layers = [
      { type: 'conv', name: 'conv1', filters: 8, kernel: 5 },
      { type: 'concat', name: 'cat1', inputs: ['conv1', 'conv1'] },
      { type: 'flatten', name: 'flatten' },
      { type: 'linear', name: 'ip1', outputs: 10 },
    ];
    fs.writeFileSync(spec, JSON.stringify({ name: 'lenet-concat', input: [1, 28, 28], classes: 10, layers }));
    const dir = path.join(scratch, 'refused');
    const job = await runTrain(
      1,
      ['--model', spec, '--data', 'datasets/fashion-mnist', '--steps', '5', '--device', 'cuda', '--run-dir', dir],
      60_000,
    );
    assert.equal(job.code, 2, `exit ${job.code}\n${job.stderr}`);
    const lines = job.stderr.split('\n').filter((line) => line.startsWith('ft-train:'));
    assert.deepEqual(lines, [
      `ft-train: ${spec}: layer 2 (cat1): a concat layer has no GPU kernels yet (--device cuda computes conv, maxpool, avgpool, linear, relu, flatten, batchnorm, globalavgpool, add, embedding, layernorm, attention, gelu, dropout, lmhead layers)`,
    ]);
    assert.ok(!fs.existsSync(path.join(dir, 'summary.json')));
  });
});
