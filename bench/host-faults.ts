// What the faults that only happen across hosts cost, on 3 test hosts of 2 ranks (launch/netns-hosts;
// needs root and sshd), launch/ft-run on host1, lenet, exact mode. Each fault is a drill point
// (deterministic step; its time is the drill's note in the rank's log):
// - every rank of host2 killed: to the first step committed without them (host_ranks_loss_to_step_ms);
// - host3's link taken down (--hang-timeout 2): to the first step committed without host3
//   (partition_to_step_ms; the detector needs the hang timeout to declare the cut ranks dead);
// - host2 lost with its daemon: PRRTE 3.0.8 ends the job, so to the job's end (ft-run's exit), with
//   the newest complete checkpoint's step (daemon_loss_to_clean_stop_ms, daemon_loss_checkpoint_step).
// bench/recovery runs it and prints the fields in its JSON line; the hosts come and go through
// test/helpers/hosts.ts, as in the multi-host tests.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { findCheckpoint } from '../src/checkpoint/checkpoint';
import { killJobProcesses } from '../src/cli/job-processes';
import { readLines } from '../src/run/reader';
import { hostsDown, hostsUp, type Hosts } from '../test/helpers/hosts';
import { median } from '../src/base/median';

const root = path.resolve(__dirname, '..', '..');
export const partitionHangTimeoutS = 2;
const faultStep = 10;
let jobs = 0;

/** Runs ft-run on host1 over the three hosts; the time it returned. Kills whatever of the job outlives it. */
function ftRun(hosts: Hosts, runDir: string, extra: string[]): number {
  const job = `${process.pid}-host-${++jobs}`;
  const [command, ...on] = hosts.on('host1');
  const argv = [
    ...on,
    process.execPath,
    path.join(root, 'launch', 'ft-run'),
    '-n',
    '6',
    '--hostfile',
    hosts.hostfile,
    '--ssh-config',
    hosts.sshConfig,
    '--',
    '--model',
    'models/lenet.json',
    '--data',
    'datasets/fashion-mnist',
    '--shards',
    '6',
    '--steps',
    '30',
    '--run-dir',
    runDir,
    ...extra,
  ];
  spawnSync(command, argv, { cwd: root, encoding: 'utf8', timeout: 300_000, env: { ...process.env, FT_BENCH_JOB: job } });
  const ended = Date.now();
  killJobProcesses(`FT_BENCH_JOB=${job}`);
  return ended;
}

/** When rank `rank`'s drill fired (its note in the rank's log). */
function drillTime(runDir: string, rank: number): number {
  const note = fs
    .readFileSync(path.join(runDir, 'logs', `rank-${rank}.log`), 'utf8')
    .split('\n')
    .find((line) => line.includes(' drill: '));
  if (note === undefined) throw new Error(`${runDir}: rank ${rank} has no drill note`);
  return Date.parse(note.slice(0, note.indexOf(' ')));
}

/** From the drill to the first step committed on fewer than 6 ranks, without the JIT checkpoint's write. */
function toStep(runDir: string, rank: number): number {
  const read = (file: string) =>
    readLines(path.join(runDir, file)).map(({ value }) => value as { world?: number; time: number; event?: string; duration_ms?: number });
  const first = read('metrics.jsonl').find((m) => m.world! < 6);
  if (first === undefined) throw new Error(`${runDir}: no step committed without the lost host`);
  const checkpoint = read('events.jsonl').find((e) => e.event === 'checkpoint')?.duration_ms ?? 0;
  return first.time - drillTime(runDir, rank) - checkpoint;
}

export function hostFaults(scratch: string, rounds: number): Record<string, number> {
  const hosts = hostsUp(3);
  const ranksLoss: number[] = [];
  const partition: number[] = [];
  const daemonLoss: number[] = [];
  const checkpointSteps: number[] = [];
  try {
    for (let round = 1; round <= rounds; ++round) {
      process.stderr.write(`[bench] 3 hosts of 2 ranks, round ${round}/${rounds}: host's ranks killed ...`);
      let dir = path.join(scratch, `hosts-ranks-${round}`);
      ftRun(hosts, dir, ['--drill', `rank=1,step=${faultStep}`, '--drill', `rank=4,step=${faultStep}`]);
      ranksLoss.push(toStep(dir, 1));
      process.stderr.write(' link cut ...');
      dir = path.join(scratch, `hosts-cut-${round}`);
      ftRun(hosts, dir, ['--hang-timeout', String(partitionHangTimeoutS), '--drill', `rank=2,step=${faultStep},action=cut`]);
      hosts.mend('host3');
      partition.push(toStep(dir, 2));
      process.stderr.write(' host lost with its daemon ...');
      dir = path.join(scratch, `hosts-daemon-${round}`);
      const ended = ftRun(hosts, dir, ['--checkpoint-every', '4', '--drill', `rank=1,step=${faultStep},action=host`]);
      daemonLoss.push(ended - drillTime(dir, 1));
      checkpointSteps.push(findCheckpoint(path.join(dir, 'ckpt')).manifest.step);
      process.stderr.write(' done\n');
    }
  } finally {
    hostsDown();
  }
  const round1 = (ms: number[]) => Math.round(median(ms) * 10) / 10;
  return {
    host_ranks_loss_to_step_ms: round1(ranksLoss),
    partition_to_step_ms: round1(partition),
    partition_hang_timeout_ms: partitionHangTimeoutS * 1000,
    daemon_loss_to_clean_stop_ms: round1(daemonLoss),
    // faultStep when the survivors' JIT checkpoint beat PRRTE's SIGKILL, else the periodic one before
    daemon_loss_checkpoint_step: Math.min(...checkpointSteps),
  };
}
