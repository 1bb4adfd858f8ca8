// ft-train as a library, under mpirun with real kill -9s: the custom loop (examples/custom-loop/
// mlp.ts, a model written in TypeScript with its own gradients) loses a rank and ends with the
// state bit-identical to a run that never failed, reading back only the lost shard's bytes; its
// JIT checkpoint resumes on another world size; a resume with other settings is refused in one
// line. A residual network with batchnorm (models/resnet8.json) keeps its running statistics exact
// across a kill. And the packed package, installed into a scratch TypeScript project, trains from
// `import { train } from 'ft-train'` with a model spec given as an object.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { trainCommand } from '../../src/cli/mpirun';
import type { EventRecord, StepRecord } from '../../src/run/records';
import { repoRoot, runCommand, runTrain } from '../helpers/mpi-job';
import { readbackBytes } from '../helpers/readback';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-library-');
const loopScript = path.join(repoRoot, 'dist', 'examples', 'custom-loop', 'mlp.js');
let runs = 0;

/** Runs `script` (a program over the library) on `ranks` ranks with `args`. */
async function runScript(script: string, ranks: number, args: string[], cwd = repoRoot): Promise<Run> {
  const dir = path.join(scratch, `run-${++runs}`);
  const { command, args: argv, env } = trainCommand(ranks, [...args, '--run-dir', dir], {}, script);
  const job = await runCommand(
    command,
    argv,
    { ...env, FT_DATA: path.join(repoRoot, 'datasets', 'fashion-mnist') },
    120_000,
    `${path.basename(script)} on ${ranks} ranks`,
  );
  assert.equal(cwd, repoRoot);
  return { dir, ...job };
}

