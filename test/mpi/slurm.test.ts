// ft-train under Slurm: a real cluster on three test hosts (launch/netns-hosts, launch/slurm-hosts:
// munged, slurmctld on host1, a slurmd on each host), with the batch script users copy
// (examples/slurm/train.sbatch) submitted by sbatch. launch/ft-run takes the nodes and slots from
// the allocation and mpirun starts its daemons with srun: the bits of ft-run -n 6 on one host; every
// rank of one node killed: the same bits; a job Slurm requeues stops with a checkpoint and resumes
// from it, to the bits of a run never stopped; a node lost (its slurmd, the step's daemon and the
// ranks): ft-run restarts from the newest checkpoint on the nodes left, to the same bits.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readPidFile } from '../../src/run/pids';
import type { EventRecord } from '../../src/run/records';
import { hostsDown, hostsUnavailable, hostsUp, type Hosts } from '../helpers/hosts';
import { repoRoot, runCommand, runTrain } from '../helpers/mpi-job';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-slurm-');
const slurmHosts = path.join(repoRoot, 'launch', 'slurm-hosts');
const slurmConf = path.join(process.env.FT_SLURM_DIR ?? '/run/ft-slurm', 'slurm.conf');
const steps = 30;
let jobs = 0;

/** Why this machine cannot run the Slurm cluster, or undefined. */
function slurmUnavailable(): string | undefined {
  const hosts = hostsUnavailable();
  if (hosts !== undefined) return hosts;
  for (const daemon of ['/usr/sbin/slurmd', '/usr/sbin/slurmctld', '/usr/sbin/munged', '/usr/bin/sbatch'])
    if (!fs.existsSync(daemon)) return `no ${daemon} (launch/setup installs slurmctld, slurmd, slurm-client and munge)`;
  return undefined;
}

/** Runs a Slurm command on host1 (with the cluster's configuration); its output. */
function slurm(argv: string[]): string {
  const [command, ...on] = [path.join(repoRoot, 'launch', 'netns-hosts'), 'exec', 'host1'];
  const withConf = argv[0] === 'env' ? argv : ['env', `SLURM_CONF=${slurmConf}`, ...argv];
  return execFileSync(command, [...on, ...withConf], { cwd: repoRoot, encoding: 'utf8', timeout: 30_000 });
}

/** The state scontrol gives job `id` (PENDING, RUNNING, COMPLETED, ...); PURGED once slurmctld dropped its record (MinJobAge after its end). */
function jobState(id: string): string | undefined {
  try {
    return /JobState=(\w+)/.exec(slurm(['scontrol', 'show', 'job', id]))?.[1];
  } catch (error) {
    if (/Invalid job id/.test(String((error as { stderr?: string }).stderr))) return 'PURGED';
    throw error;
  }
}

/** The states a job ends in (and PURGED: ended, its record dropped). */
const ended = ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY', 'PURGED'];

/** Resolves once `ready()` holds, looking every 200 ms; rejects after `timeoutMs`. */
async function until(ready: () => boolean, timeoutMs: number, what: string): Promise<void> {
  for (const started = Date.now(); !ready(); await new Promise((r) => setTimeout(r, 200)))
    if (Date.now() - started > timeoutMs) throw new Error(`waited ${timeoutMs / 1000} s for ${what}`);
}

