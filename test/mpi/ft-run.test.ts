// launch/ft-run: the mpirun command it builds (--dry-run: oversubscription against this machine's
// cores or a hostfile's slots, the hang detector from ft-train's --hang-timeout, the ranks' cores
// from its --threads, root's consent),
// its one-line refusals, and real jobs judged by their run directory: a finished run exits 0, a job
// whose ranks were all killed exits 1 although mpirun exits 0, one whose ranks were all stopped
// has them killed past the start-up and comm deadlines, and SIGTERM ends in a clean stop;
// --max-restarts: a job stopped below --min-ranks restarted from its checkpoint to the same bits, a
// resumed job with none of its own restarted from the one it resumed from, and no restart without
// a checkpoint.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { mpiHome } from '../../src/cli/mpirun';
import { readRun } from '../../src/report/run-data';
import { NoRestart, planRestart } from '../../src/cli/restart';
import { repoRoot, runCommand, type JobResult } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';
import { type StopTarget, stopOnceWritten as stopOnceWrittenAt } from '../helpers/stop-once';

const scratch = makeScratch('ft-run-');
const ftRun = path.join(repoRoot, 'launch', 'ft-run');
const ftTrain = path.join(repoRoot, 'launch', 'ft-train.js');
const trainFlags = ['--model', 'models/mlp.json', '--data', 'datasets/fashion-mnist'];

function launch(args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 20_000): Promise<JobResult<never>> {
  return runCommand(process.execPath, [ftRun, ...args], env, timeoutMs, `ft-run ${args.join(' ')}`);
}

/**
 * The line --dry-run should print for `ranks` ranks, `slots` slots and ft-train's `trainArgs`;
 * `binding` by default that of one thread per rank: a second core for each rank's comm thread
 * where the slots allow, else mpirun's own ('' for none).
 */
function expectedLine(
  ranks: number,
  slots: number,
  detector: string,
  trainArgs: string,
  hostfile?: string,
  binding = 2 * ranks <= slots ? '--map-by slot:PE=2' : ranks > slots ? '--bind-to core:overload-allowed' : '',
): string {
  return (
    [
      ...(process.getuid?.() === 0 ? ['OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1'] : []),
      `env --block-signal=TERM ${mpiHome}/bin/mpirun --with-ft ulfm`,
      ...(ranks > slots ? ['--oversubscribe'] : []),
      `-n ${ranks}`,
      ...(hostfile ? [`--hostfile ${hostfile}`] : []),
      ...(binding ? [binding] : []),
      `--prefix ${mpiHome} --mca coll '^han' --mca mpi_add_procs_cutoff 1024 --mca mpi_ft_propagator_with_rbcast true -x FT_RUN_JOB -x FT_TEST_JOB -x FT_BENCH_JOB`,
      '--mca coll_libnbc_iallreduce_algorithm ring --mca mpi_event_tick_rate 1000',
      detector,
      process.execPath,
      '--single-threaded-gc',
      ftTrain,
      trainArgs,
    ].join(' ') + '\n'
  );
}

const detector30 =
  '--mca mpi_ft_detector true --mca mpi_ft_detector_thread false --mca mpi_ft_detector_period 7.5 --mca mpi_ft_detector_timeout 30';

/** A hostfile of one host with `slots` slots. */
function hostfileOf(slots: number): string {
  const file = path.join(scratch, `hosts-${slots}`);
  fs.writeFileSync(file, `localhost slots=${slots}\n`);
  return file;
}