describe('ft-train as a library', function () {
  this.timeout(300_000);
  after(() => removeScratch(scratch));

  describe('the custom loop (elastic(), examples/custom-loop/mlp.ts)', () => {
    const loop = ['--steps', '10', '--shards', '3', '--hang-timeout', '5'];
    let unfailed: Run;

    before(async () => {
      unfailed = await runScript(loopScript, 1, loop);
    });

    it('a kill -9 of rank 1 at step 4: the same state bits as one rank that never failed, the lost shard read back exactly', async () => {
      const killed = await runScript(loopScript, 3, [...loop, '--drill', 'rank=1,step=4']);
      const summary = summaryOf(killed);
      assert.equal(summary.params_sha256, summaryOf(unfailed).params_sha256);
      assert.deepEqual(summary.failures, [{ step: 4, lost: [1], world: 2 }]);
      assert.deepEqual(
        lines<StepRecord>(killed, 'metrics.jsonl').map((m) => [m.step, m.world]),
        Array.from({ length: 10 }, (_, step) => [step, step < 4 ? 3 : 2]),
      );
      // the retried step's batches exactly; the rest in the background, which the run's end may cut short, each batch once at most
      const expected = await readbackBytes(3, [1], 4);
      assert.ok(
        summary.bytes_read_back >= expected.beforeRetry && summary.bytes_read_back <= expected.total,
        `${summary.bytes_read_back} bytes read back`,
      );
      const readback = lines<EventRecord>(killed, 'events.jsonl').filter((e) => e.event === 'readback');
      assert.equal(readback[0].bytes_before_retry, expected.beforeRetry);
      assert.equal(summary.test_accuracy, summaryOf(unfailed).test_accuracy);
      assert.ok(summary.test_accuracy! > 0.3, `test accuracy ${summary.test_accuracy}`);
      // the JIT checkpoint of step 4's start, with the registered state and slot, resumes on 2 ranks to the same bits
      const checkpoint = path.join(killed.dir, 'ckpt', 'step-00000004');
      assert.ok(fs.existsSync(path.join(checkpoint, 'manifest.json')));
      const resumed = await runScript(loopScript, 2, [...loop, '--resume', checkpoint]);
      assert.equal(summaryOf(resumed).params_sha256, summary.params_sha256);
      assert.deepEqual(
        lines<StepRecord>(resumed, 'metrics.jsonl').map((m) => m.step),
        [4, 5, 6, 7, 8, 9],
      );
      // another learning rate changes the result: refused before MPI starts, in one line, nothing written
      const refused = await runScript(loopScript, 2, [...loop, '--resume', checkpoint, '--lr', '0.1']);
      assert.equal(refused.code, 2, refused.stderr);
      assert.equal(
        refused.stderr.trim(),
        `ft-train: ${checkpoint}: written with user {"hidden":64,"lr":0.05,"momentum":0.9}, this run has {"hidden":64,"lr":0.1,"momentum":0.9}`,
      );
      assert.ok(!fs.existsSync(path.join(refused.dir, 'metrics.jsonl')));
    });

    it("--optimizer sgd --optimizer-state sharded --spares 1: ft-train's optimizer updates sharded state; a kill leaves the bits of one rank that never failed", async () => {
      const flags = [...loop, '--optimizer', 'sgd'];
      const alone = await runScript(loopScript, 1, flags);
      const killed = await runScript(loopScript, 4, [
        ...flags,
        '--optimizer-state',
        'sharded',
        '--spares',
        '1',
        '--drill',
        'rank=2,step=6',
      ]);
      const summary = summaryOf(killed);
      assert.equal(summary.params_sha256, summaryOf(alone).params_sha256);
      assert.notEqual(summary.params_sha256, summaryOf(unfailed).params_sha256);
      assert.deepEqual(summary.failures, [{ step: 6, lost: [2], world: 2 }]);
      assert.equal(summary.optimizer_state, 'sharded');
      assert.equal(summary.world_final, 3);
    });

    it('--respawn: the spawned rank runs the script again with the join flags appended, which it accepts, and joins at the retried step: the same bits', async () => {
      const respawned = await runScript(loopScript, 3, [...loop, '--respawn', '--respawn-join', 'wait', '--drill', 'rank=1,step=4']);
      assert.equal(respawned.code, 0, respawned.stderr);
      assert.equal(summaryOf(respawned).params_sha256, summaryOf(unfailed).params_sha256);
      assert.deepEqual(
        lines<StepRecord>(respawned, 'metrics.jsonl').map((m) => m.world),
        Array.from({ length: 10 }, (_, step) => (step === 4 ? 2 : 3)),
      );
    });
  });

  describe('the custom loop and the trainer, one protocol (test/mpi/programs/net-loop.ts: lenet through elastic())', () => {
    const netLoop = path.join(repoRoot, 'dist', 'test', 'mpi', 'programs', 'net-loop.js');
    const common = ['--steps', '8', '--shards', '3', '--hang-timeout', '5'];
    const kill = ['--drill', 'rank=1,step=3'];
    let trainer: string;

    before(async () => {
      const dir = path.join(scratch, `run-${++runs}`);
      const job = await runTrain(
        3,
        ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', ...common, ...kill, '--run-dir', dir],
        120_000,
      );
      trainer = summaryOf({ dir, ...job }).params_sha256;
    });

    for (const [name, ranks, extra] of [
      ['replicated state', 3, []],
      ['sharded state', 3, ['--optimizer-state', 'sharded']],
      ['a hot spare taking the lost place', 4, ['--spares', '1']],
      ['a rank respawned in its place', 3, ['--respawn', '--respawn-join', 'wait']],
    ] as const) {
      it(`${name}: a kill -9 of rank 1 at step 3 ends with the trainer's bits`, async () => {
        const flags: readonly string[] = extra;
        const run = await runScript(netLoop, ranks, [...common, ...kill, ...flags]);
        const summary = summaryOf(run);
        assert.equal(summary.params_sha256, trainer);
        // failures name the working ranks that survived the loss; a spare or a respawned rank then keeps 3 working
        assert.deepEqual(summary.failures, [{ step: 3, lost: [1], world: 2 }]);
        assert.equal(summary.world_final, ranks === 4 || flags.includes('--respawn') ? 3 : 2);
        assert.equal(summary.optimizer_state, flags.includes('sharded') ? 'sharded' : 'replicated');
      });
    }

    it('shrink mode: the survivors keep their batch, the same bits both ways', async () => {
      const shrink = ['--on-failure', 'shrink', '--batch', '63'];
      const dir = path.join(scratch, `run-${++runs}`);
      const job = await runTrain(
        3,
        ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', ...common, ...kill, ...shrink, '--run-dir', dir],
        120_000,
      );
      const run = await runScript(netLoop, 3, [...common, ...kill, ...shrink]);
      assert.equal(summaryOf(run).params_sha256, summaryOf({ dir, ...job }).params_sha256);
      assert.notEqual(summaryOf(run).params_sha256, trainer);
      assert.deepEqual(
        lines<StepRecord>(run, 'metrics.jsonl').map((m) => m.samples),
        [63, 63, 63, 42, 42, 42, 42, 42],
      );
    });
  });

  it('resnet8 (batchnorm, residual adds): a kill keeps parameters and running statistics bit-identical', async () => {
    const common = [
      '--model',
      'models/resnet8.json',
      '--data',
      'datasets/synthetic-cifar',
      '--steps',
      '6',
      '--batch',
      '24',
      '--shards',
      '3',
      '--hang-timeout',
      '5',
    ];
    const one = path.join(scratch, `run-${++runs}`);
    const three = path.join(scratch, `run-${++runs}`);
    const alone = await runTrain(1, [...common, '--run-dir', one], 120_000);
    const killed = await runTrain(3, [...common, '--run-dir', three, '--drill', 'rank=2,step=3,phase=compute'], 120_000);
    const [a, b] = [summaryOf({ dir: one, ...alone }), summaryOf({ dir: three, ...killed })];
    assert.equal(b.params_sha256, a.params_sha256);
    assert.deepEqual(b.failures, [{ step: 3, lost: [2], world: 2 }]);
    // the running statistics are in the model file, and they moved from their initial 0 / 1
    const model = fs.readFileSync(path.join(three, 'model.safetensors'));
    const header = JSON.parse(model.subarray(8, 8 + Number(model.readBigUInt64LE(0))).toString()) as Record<
      string,
      { data_offsets: [number, number] }
    >;
    const mean = header['bn1.running_mean'];
    assert.ok(mean, `no bn1.running_mean in ${Object.keys(header).join(', ')}`);
    const values = new Float32Array(
      model.buffer.slice(
        model.byteOffset + 8 + Number(model.readBigUInt64LE(0)) + mean.data_offsets[0],
        model.byteOffset + 8 + Number(model.readBigUInt64LE(0)) + mean.data_offsets[1],
      ),
    );
    assert.ok(
      values.some((v) => v !== 0),
      'bn1.running_mean never moved',
    );
    assert.deepEqual(JSON.parse(fs.readFileSync(path.join(three, 'model.json'), 'utf8')).name, 'resnet8');
  });

  it('npm run docs: the API reference of the front door, built without a warning (TypeDoc treats them as errors)', () => {
    const out = path.join(scratch, 'api');
    execFileSync(
      process.execPath,
      [path.join(repoRoot, 'node_modules', 'typedoc', 'bin', 'typedoc'), '--options', 'typedoc.json', '--out', out],
      { cwd: repoRoot, encoding: 'utf8', timeout: 120_000 },
    );
    for (const page of ['functions/train.html', 'functions/elastic.html', 'classes/ElasticLoop.html', 'interfaces/TrainSettings.html']) {
      assert.ok(fs.existsSync(path.join(out, page)), `no ${page}`);
    }
    assert.match(fs.readFileSync(path.join(out, 'interfaces', 'TrainSettings.html'), 'utf8'), /Global batch, split over the shards/);
  });

  it("the packed package: `import { train } from 'ft-train'` in another TypeScript project, 2 ranks under its launcher", async function () {
    const pack = path.join(scratch, 'pack');
    const project = path.join(scratch, 'project');
    fs.mkdirSync(pack);
    fs.mkdirSync(path.join(project, 'src'), { recursive: true });
    // the suite has built everything: pack it as it is, and install it with the packages npm already holds
    const npm = (args: string[], cwd: string) =>
      execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 180_000 });
    const tarball = npm(['pack', '--ignore-scripts', '--silent', '--pack-destination', pack], repoRoot).trim().split('\n').at(-1)!;
    fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'scratch', version: '1.0.0', private: true }));
    npm(['install', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund', path.join(pack, tarball)], project);
    fs.writeFileSync(
      path.join(project, 'src', 'main.ts'),
      [
        "import { exitWhenDone, train, type ModelSpecInput } from 'ft-train';",
        "const model: ModelSpecInput = { name: 'mlp-small', input: [1, 28, 28], classes: 10,",
        "  layers: [{ type: 'flatten' }, { type: 'linear', outputs: 32 }, { type: 'relu' }, { type: 'linear', outputs: 10 }] };",
        "const runDir = process.argv[process.argv.indexOf('--run-dir') + 1];",
        'exitWhenDone(train({ model, data: process.env.FT_DATA!, runDir, steps: 6, batch: 32, shards: 2 }));',
      ].join('\n'),
    );
    fs.writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'commonjs',
          strict: true,
          outDir: 'dist',
          rootDir: 'src',
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [path.join(repoRoot, 'node_modules', '@types')],
        },
        include: ['src'],
      }),
    );
    execFileSync(process.execPath, [path.join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], { encoding: 'utf8' });
    // the launcher and the addon come from the installed package, not this checkout
    const installed = path.join(project, 'node_modules', 'ft-train');
    assert.ok(fs.existsSync(path.join(installed, 'build', 'Release', 'ft_train_native.node')));
    const dir = path.join(scratch, `run-${++runs}`);
    const job = await runCommand(
      path.join(installed, 'launch', 'ft-run'),
      ['-n', '2', '--script', path.join(project, 'dist', 'main.js'), '--', '--run-dir', dir],
      { ...process.env, FT_DATA: path.join(repoRoot, 'datasets', 'fashion-mnist') },
      120_000,
      'the packed package',
    );
    const summary = summaryOf({ dir, ...job });
    assert.equal(summary.steps, 6);
    assert.equal(summary.model, 'mlp-small');
    // the same model as a spec file, through this checkout's ft-train: the same bits
    const spec = path.join(scratch, 'mlp-small.json');
    fs.writeFileSync(
      spec,
      JSON.stringify({
        name: 'mlp-small',
        input: [1, 28, 28],
        classes: 10,
        layers: [{ type: 'flatten' }, { type: 'linear', outputs: 32 }, { type: 'relu' }, { type: 'linear', outputs: 10 }],
      }),
    );
    const cliDir = path.join(scratch, `run-${++runs}`);
    const cli = await runTrain(1, [
      '--model',
      spec,
      '--data',
      'datasets/fashion-mnist',
      '--steps',
      '6',
      '--batch',
      '32',
      '--shards',
      '2',
      '--run-dir',
      cliDir,
    ]);
    assert.equal(summaryOf({ dir: cliDir, ...cli }).params_sha256, summary.params_sha256);
  });
});