describe('under Slurm (slurmctld and slurmd on test hosts)', function () {
  this.timeout(600_000);
  let hosts: Hosts;
  let reference: string;

  /** sbatch of the example batch script on host1, waiting for the job's end; `extra`: ft-train flags it passes on. */
  async function sbatch(extra: string[]): Promise<Run & { output: string }> {
    const dir = path.join(scratch, `run-${++jobs}`);
    const output = `${dir}.out`;
    const [command, ...on] = hosts.on('host1');
    const argv = [
      ...on,
      'env',
      `SLURM_CONF=${slurmConf}`,
      `RUN_DIR=${dir}`,
      `STEPS=${steps}`,
      'sbatch',
      '--wait',
      '--quiet',
      `--output=${output}`,
      path.join(repoRoot, 'examples', 'slurm', 'train.sbatch'),
      ...extra,
    ];
    const job = await runCommand(command, argv, process.env, 300_000, `sbatch ${extra.join(' ')}`);
    const text = fs.existsSync(output) ? fs.readFileSync(output, 'latin1') : '';
    assert.equal(job.code, 0, `${job.stderr}\n${text}`);
    return { dir, ...job, stderr: text, output: text };
  }

  before(async function () {
    const why = slurmUnavailable();
    if (why !== undefined) {
      console.log(`    skipped: Slurm tests need root, sshd and Slurm's daemons: ${why}`);
      this.skip();
    }
    hosts = hostsUp(3);
    execFileSync(slurmHosts, ['up'], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60_000 });
    const single = await runTrain(
      6,
      [
        '--model',
        'models/lenet.json',
        '--data',
        'datasets/fashion-mnist',
        '--steps',
        String(steps),
        '--run-dir',
        path.join(scratch, 'single-host'),
      ],
      150_000,
    );
    reference = summaryOf({ dir: path.join(scratch, 'single-host'), ...single }).params_sha256;
  });

  after(() => {
    if (hosts !== undefined) {
      execFileSync(slurmHosts, ['down'], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60_000 });
      hostsDown();
    }
    removeScratch(scratch);
  });

  it('sbatch of examples/slurm/train.sbatch on 3 nodes: 2 ranks each, dealt to the nodes in turn, the bits of ft-run -n 6 on one host', async () => {
    const run = await sbatch([]);
    assert.equal(summaryOf(run).params_sha256, reference);
    const placed = [0, 1, 2, 3, 4, 5].map((rank) => readPidFile(path.join(run.dir, 'pids'), rank)!.host);
    assert.deepEqual(placed, ['host1', 'host2', 'host3', 'host1', 'host2', 'host3']);
  });

  it('every rank of one node killed: the job goes on on the other two with the same bits', async () => {
    const run = await sbatch(['--drill', 'rank=1,step=5', '--drill', 'rank=4,step=5']);
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference);
    assert.deepEqual(
      summary.failures.map((f) => [f.step, f.lost]),
      [[5, [1, 4]]],
    );
  });

  it('a job Slurm requeues (scontrol requeue: SIGTERM, then the job again) stops with a checkpoint and resumes from it into the same run directory, with the bits of a run never stopped', async () => {
    const longer = 150;
    const single = path.join(scratch, 'single-host-longer');
    const alone = await runTrain(
      6,
      ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--steps', String(longer), '--run-dir', single],
      150_000,
    );
    const dir = path.join(scratch, 'requeued');
    const output = `${dir}.out`;
    const env = [`SLURM_CONF=${slurmConf}`, `RUN_DIR=${dir}`, `STEPS=${longer}`];
    const id = slurm([
      'env',
      ...env,
      'sbatch',
      '--parsable',
      `--output=${output}`,
      path.join(repoRoot, 'examples', 'slurm', 'train.sbatch'),
      '--checkpoint-every',
      '10',
    ]).trim();
    // requeued once its first periodic checkpoint exists, well before its end
    await until(() => fs.existsSync(path.join(dir, 'ckpt', 'step-00000010', 'manifest.json')), 120_000, 'the first checkpoint');
    slurm(['scontrol', 'requeue', id]);
    // Slurm holds a requeued job back for a while: let it go at once
    await until(() => jobState(id) === 'PENDING', 60_000, 'the job pending again');
    slurm(['scontrol', 'update', `JobId=${id}`, 'StartTime=now']);
    // the record lasts MinJobAge (4 s) after the end: a poll late by that finds it gone, and the run
    // directory says how it ended
    let state: string | undefined;
    await until(() => ended.includes((state = jobState(id)) ?? ''), 240_000, 'the requeued job to end');
    const text = fs.readFileSync(output, 'latin1');
    assert.ok(state === 'COMPLETED' || state === 'PURGED', `the requeued job ended ${state}:\n${text}`);
    const run = { dir, code: 0, signal: null, stdout: '', stderr: text, results: [], stragglers: 0 };
    assert.equal(summaryOf(run).params_sha256, summaryOf({ dir: single, ...alone }).params_sha256);
    const events = lines<EventRecord>(run, 'events.jsonl');
    const stop = events.find((e) => e.event === 'stop');
    const resume = events.find((e) => e.event === 'resume');
    assert.equal(stop?.reason, 'sigterm', text);
    assert.equal(resume?.step, stop?.step, text);
    // Slurm signals the ranks too: ft-run asks those of its host still running, or finds them gone
    assert.match(
      text,
      /ft-run: SIGTERM: (asked 2 rank\(s\) to checkpoint and stop|no rank on this host left to ask \(they stop on the signal too\)); the job ends in 30 s at the latest/,
    );
  });

  it("a node lost (its slurmd, the step's daemon and its ranks) a step ahead of the leader's record: ft-run restarts from the newest checkpoint on the two nodes left, without the drill that fired, with the same bits", async () => {
    // the leader stopped in step 11's update, before it records the step: rank 1 on host2 goes on
    // and loses its node at step 12, which the records never reach (its drill's note says it fired)
    const run = await sbatch([
      '--checkpoint-every',
      '5',
      '--drill',
      'rank=0,step=11,phase=update,action=stop',
      '--drill',
      'rank=1,step=12,action=host',
    ]);
    assert.equal(summaryOf(run).params_sha256, reference);
    const said = run.output.split('\n').filter((line) => line.startsWith('ft-run: '));
    assert.equal(said.length, 1, run.output);
    assert.equal(
      said[0],
      `ft-run: the job ended without finishing: no summary.json in ${run.dir} (mpirun exit 0); restart 1 of 3: resuming from ${run.dir}/ckpt/step-00000010 (step 10) on 4 rank(s) (without host2, which did not answer)`,
    );
    const restarts = lines<EventRecord>(run, 'events.jsonl').filter((e) => e.event === 'restart');
    assert.deepEqual(
      restarts.map((e) => [e.step, e.last_step, e.world, e.unreachable]),
      [[10, 10, 4, ['host2']]],
    );
    const placed = [0, 1, 2, 3].map((rank) => readPidFile(path.join(run.dir, 'pids'), rank)!.host);
    assert.deepEqual(placed, ['host1', 'host3', 'host1', 'host3']);
  });
});
