// Bad input to ft-train, each tried as a real job (under mpirun, or alone as a singleton): it is
// found before MPI starts, world rank 0 prints one line naming the flag or file and the problem,
// the exit code is 2, and no run directory is left. Also: a fault-tolerant policy is refused
// under an mpirun without fault tolerance (--on-failure none is not), and a resume with another
// --threads is refused. A run or checkpoint directory that cannot be made is refused alike.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { generateSynthetic, syntheticDefaults } from '../../datasets/synthetic';
import { mpirunCommand, trainCommand } from '../../src/cli/mpirun';
import { inputErrorWaitMs } from '../../src/liveness/hang-bounds';
import { repoRoot, runCommand, runTrain, type JobResult } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-inputs-');
const common = ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--steps', '60', '--batch', '64'];
/** 150 training samples in 3 record batches: at most 3 shards */
const tiny = path.join(scratch, 'tiny');
const onTiny = ['--model', 'models/mlp.json', '--data', tiny, '--batch', '12'];
const ftTrain = path.join(repoRoot, 'launch', 'ft-train.js');
let runs = 0;

const newDir = (): string => path.join(scratch, `run-${++runs}`);

/** ft-train alone, as a singleton (no mpirun). */
function alone(args: string[]): Promise<JobResult<never>> {
  return runCommand(process.execPath, [ftTrain, ...args], process.env, 30_000, `ft-train ${args.join(' ')}`);
}

/** ft-train under an mpirun without --with-ft ulfm: MPI's fault tolerance off. */
function withoutFt(ranks: number, args: string[]): Promise<JobResult<never>> {
  const { command, args: argv, env } = mpirunCommand({ ranks, program: [process.execPath, ftTrain, ...args] });
  const at = argv.indexOf('--with-ft');
  return runCommand(command, [...argv.slice(0, at), ...argv.slice(at + 2)], env, 30_000, `ft-train without --with-ft ${args.join(' ')}`);
}

/** Exit code 2, `line` the only line of ft-train's on stderr (mpirun adds its own), and `dir` not created. */
function assertRefused(job: JobResult<never>, line: string, dir: string): void {
  assert.equal(job.code, 2, job.stdout + job.stderr);
  assert.deepEqual(
    job.stderr.split('\n').filter((l) => l.startsWith('ft-train')),
    [line],
    job.stderr,
  );
  assert.ok(!fs.existsSync(dir), `${dir} was left behind`);
}