describe('launch/ft-run', function () {
  this.timeout(120_000);
  after(() => removeScratch(scratch));

  describe('--dry-run', () => {
    const flags = [...trainFlags, '--run-dir', 'runs/a b'];
    const quoted = "--model models/mlp.json --data datasets/fashion-mnist --run-dir 'runs/a b'";

    for (const ranks of [2, 8]) {
      it(`-n ${ranks}: oversubscribes only past os.availableParallelism() (${os.availableParallelism()}) slots`, async () => {
        const job = await launch(['-n', String(ranks), '--dry-run', '--', ...flags]);
        assert.equal(job.stderr, '');
        assert.equal(job.code, 0);
        assert.equal(job.stdout, expectedLine(ranks, os.availableParallelism(), detector30, quoted));
      });
    }

    it('with a hostfile, the slots are the sum of its slots=K (a host without counts 1), and ranks are dealt to the hosts in turn', async () => {
      const hostfile = path.join(scratch, 'hosts');
      fs.writeFileSync(hostfile, '# two nodes and a small one\nnode1 slots=4 max_slots=8\n\nnode2   slots=3  # comment\nnode3\n');
      for (const ranks of [4, 6, 8, 9]) {
        const job = await launch(['-n', String(ranks), '--hostfile', hostfile, '--dry-run', '--', ...flags]);
        assert.equal(job.code, 0, job.stderr);
        const binding =
          ranks === 4 ? '--map-by node:PE=2' : ranks === 9 ? '--map-by node --bind-to core:overload-allowed' : '--map-by node';
        assert.equal(job.stdout, expectedLine(ranks, 8, detector30, quoted, hostfile, binding));
        assert.equal(job.stdout.includes('--oversubscribe'), ranks === 9);
      }
    });

    it("inside a Slurm allocation: its nodes and slots (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), no hostfile, ranks dealt to the nodes in turn, srun's steps allowed to overlap, its daemons started with SIGTERM blocked", async () => {
      const slurm = { ...process.env, SLURM_JOB_ID: '77', SLURM_JOB_NODELIST: 'node[1-2],big', SLURM_TASKS_PER_NODE: '2(x2),4' };
      for (const [ranks, binding] of [
        [4, '--map-by node:PE=2'],
        [8, '--map-by node'],
      ] as const) {
        const job = await launch(['-n', String(ranks), '--dry-run', '--', ...flags], slurm);
        assert.equal(job.code, 0, job.stderr);
        const root = 'OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ';
        // its daemons, in a job step that Slurm's SIGTERM reaches, leave it to the ranks as mpirun does
        const line = expectedLine(ranks, 8, detector30, quoted, undefined, binding).replace(
          '-x FT_BENCH_JOB',
          "-x FT_BENCH_JOB --prtemca prte_launch_agent 'env --block-signal=TERM prted'",
        );
        assert.equal(job.stdout, process.getuid?.() === 0 ? line.replace(root, `${root}SLURM_OVERLAP=1 `) : `SLURM_OVERLAP=1 ${line}`);
      }
    });

    it("--ssh-config: mpirun's daemons are started with ssh -F FILE", async () => {
      const config = path.join(scratch, 'ssh config');
      fs.writeFileSync(config, 'Host *\n  User root\n');
      const job = await launch(['-n', '2', '--ssh-config', config, '--dry-run', '--', ...flags]);
      assert.equal(job.code, 0, job.stderr);
      assert.ok(
        job.stdout.includes(
          ` -x FT_BENCH_JOB --prtemca plm_ssh_agent 'ssh -F ${config}' --mca coll_libnbc_iallreduce_algorithm ring --mca mpi_event_tick_rate 1000 --mca mpi_ft_detector true `,
        ),
        job.stdout,
      );
    });

    /** --dry-run of `ranks` ranks on a hostfile of `slots` slots with ft-train's `flag value`: the line, with `binding`. */
    async function assertBinding(ranks: number, slots: number, flag: string, value: number, binding: string): Promise<void> {
      const job = await launch(['-n', String(ranks), '--hostfile', hostfileOf(slots), '--dry-run', '--', ...flags, flag, String(value)]);
      assert.equal(job.code, 0, job.stderr);
      assert.equal(job.stdout, expectedLine(ranks, slots, detector30, `${quoted} ${flag} ${value}`, hostfileOf(slots), binding));
    }

    it('--threads T: each rank gets T + 1 cores of its own (one for its comm thread), else T, where the slots allow, else the OS places its threads; ranks of one thread beyond the slots share cores', async () => {
      const slots = os.availableParallelism();
      const cases: [number, number, string][] = [
        [1, 1, slots >= 2 ? '--map-by slot:PE=2' : ''],
        [1, slots, `--map-by slot:PE=${slots}`],
        [2, slots, '--bind-to none'],
        [1, slots + 1, '--bind-to none'],
        [slots, 1, ''],
        [slots + 1, 1, '--bind-to core:overload-allowed'],
      ];
      for (const [ranks, threads, binding] of cases) await assertBinding(ranks, slots, '--threads', threads, binding);
    });

    it("with hot spares beyond the slots the ranks are left unbound: a spare takes a lost rank's place where the OS finds room, not on the core mpirun gave it", async () => {
      const slots = os.availableParallelism();
      const cases: [number, number, string][] = [
        [slots + 1, 1, '--bind-to none'],
        [slots + 2, 0, '--bind-to core:overload-allowed'],
        [slots, 1, ''],
      ];
      for (const [ranks, spares, binding] of cases) await assertBinding(ranks, slots, '--spares', spares, binding);
    });

    it("the hang detector follows ft-train's last --hang-timeout", async () => {
      const job = await launch(['-n', '1', '--dry-run', '--', ...flags, '--hang-timeout', '7', '--hang-timeout=2']);
      assert.equal(job.code, 0, job.stderr);
      assert.equal(
        job.stdout,
        expectedLine(
          1,
          os.availableParallelism(),
          '--mca mpi_ft_detector true --mca mpi_ft_detector_thread false --mca mpi_ft_detector_period 0.5 --mca mpi_ft_detector_timeout 2',
          `${quoted} --hang-timeout 7 --hang-timeout=2`,
        ),
      );
    });
  });

  describe('refuses in one line, exit 2', () => {
    const refusals: [string, () => string[], string, NodeJS.ProcessEnv?][] = [
      [
        'a bad hostfile line',
        () => {
          const hostfile = path.join(scratch, 'bad-hosts');
          fs.writeFileSync(hostfile, 'node1 slots=2\nnode2 slots=two\n');
          return ['-n', '2', '--hostfile', hostfile, '--dry-run', '--', ...trainFlags, '--run-dir', 'runs/x'];
        },
        `ft-run: ${path.join(scratch, 'bad-hosts')}:2: expected "HOST [slots=K] [key=value ...]" with K an integer >= 1, got "node2 slots=two"`,
      ],
      [
        'an unreadable hostfile',
        () => ['-n', '2', '--hostfile', path.join(scratch, 'missing'), '--', ...trainFlags, '--run-dir', 'runs/x'],
        `ft-run: ${path.join(scratch, 'missing')}: cannot read the hostfile (ENOENT)`,
      ],
      [
        'a missing --ssh-config',
        () => ['-n', '2', '--ssh-config', path.join(scratch, 'no-config'), '--', ...trainFlags, '--run-dir', 'runs/x'],
        `ft-run: --ssh-config ${path.join(scratch, 'no-config')}: no such file`,
      ],
      [
        'a bad --hang-timeout',
        () => ['-n', '2', '--', ...trainFlags, '--run-dir', 'runs/x', '--hang-timeout', '0'],
        'ft-run: --hang-timeout expects seconds > 0, got "0"',
      ],
      [
        'no --run-dir',
        () => ['-n', '2', '--', ...trainFlags],
        'ft-run: the ft-train flags need --run-dir DIR (its summary.json tells whether the run finished)',
      ],
      [
        'a Slurm allocation too small for -n',
        () => ['-n', '7', '--', ...trainFlags, '--run-dir', 'runs/x'],
        'ft-run: the Slurm allocation (job 77) has 6 slot(s) on 3 node(s) (n01: 2, n02: 2, n03: 2), fewer than -n 7',
        { ...process.env, SLURM_JOB_ID: '77', SLURM_JOB_NODELIST: 'n[01-03]', SLURM_TASKS_PER_NODE: '2(x3)' },
      ],
      [
        'a malformed Slurm node list',
        () => ['-n', '2', '--', ...trainFlags, '--run-dir', 'runs/x'],
        'ft-run: SLURM_JOB_NODELIST "n[01-03": cannot read "n[01-03"',
        { ...process.env, SLURM_JOB_ID: '77', SLURM_JOB_NODELIST: 'n[01-03', SLURM_TASKS_PER_NODE: '2(x3)' },
      ],
      [
        'a Slurm job without its node list',
        () => ['-n', '2', '--', ...trainFlags, '--run-dir', 'runs/x'],
        'ft-run: SLURM_JOB_ID is set (77) but SLURM_JOB_NODELIST or SLURM_TASKS_PER_NODE is not: run inside an allocation (sbatch, salloc), or unset SLURM_JOB_ID',
        { ...process.env, SLURM_JOB_ID: '77', SLURM_JOB_NODELIST: undefined, SLURM_NODELIST: undefined, SLURM_TASKS_PER_NODE: '2' },
      ],
      [
        'Slurm node and task counts that disagree',
        () => ['-n', '2', '--', ...trainFlags, '--run-dir', 'runs/x'],
        'ft-run: SLURM_JOB_NODELIST names 3 node(s) but SLURM_TASKS_PER_NODE "2(x2)" counts 2',
        { ...process.env, SLURM_JOB_ID: '77', SLURM_JOB_NODELIST: 'n[1-3]', SLURM_TASKS_PER_NODE: '2(x2)' },
      ],
      [
        'a bad --max-restarts',
        () => ['-n', '2', '--max-restarts', '-1', '--', ...trainFlags, '--run-dir', 'runs/x'],
        'ft-run: --max-restarts expects an integer >= 0, got -1',
      ],
      [
        '--max-restarts with --on-failure none',
        () => ['-n', '2', '--max-restarts', '2', '--', ...trainFlags, '--run-dir', 'runs/x', '--on-failure', 'none'],
        'ft-run: --max-restarts with --on-failure none: none is the overhead baseline, whose job ends at a failure by design; choose exact or shrink to restart',
      ],
      [
        'no Open MPI with ULFM',
        () => ['-n', '2', '--dry-run', '--', ...trainFlags, '--run-dir', 'runs/x'],
        'ft-run: /nonexistent/bin/ompi_info does not run: no Open MPI with ULFM in /nonexistent; launch/setup builds one (or set FT_MPI_HOME)',
        { ...process.env, FT_MPI_HOME: '/nonexistent' },
      ],
    ];
    for (const [what, args, line, env] of refusals) {
      it(what, async () => {
        const job = await launch(args(), env);
        assert.deepEqual([job.code, job.stdout, job.stderr], [2, '', `${line}\n`]);
      });
    }
  });

  describe('real jobs', () => {
    it('a 2-rank run that finishes: exit 0 and a complete summary.json', async () => {
      const runDir = path.join(scratch, 'done');
      const job = await launch(['-n', '2', '--', ...trainFlags, '--run-dir', runDir, '--steps', '5'], process.env, 90_000);
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      const summary = JSON.parse(fs.readFileSync(path.join(runDir, 'summary.json'), 'utf8')) as { status: string; steps: number };
      assert.deepEqual([summary.status, summary.steps], ['complete', 5]);
    });

    it('every rank killed: mpirun exits 0, ft-run exits 1 with one line', async () => {
      const runDir = path.join(scratch, 'killed');
      const job = await launch(
        ['-n', '2', '--', ...trainFlags, '--run-dir', runDir, '--steps', '5', '--drill', 'rank=0,step=2', '--drill', 'rank=1,step=2'],
        process.env,
        90_000,
      );
      assert.equal(job.code, 1, `${job.stdout}\n${job.stderr}`);
      assert.equal(
        job.stderr.trimEnd().split('\n').at(-1),
        `ft-run: the job ended without finishing: no summary.json in ${runDir} (mpirun exit 0); no complete checkpoint to go back to`,
        job.stderr,
      );
      assert.ok(!fs.existsSync(path.join(runDir, 'summary.json')));
    });

    it('every rank stopped (SIGSTOP): no rank is left to declare them dead, so ft-run kills them past the start-up and comm deadlines (16 s at T = 2), its line, exit 1, nothing left', async () => {
      const runDir = path.join(scratch, 'every-rank-stopped');
      const drills = ['--drill', 'rank=0,step=2,action=stop', '--drill', 'rank=1,step=2,action=stop'];
      const job = await launch(
        ['-n', '2', '--', ...trainFlags, '--run-dir', runDir, '--steps', '5', '--hang-timeout', '2', ...drills],
        process.env,
        90_000,
      );
      assert.equal(job.code, 1, `${job.stdout}\n${job.stderr}`);
      // one line, or one per look where the two stops fell on either side of one (either first)
      const killed = [
        ...job.stderr.matchAll(
          /^ft-run: rank\(s\) ([\d, ]+) stopped \(SIGSTOP\? a debugger\?\) and not scheduled once for 16 s, past the job's own deadlines: killed them as hung$/gm,
        ),
      ];
      assert.deepEqual(
        killed.flatMap((line) => line[1].split(', ').map(Number)).sort((a, b) => a - b),
        [0, 1],
        job.stderr,
      );
      assert.equal(
        job.stderr.trimEnd().split('\n').at(-1),
        `ft-run: the job ended without finishing: no summary.json in ${runDir} (mpirun exit 0); no complete checkpoint to go back to`,
      );
      assert.equal(job.stragglers, 0);
    });

    it('--max-restarts 1, every rank killed before any checkpoint: no restart, one line, exit 1', async () => {
      const runDir = path.join(scratch, 'killed-no-checkpoint');
      const job = await launch(
        [
          '-n',
          '2',
          '--max-restarts',
          '1',
          '--',
          ...trainFlags,
          '--run-dir',
          runDir,
          '--steps',
          '5',
          '--drill',
          'rank=0,step=2',
          '--drill',
          'rank=1,step=2',
        ],
        process.env,
        90_000,
      );
      assert.equal(job.code, 1, `${job.stdout}\n${job.stderr}`);
      assert.deepEqual(
        job.stderr.split('\n').filter((line) => line.startsWith('ft-run: ')),
        [
          `ft-run: the job ended without finishing: no summary.json in ${runDir} (mpirun exit 0); cannot restart: ${runDir}/ckpt: no complete checkpoint`,
        ],
      );
    });

    it("--max-restarts 1, ft-train's input refused: its line alone (no line of ft-run's, no restart), exit 2", async () => {
      const runDir = path.join(scratch, 'refused');
      const job = await launch(
        ['-n', '2', '--max-restarts', '1', '--', ...trainFlags, '--run-dir', runDir, '--min-ranks', '3'],
        process.env,
        60_000,
      );
      assert.equal(job.code, 2, `${job.stdout}\n${job.stderr}`);
      assert.deepEqual(
        job.stderr.split('\n').filter((line) => /^ft-(run|train): /.test(line)),
        ['ft-train: --min-ranks 3 is above the world size 2'],
      );
    });

    const summaryOf = (dir: string) => JSON.parse(fs.readFileSync(path.join(dir, 'summary.json'), 'utf8')) as { params_sha256: string };
    const common = [...trainFlags, '--steps', '12', '--shards', '4'];
    let referenceRun: Promise<string> | undefined;
    /** The run directory of `common` without failure (on 4 ranks), run once. */
    const reference = (): Promise<string> =>
      (referenceRun ??= (async () => {
        const dir = path.join(scratch, 'restart-reference');
        assert.equal((await launch(['-n', '4', '--', ...common, '--run-dir', dir], process.env, 120_000)).code, 0);
        return dir;
      })());

    it('--max-restarts 1, a job resumed into a new run directory, every rank killed before it wrote a checkpoint of its own: it restarts from the one it resumed from, to the same bits', async () => {
      const killedAt6 = ['--drill', 'rank=0,step=6', '--drill', 'rank=1,step=6'];
      const first = path.join(scratch, 'resumed-from');
      const ended = await launch(
        ['-n', '2', '--', ...common, '--run-dir', first, '--checkpoint-every', '4', ...killedAt6],
        process.env,
        120_000,
      );
      assert.equal(ended.code, 1, `${ended.stdout}\n${ended.stderr}`);
      const source = path.join(first, 'ckpt', 'step-00000004');
      assert.equal(
        ended.stderr.trimEnd().split('\n').at(-1),
        `ft-run: the job ended without finishing: no summary.json in ${first} (mpirun exit 0); the newest complete checkpoint is ${source} (continue with --resume ${source})`,
      );
      const runDir = path.join(scratch, 'resumed-restarted');
      const job = await launch(
        ['-n', '2', '--max-restarts', '1', '--', ...common, '--run-dir', runDir, '--resume', first, ...killedAt6],
        process.env,
        180_000,
      );
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      assert.deepEqual(
        job.stderr.split('\n').filter((line) => line.startsWith('ft-run: ')),
        [
          `ft-run: the job ended without finishing: no summary.json in ${runDir} (mpirun exit 0); restart 1 of 1: resuming from ${source} (step 4) on 2 rank(s)`,
        ],
      );
      assert.ok(!fs.existsSync(path.join(runDir, 'ckpt', 'step-00000004')));
      assert.equal(summaryOf(runDir).params_sha256, summaryOf(await reference()).params_sha256);
    });

    it('--max-restarts 2: a job stopped below --min-ranks restarts from its checkpoint without the drill that fired, twice, ends with the bits of a run without failure, and the report counts the restarts', async () => {
      const runDir = path.join(scratch, 'restarted');
      const job = await launch(
        [
          '-n',
          '4',
          '--max-restarts',
          '2',
          '--',
          ...common,
          '--run-dir',
          runDir,
          '--min-ranks',
          '4',
          '--drill',
          'rank=2,step=5',
          '--drill',
          'rank=1,step=9',
        ],
        process.env,
        240_000,
      );
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      const checkpoint = (step: number) => path.join(runDir, 'ckpt', `step-0000000${step}`);
      // the drill at step 5 fired in the first job, the one at step 9 in the second: two restarts
      assert.deepEqual(
        job.stderr.split('\n').filter((line) => line.startsWith('ft-run: ')),
        [5, 9].map(
          (step, i) =>
            `ft-run: mpirun exited 3 and the run did not finish: no summary.json in ${runDir}; restart ${i + 1} of 2: resuming from ${checkpoint(step)} (step ${step}) on 4 rank(s)`,
        ),
      );
      assert.equal(summaryOf(runDir).params_sha256, summaryOf(await reference()).params_sha256);
      const events = fs
        .readFileSync(path.join(runDir, 'events.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.deepEqual(
        events.filter((e) => e.event === 'restart').map(({ time, ...e }) => (assert.equal(typeof time, 'number'), e)),
        [5, 9].map((step, i) => ({
          event: 'restart',
          step,
          restart: i + 1,
          max_restarts: 2,
          checkpoint: checkpoint(step),
          last_step: step - 1,
          world: 4,
          unreachable: [],
          exit: 3,
        })),
      );
      // each restart's job started once, from its checkpoint
      assert.deepEqual(
        events.filter((e) => e.event === 'resume').map((e) => e.step),
        [5, 9],
      );
      // the report marks both as resumes (neither redid a step) and counts their cost
      const run = readRun(runDir);
      assert.deepEqual(run.resumes, [5, 9]);
      assert.deepEqual(
        run.restarts.map((r) => [r.step, r.costMs! > 0]),
        [
          [5, true],
          [9, true],
        ],
      );
      const report = path.join(scratch, 'restarted.html');
      const reported = await runCommand(
        process.execPath,
        [path.join(repoRoot, 'launch', 'ft-report.js'), runDir, '-o', report],
        process.env,
        60_000,
        'ft-report',
      );
      assert.equal(reported.code, 0, reported.stderr);
      assert.match(
        fs.readFileSync(report, 'utf8'),
        /Restarts \(launch\/ft-run --max-restarts[^<]*: restarted: 2 restarts, [\d.]+ (?:ms|s) each on average/,
      );

      // a restart across hosts takes those that answer over ssh, with as many ranks as their slots allow
      const hostfile = path.join(scratch, 'restart-hosts');
      fs.writeFileSync(hostfile, 'localhost slots=2\nno-such-host.invalid slots=3\n');
      const ended = {
        runDir,
        checkpointDir: path.join(runDir, 'ckpt'),
        metricsFrom: 0,
        logsFrom: new Map<string, number>(),
        ranks: 4,
        hostfile,
        number: 7,
      };
      const planned = await planRestart({ ...ended, trainArgs: [...common, '--run-dir', runDir] });
      assert.deepEqual(
        { ...planned, hostfile: fs.readFileSync(planned.hostfile!, 'utf8') },
        {
          checkpoint: checkpoint(9),
          step: 9,
          lastStep: 11,
          ranks: 2,
          hostfile: 'localhost slots=2\n',
          unreachable: ['no-such-host.invalid'],
          trainArgs: [...common, '--run-dir', runDir, '--resume', checkpoint(9)],
        },
      );
      fs.rmSync(planned.hostfile!);
      // a job that committed no step of its own (its lines start past the earlier jobs'): no last step
      const none = await planRestart({
        ...ended,
        metricsFrom: fs.statSync(path.join(runDir, 'metrics.jsonl')).size,
        trainArgs: [...common, '--run-dir', runDir],
      });
      fs.rmSync(none.hostfile!);
      assert.equal(none.lastStep, undefined);
      await assert.rejects(
        planRestart({ ...ended, trainArgs: [...common, '--run-dir', runDir, '--min-ranks', '3'] }),
        (error: Error) =>
          error instanceof NoRestart &&
          error.message === 'the hosts that answer have room for 2 rank(s), below --min-ranks 3 (no-such-host.invalid did not answer)',
      );
      // a refused restart leaves no hostfile behind
      assert.equal(fs.existsSync(path.join(os.tmpdir(), `ft-run-${process.pid}-restart-7.hosts`)), false);
    });

    /**
     * `launch(args)` for a job that trains until stopped: once `file` in its run directory holds
     * `text`, ft-run gets a SIGTERM. The job's result, and its stop events.
     */
    async function stopOnceWritten(
      runDir: string,
      args: string[],
      file: string,
      text: string,
      to: StopTarget = 'ft-run',
    ): Promise<{ job: JobResult<never>; stops: { reason?: string; checkpoint?: string; spawned_given_up?: number[] }[] }> {
      const running = launch(['-n', '2', '--', ...trainFlags, '--run-dir', runDir, '--steps', '1000000', ...args], process.env, 90_000);
      const job = await stopOnceWrittenAt(running, runDir, file, text, to);
      const stops = fs
        .readFileSync(path.join(runDir, 'events.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { event: string; reason?: string; checkpoint?: string; spawned_given_up?: number[] })
        .filter((e) => e.event === 'stop');
      assert.ok(!fs.existsSync(path.join(runDir, 'summary.json')));
      return { job, stops };
    }

    it('SIGTERM to ft-run: the ranks checkpoint and stop cleanly, exit 0', async () => {
      const { job, stops } = await stopOnceWritten(path.join(scratch, 'stopped'), [], 'metrics.jsonl', '\n');
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      assert.ok(job.stderr.includes('ft-run: SIGTERM: asked 2 rank(s) to checkpoint and stop'), job.stderr);
      assert.deepEqual(
        stops.map((e) => e.reason),
        ['sigterm'],
      );
    });

    it("SIGTERM to every process of the job at once, as a scheduler's stop sends it (Slurm's requeue, preemption, time limit): mpirun leaves it to the ranks, which checkpoint and stop cleanly, exit 0", async () => {
      // rank 0 computes 1,000 times slower from step 3 (its milliseconds there last seconds), and
      // the signal comes once step 2 is recorded: the ranks stop at step 3's end, long after
      // PRRTE's own answer to the signal, were its SIGTERM not blocked, killed them (SIGCONT,
      // SIGTERM, SIGKILL within 500 ms)
      const dir = path.join(scratch, 'stopped-all');
      const slow = ['--drill', 'rank=0,step=3,action=slow,factor=1000'];
      const { job, stops } = await stopOnceWritten(dir, slow, 'metrics.jsonl', '{"step":2,', 'every process');
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      assert.match(job.stderr, /ft-run: SIGTERM: asked 2 rank\(s\) to checkpoint and stop/);
      assert.deepEqual(
        stops.map((e) => e.reason),
        ['sigterm'],
      );
      assert.ok(fs.existsSync(path.join(stops[0].checkpoint!, 'manifest.json')), `no checkpoint at ${stops[0].checkpoint}`);
    });

    it('--respawn (joining once ready): a newcomer stopped before its MPI runs is given up at the start-up bound after its launch, 12 s at T = 4, not half the comm deadline (6 s); the next one joins', async () => {
      // T = 4, not less: the watchdog of a rank that a loaded machine leaves unscheduled for T kills it
      const { job } = await stopOnceWritten(
        path.join(scratch, 'slow-newcomer'),
        ['--respawn', '--hang-timeout', '4', '--drill', 'rank=1,step=3', '--drill', 'rank=2,step=3,phase=startup,action=stop'],
        'events.jsonl',
        '"event":"join"',
      );
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      const events = fs
        .readFileSync(path.join(scratch, 'slow-newcomer', 'events.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { event: string; time: number; ranks?: number[] });
      const of = (name: string) => events.filter((e) => e.event === name).map((e) => ({ time: e.time, ranks: e.ranks }));
      const [spawn, respawn] = of('spawn');
      const [lost] = of('spawn-lost');
      assert.deepEqual([spawn.ranks, lost.ranks, respawn.ranks, of('join')[0].ranks], [[2], [2], [3], [3]]);
      // given up at the first vote past the bound: the training goes on meanwhile, a step at a time
      assert.ok(
        lost.time - spawn.time >= 11_900 && lost.time - spawn.time < 17_000,
        `given up ${lost.time - spawn.time} ms after the spawn`,
      );
      assert.match(job.stdout, /step \d+: spawned rank\(s\) 2 lost before joining \(died, or not ready within 12 s\); spawning again/);
    });

    it('SIGTERM to ft-run while a --respawn newcomer has not joined: the stop gives it up and names it, mpirun counts its death, ft-run exits 0 with one line', async () => {
      // rank 1 killed at step 3; its newcomer, rank 2, stopped before it is ready: given up only
      // at the start-up bound (12 s) after its spawn, unless the stop comes first
      const newcomerStopped = [
        '--respawn',
        '--hang-timeout',
        '4',
        '--drill',
        'rank=1,step=3',
        '--drill',
        'rank=2,step=3,phase=ready,action=stop',
      ];
      const { job, stops } = await stopOnceWritten(
        path.join(scratch, 'stopped-newcomer'),
        newcomerStopped,
        'events.jsonl',
        '"event":"spawn"',
      );
      assert.equal(job.code, 0, `${job.stdout}\n${job.stderr}`);
      assert.deepEqual(
        stops.map((e) => [e.reason, e.spawned_given_up]),
        [['sigterm', [2]]],
      );
      assert.match(
        job.stderr,
        /^ft-run: mpirun exited \d+ \(it counts the --respawn rank\(s\) 2, given up at the stop, against the job\), but the ranks stopped cleanly on the SIGTERM asked for: exit 0$/m,
      );
    });
  });
});