describe('ft-train: bad input is refused before MPI starts', function () {
  this.timeout(60_000);

  before(async () => {
    await generateSynthetic(tiny, { ...syntheticDefaults, shape: [1, 28, 28], trainRows: 150, testRows: 20, rowsPerBatch: 50 });
  });
  after(() => removeScratch(scratch));

  describe('alone (a singleton)', () => {
    const badSpec = path.join(scratch, 'bad.json');
    const cases: [string, string[], string][] = [
      ['a bad flag value', ['--batch', '0'], 'ft-train: --batch expects an integer >= 1, got 0 (see --help)'],
      ['an unknown flag', ['--bogus', '1'], 'ft-train: unknown flag --bogus (see --help)'],
      ['a misspelled flag', ['--step', '5'], 'ft-train: unknown flag --step; did you mean --steps? (see --help)'],
      ['a number flag given no number', ['--lr=abc'], 'ft-train: --lr: expected a number, got "abc"'],
      ['a bad drill', ['--drill', 'rank=1'], 'ft-train: --drill: step expects an integer >= 0 in "rank=1" (see --help)'],
      ['a missing dataset', ['--data', 'datasets/nowhere'], 'ft-train: datasets/nowhere: no such dataset directory'],
      ['a bad model spec', ['--model', badSpec], `ft-train: ${badSpec}: layer 1 (fc): "outputs" must be a positive integer, got 0`],
      [
        'a model that does not fit the data',
        ['--model', 'models/cifarnet.json'],
        'ft-train: models/cifarnet.json: takes 3x32x32 inputs, but datasets/fashion-mnist holds 1x28x28 samples',
      ],
      [
        'more test samples to score than the test split holds',
        ['--eval-samples', '10001'],
        'ft-train: --eval-samples 10001 is more than the 10000 samples of the test split (datasets/fashion-mnist/test.arrow)',
      ],
      ['an empty --model', ['--model', ''], 'ft-train: --model expects a path, got "" (see --help)'],
      ['an empty --data', ['--data', ''], 'ft-train: --data expects a path, got "" (see --help)'],
      [
        'more shards than ranks can fill: --batch below --shards',
        ['--shards', '8', '--batch', '4'],
        'ft-train: --batch 4 is smaller than the 8 shards (--shards): every shard takes at least one sample per step',
      ],
      [
        'a drill naming a rank that does not exist',
        ['--drill', 'rank=1,step=5'],
        'ft-train: --drill names rank 1, but the world size is 1',
      ],
      ['--min-ranks above the world size', ['--min-ranks', '2'], 'ft-train: --min-ranks 2 is above the world size 1'],
      [
        '--respawn in shrink mode',
        ['--respawn', '--on-failure', 'shrink'],
        'ft-train: --respawn needs --on-failure exact, got shrink (see --help)',
      ],
      ['--respawn-limit without --respawn', ['--respawn-limit', '2'], 'ft-train: --respawn-limit applies with --respawn only (see --help)'],
      ['--respawn-join without --respawn', ['--respawn-join', 'wait'], 'ft-train: --respawn-join applies with --respawn only (see --help)'],
      ['--spares that leave no working rank', ['--spares', '1'], 'ft-train: --spares 1 leaves no working rank in the world size 1'],
      ['--reserves without --respawn', ['--reserves', '1'], 'ft-train: --reserves applies with --respawn only (see --help)'],
      [
        '--reserves that leave no working rank',
        ['--respawn', '--reserves', '1'],
        'ft-train: --reserves 1 leaves no working rank in the world size 1',
      ],
    ];
    for (const [what, args, line] of cases) {
      it(what, async () => {
        fs.writeFileSync(
          badSpec,
          JSON.stringify({ name: 'bad', input: [1, 28, 28], classes: 10, layers: [{ type: 'linear', name: 'fc', outputs: 0 }] }),
        );
        const dir = newDir();
        assertRefused(await alone([...common, '--run-dir', dir, ...args]), line, dir);
      });
    }

    it('a --checkpoint-dir that cannot be made: through a file, or where this process may not write', async () => {
      const file = path.join(scratch, 'a-file');
      fs.writeFileSync(file, '');
      let dir = newDir();
      assertRefused(
        await alone([...common, '--run-dir', dir, '--checkpoint-dir', `${file}/ckpt`]),
        `ft-train: --checkpoint-dir ${file}/ckpt: ${file} is not a directory`,
        dir,
      );
      dir = newDir();
      // as root too: /proc/sys/fs refuses even root's writes (a read-only mount's are EROFS)
      assertRefused(
        await alone([...common, '--run-dir', dir, '--checkpoint-dir', '/proc/sys/fs/ckpt']),
        'ft-train: --checkpoint-dir /proc/sys/fs/ckpt: cannot write in /proc/sys/fs (EACCES)',
        dir,
      );
    });

    it("a --run-dir where mkdir says 'no such directory' though the parent exists (/proc: Node's own mkdir -p loops there for good)", async () => {
      assertRefused(
        await alone([...common, '--run-dir', '/proc/ft-run']),
        "ft-train: ENOENT: no such file or directory, mkdir '/proc/ft-run'",
        '/proc/ft-run',
      );
    });

    it('an empty --run-dir (which would write into the current directory)', async () => {
      const job = await alone([...common, '--run-dir', '']);
      assertRefused(job, 'ft-train: --run-dir expects a path, got "" (see --help)', path.join(repoRoot, 'pids'));
      assert.ok(!fs.existsSync(path.join(repoRoot, 'logs')));
    });

    it('a model too large to allocate, naming the spec and its parameter count', async () => {
      const huge = path.join(scratch, 'huge.json');
      const layers = [{ type: 'flatten' }, { type: 'linear', name: 'wide', outputs: 1e9 }, { type: 'linear', name: 'out', outputs: 10 }];
      fs.writeFileSync(huge, JSON.stringify({ name: 'huge', input: [1, 28, 28], classes: 10, layers }));
      const dir = newDir();
      const count = 784e9 + 1e9 + 10e9 + 10;
      assertRefused(
        await alone([...common, '--run-dir', dir, '--model', huge]),
        `ft-train: ${huge}: ${count} parameters (5923.2 GiB with their gradients) cannot be allocated: Invalid typed array length: ${count}`,
        dir,
      );
    });

    it('a run directory that already holds a run', async () => {
      const dir = newDir();
      fs.mkdirSync(dir);
      fs.writeFileSync(path.join(dir, 'events.jsonl'), '');
      const job = await alone([...common, '--run-dir', dir]);
      assert.equal(job.code, 2, job.stderr);
      assert.deepEqual(job.stderr.trim().split('\n'), [
        `ft-train: ${dir}: --run-dir already holds a run (events.jsonl); choose a new directory or --resume it`,
      ]);
      assert.deepEqual(fs.readdirSync(dir), ['events.jsonl']);
    });
  });

  describe('under mpirun: world rank 0 alone prints the line', () => {
    const cases: [string, number, string[], string][] = [
      [
        '--batch below the shards, which default to the world size',
        4,
        ['--batch', '2'],
        'ft-train: --batch 2 is smaller than the 4 shards (the world size by default; see --shards): every shard takes at least one sample per step',
      ],
      [
        'with --spares, fewer shards than working ranks',
        4,
        ['--shards', '2', '--spares', '1'],
        'ft-train: --shards 2 is fewer than the 3 working ranks launched: with --spares every working rank holds at least one shard (launch 2, and any more as --spares)',
      ],
      [
        'more shards than the training split has record batches',
        4,
        onTiny,
        `ft-train: ${tiny}/train.arrow: 4 shards asked, but it has 3 record batches: at most 3 shards (4 shards: the world size by default; see --shards)`,
      ],
      [
        'more shards than record batches, by --shards',
        2,
        [...onTiny, '--shards', '5'],
        `ft-train: ${tiny}/train.arrow: 5 shards asked, but it has 3 record batches: at most 3 shards (5 shards: --shards)`,
      ],
      [
        'shrink with a --batch the world size does not divide',
        4,
        ['--on-failure', 'shrink', '--batch', '30'],
        'ft-train: --batch 30 is not a multiple of the world size 4: with --on-failure shrink every rank takes --batch / initial world size samples per step',
      ],
      [
        'none with a --batch the world size does not divide',
        3,
        ['--on-failure', 'none', '--batch', '64'],
        'ft-train: --batch 64 is not a multiple of the world size 3: with --on-failure none every rank takes --batch / initial world size samples per step',
      ],
      ['--min-ranks above the world size', 4, ['--min-ranks', '5'], 'ft-train: --min-ranks 5 is above the world size 4'],
      [
        'a drill naming a rank that does not exist',
        4,
        ['--drill', 'rank=2,step=3', '--drill', 'rank=4,step=1'],
        'ft-train: --drill names rank 4, but the world size is 4',
      ],
      [
        '--min-ranks above the working world size',
        4,
        ['--spares', '1', '--min-ranks', '4'],
        'ft-train: --min-ranks 4 is above the working world size 3 (--spares 1)',
      ],
      [
        '--min-ranks above the working world size, reserves asleep',
        4,
        ['--respawn', '--spares', '1', '--reserves', '1', '--min-ranks', '3'],
        'ft-train: --min-ranks 3 is above the working world size 2 (--spares 1, --reserves 1)',
      ],
      [
        'a drill naming a rank past those --respawn may spawn',
        4,
        ['--respawn', '--respawn-limit', '1', '--drill', 'rank=5,step=1'],
        'ft-train: --drill names rank 5, but the world size is 4 and ranks up to 4 may be spawned',
      ],
    ];
    for (const [what, ranks, args, line] of cases) {
      it(`${what} (${ranks} ranks)`, async () => {
        const dir = newDir();
        assertRefused(await runTrain(ranks, [...common, '--run-dir', dir, ...args], 30_000), line, dir);
      });
    }

    /**
     * One mpirun, two programs (MPMD): `first` on rank 0, `rest` (each an argv after node) on the
     * next `restRanks`, with the launcher's options for ft-train's `trainArgs`, unbound (a binding
     * would place each program as if it ran alone).
     */
    function twoPrograms(
      first: (node: string[]) => string[],
      restRanks: number,
      rest: (node: string[]) => string[],
      ...trainArgs: string[]
    ) {
      const { command, args, env } = trainCommand(1 + restRanks, trainArgs);
      const at = args.indexOf(process.execPath);
      const node = args.slice(at, -trainArgs.length);
      const placement = new Set(['-n', '--map-by', '--bind-to']);
      const options = args.slice(0, at).filter((arg, i, all) => !placement.has(arg) && !placement.has(all[i - 1]));
      const argv = [
        ...options,
        '-n',
        '1',
        '--bind-to',
        'none',
        ...first(node),
        ':',
        '-n',
        String(restRanks),
        '--bind-to',
        'none',
        ...rest(node),
      ];
      return runCommand(command, argv, env, 30_000, `ft-train as two programs ${trainArgs.join(' ')}`);
    }

    it('rank 0 slower to start than the others (2 s): the others leave the line to it and exit 0 at once, so that mpirun cannot end the job before it prints', async () => {
      const dir = newDir();
      const args = [...common, '--run-dir', dir, '--min-ranks', '5'];
      const job = await twoPrograms(
        (node) => ['sh', '-c', 'sleep 2; exec "$@"', 'sh', ...node, ...args],
        3,
        (node) => [...node, ...args],
        ...args,
      );
      assertRefused(job, 'ft-train: --min-ranks 5 is above the world size 4', dir);
    });

    it('bad flags, found alike on every host: the first rank of another host exits 0 at once too, without a line', async () => {
      const dir = newDir();
      const args = [...common, '--run-dir', dir, '--min-ranks', '5'];
      const started = Date.now();
      // ranks 1-3 as the first ranks of other hosts: mpirun gives each local rank 0 there
      const job = await twoPrograms(
        (node) => ['sh', '-c', 'sleep 2; exec "$@"', 'sh', ...node, ...args],
        3,
        (node) => ['env', 'OMPI_COMM_WORLD_LOCAL_RANK=0', ...node, ...args],
        ...args,
      );
      assertRefused(job, 'ft-train: --min-ranks 5 is above the world size 4', dir);
      // no rank waited the 5 s that a line found in files waits on another host
      assert.ok(Date.now() - started < inputErrorWaitMs, `${Date.now() - started} ms`);
    });

    it('bad input that the first rank of another host alone finds (a dataset missing there): it prints it with its rank after a wait, exit 2', async () => {
      const dir = newDir();
      const fine = [...onTiny, '--run-dir', dir, '--steps', '2'];
      const missing = [...fine, '--data', path.join(scratch, 'nowhere')];
      // rank 1 as the first rank of another host: mpirun gives it local rank 0 there
      const job = await twoPrograms(
        (node) => [...node, ...fine],
        1,
        (node) => ['env', 'OMPI_COMM_WORLD_LOCAL_RANK=0', ...node, ...missing],
        ...fine,
      );
      assert.equal(job.code, 2, job.stdout + job.stderr);
      assert.deepEqual(
        job.stderr.split('\n').filter((l) => l.startsWith('ft-train')),
        [`ft-train: rank 1: ${scratch}/nowhere: no such dataset directory`],
        job.stderr,
      );
    });
  });

  describe('MPI fault tolerance', () => {
    for (const policy of ['exact', 'shrink']) {
      it(`--on-failure ${policy} under an mpirun without --with-ft ulfm`, async () => {
        const dir = newDir();
        assertRefused(
          await withoutFt(2, [...common, '--run-dir', dir, '--on-failure', policy]),
          `ft-train: --on-failure ${policy} needs MPI fault tolerance: launch with launch/ft-run (or mpirun --with-ft ulfm), or use --on-failure none`,
          dir,
        );
      });
    }

    it('--on-failure none needs none: it trains', async () => {
      const dir = newDir();
      const job = await withoutFt(2, [...onTiny, '--run-dir', dir, '--steps', '2', '--on-failure', 'none']);
      assert.equal(job.code, 0, job.stdout + job.stderr);
      assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'summary.json'), 'utf8')).steps, 2);
    });
  });

  it('a resume with another --threads (which changes the bits)', async () => {
    const first = newDir();
    const job = await runTrain(1, [...onTiny, '--run-dir', first, '--steps', '2', '--checkpoint-every', '1']);
    assert.equal(job.code, 0, job.stdout + job.stderr);
    const dir = newDir();
    const checkpoint = path.join(first, 'ckpt', 'step-00000001');
    assertRefused(
      await runTrain(2, [...onTiny, '--run-dir', dir, '--steps', '2', '--resume', first, '--threads', '2'], 30_000),
      `ft-train: ${checkpoint}: written with threads 1, this run has 2`,
      dir,
    );
  });

  it("launch/drill passes ft-train's refusal on: its line, exit 2, nothing written", async () => {
    const dir = newDir();
    const job = await runCommand(
      path.join(repoRoot, 'launch', 'drill'),
      ['-n', '2', '--kill', '1@3', '--', ...onTiny, '--run-dir', dir, '--steps', '5', '--model', 'no-such-model.json'],
      process.env,
      60_000,
      'launch/drill with a bad model',
    );
    assert.equal(job.code, 2, job.stdout + job.stderr);
    assert.equal(job.stderr.trim(), 'ft-train: no-such-model.json: cannot read the model spec (ENOENT)');
    assert.ok(!fs.existsSync(dir));
  });
});
