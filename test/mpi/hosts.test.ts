// Jobs across hosts: three test hosts (launch/netns-hosts: network namespaces with sshd), 6 ranks,
// 2 per host (dealt in turn: host1 has ranks 0 and 3), started by launch/ft-run on host1 over ssh as on
// a cluster. Every rank of one host
// killed: the other hosts carry on with the bits of the run without failure and read back only the
// lost shards. The whole host lost, its daemon too: PRRTE 3.0.8 ends the job, after the survivors'
// JIT checkpoint, and --resume on the hosts left gives the same bits. A host cut off the network:
// the majority carries on with the same bits, the cut-off side stops without writing, mpirun ends.
// host1, where mpirun runs, cut off with --respawn: the far side cannot spawn (that needs mpirun),
// loses two leaders to it, turns respawn off and finishes with the same bits; no rank left running.
// A host cut off while the job starts: a bounded end, where mpirun alone would wait for good.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { verifyCheckpoint } from '../../src/checkpoint/checkpoint';
import { readPidFile } from '../../src/run/pids';
import type { EventRecord, StepRecord } from '../../src/run/records';
import { hostsDown, hostsUnavailable, hostsUp, type Hosts } from '../helpers/hosts';
import { fewTestSamples, lenetOnFashion, repoRoot, runCommand, runTrain } from '../helpers/mpi-job';
import { readbackBytes } from '../helpers/readback';
import { lines, summaryOf, type Run } from '../helpers/runs';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-hosts-');
// --rebalance off: the tests count the bytes a recovery reads back, and ranks sharing 2 cores can be
// measured slow and given shards to read
const common = [...lenetOnFashion, '--steps', '12', '--batch', '64', '--shards', '6', '--rebalance', 'off', ...fewTestSamples];
let runs = 0;

describe('across hosts (network namespaces with sshd)', function () {
  this.timeout(600_000);
  let hosts: Hosts;
  let reference: string;

  /** launch/ft-run on host1 with `hostfile` (default: the three hosts). */
  async function ftRun(ranks: number, extra: string[], hostfile = hosts.hostfile): Promise<Run> {
    const dir = path.join(scratch, `run-${++runs}`);
    const argv = [
      ...hosts.on('host1').slice(1),
      process.execPath,
      path.join(repoRoot, 'launch', 'ft-run'),
      '-n',
      String(ranks),
      '--hostfile',
      hostfile,
      '--ssh-config',
      hosts.sshConfig,
      '--',
      ...common,
      '--run-dir',
      dir,
      ...extra,
    ];
    const job = await runCommand(hosts.on('host1')[0], argv, process.env, 240_000, `ft-run -n ${ranks} across hosts ${extra.join(' ')}`);
    return { dir, ...job };
  }

  before(async function () {
    const why = hostsUnavailable();
    if (why !== undefined) {
      console.log(`    skipped: multi-host tests need root, ip and sshd: ${why}`);
      this.skip();
    }
    hosts = hostsUp(3);
    const single = await runTrain(6, [...common, '--run-dir', path.join(scratch, 'single-host')], 150_000);
    reference = summaryOf({ dir: path.join(scratch, 'single-host'), ...single }).params_sha256;
  });

  after(() => {
    if (hosts !== undefined) hostsDown();
    removeScratch(scratch);
  });

  it('6 ranks on 3 hosts, 2 each, dealt to the hosts in turn: the bits of the single-host run', async () => {
    const run = await ftRun(6, []);
    assert.equal(summaryOf(run).params_sha256, reference);
    const placed = [0, 1, 2, 3, 4, 5].map((rank) => readPidFile(path.join(run.dir, 'pids'), rank)!.host);
    assert.deepEqual(placed, ['host1', 'host2', 'host3', 'host1', 'host2', 'host3']);
  });

  it('every rank of host2 killed: the other hosts carry on, read back only its shards, the same bits', async () => {
    // 30 steps: the lost shards' background pass must end before training does for the whole of
    // them to be read (at 12 steps, a loaded machine's survivors once finished first)
    const steps = ['--steps', '30'];
    const single = path.join(scratch, 'single-host-30');
    const fullLength = summaryOf({ dir: single, ...(await runTrain(6, [...common, ...steps, '--run-dir', single], 150_000)) });
    const run = await ftRun(6, [...steps, '--drill', 'rank=1,step=3', '--drill', 'rank=4,step=3']);
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, fullLength.params_sha256);
    assert.deepEqual(
      summary.failures.map((f) => [f.step, f.lost]),
      [[3, [1, 4]]],
    );
    assert.deepEqual(
      lines<StepRecord>(run, 'metrics.jsonl').map((r) => r.world),
      [6, 6, 6, ...Array(27).fill(4)],
    );
    const readback = lines<EventRecord>(run, 'events.jsonl').find((e) => e.event === 'readback')!;
    assert.deepEqual(readback.shards, [1, 4]);
    const expected = await readbackBytes(6, [1, 4], 3);
    assert.equal(readback.bytes_before_retry, expected.beforeRetry);
    assert.equal(summary.bytes_read_back, expected.total);
  });

  it('host2 lost with its daemon: PRRTE ends the job, a bounded stop with one line and a non-zero exit; --resume on host1 and host3 gives the same bits', async () => {
    const run = await ftRun(6, ['--checkpoint-every', '2', '--drill', 'rank=1,step=3,action=host']);
    assert.notEqual(run.code, 0, `${run.stdout}\n${run.stderr}`);
    assert.ok(!fs.existsSync(path.join(run.dir, 'summary.json')));
    const said = run.stderr.split('\n').filter((line) => line.startsWith('ft-run: '));
    assert.equal(said.length, 1, run.stderr);
    // the JIT checkpoint of step 3 when the survivors wrote it before PRRTE's SIGKILL, else the periodic one of step 2
    const named =
      /^ft-run: (?:mpirun ended the job \(exit \d+; it does so when it loses a host or its daemon\) and the ranks stopped cleanly;|mpirun exited \d+ and the run did not finish: .*;|the job ended without finishing: no summary\.json in \S+ \(mpirun exit 0\);) the newest complete checkpoint is (\S+\/ckpt\/step-0000000[23]) \(continue with --resume \1\)$/.exec(
        said[0],
      );
    assert.ok(named, said[0]);
    const checkpoint = named[1];
    assert.ok([2, 3].includes(verifyCheckpoint(checkpoint).step));

    const remaining = path.join(scratch, 'hosts-1-3');
    fs.writeFileSync(remaining, 'host1 slots=2\nhost3 slots=2\n');
    const resumed = await ftRun(4, ['--resume', checkpoint], remaining);
    assert.equal(summaryOf(resumed).params_sha256, reference);
  });

  it('host3 cut off the network: the majority carries on with the same bits, host3 stops without writing, mpirun ends', async () => {
    const run = await ftRun(6, ['--hang-timeout', '2', '--drill', 'rank=2,step=3,action=cut']).finally(() => hosts.mend('host3'));
    const summary = summaryOf(run);
    assert.equal(summary.params_sha256, reference);
    assert.deepEqual(
      summary.failures.map((f) => [f.step, f.lost]),
      [[3, [2, 5]]],
    );
    // one writer: every step once, in order
    assert.deepEqual(
      lines<StepRecord>(run, 'metrics.jsonl').map((r) => [r.step, r.world]),
      Array.from({ length: 12 }, (_, s) => [s, s < 3 ? 6 : 4]),
    );
    for (const rank of [2, 5]) {
      const log = fs.readFileSync(path.join(run.dir, 'logs', `rank-${rank}.log`), 'utf8');
      assert.match(
        log,
        /stop: minority: 2 rank\(s\) left of the last agreed world of 6, and 4 lost on hosts where no survivor can see them gone/,
      );
    }
    // once host3's ranks logged their stop, nothing more comes to the run directory: ft-run ends mpirun, which waits for host3's daemon
    assert.match(
      run.stderr,
      /ft-run: the run completed and the rank\(s\) it lost \(2, 5\) stopped as a minority, but mpirun has not ended \(it waits on a host it cannot reach\): ending it/,
    );
  });

  it('host3 cut off while the job starts: every side gives up at the start-up bound, the first records the stop, and ft-run ends mpirun (which waits on host3 for good): its lines, a non-zero exit, no rank left running', async () => {
    const run = await ftRun(6, ['--hang-timeout', '1', '--drill', 'rank=2,step=0,phase=startup,action=cut']).finally(() =>
      hosts.mend('host3'),
    );
    assert.notEqual(run.code, 0, run.stderr);
    // host1's and host2's lowest ranks each say so (host3's line cannot reach mpirun)
    const started = run.stderr.split('\n').filter((line) => line.startsWith('ft-train: '));
    assert.deepEqual(
      started.sort(),
      [0, 1].map(
        (rank) =>
          `ft-train: rank ${rank}: MPI start-up did not return within 10000 ms: a peer is alive but does not take part (a rank died or hung while starting)`,
      ),
    );
    assert.deepEqual(
      lines<EventRecord>(run, 'events.jsonl').map((e) => [e.event, e.step, e.reason]),
      [['stop', 0, 'startup']],
    );
    const said = run.stderr.split('\n').filter((line) => line.startsWith('ft-run: '));
    assert.deepEqual(said, [
      'ft-run: the run ended 19 s ago but mpirun has not (ranks on a host it cannot reach?): ending it',
      `ft-run: mpirun exited ${run.code} and the run did not finish: no summary.json in ${run.dir}; no complete checkpoint to go back to`,
    ]);
    for (const rank of [0, 1, 2, 3, 4, 5]) {
      const pid = readPidFile(path.join(run.dir, 'pids'), rank)!.pid;
      assert.throws(() => process.kill(pid, 0), /ESRCH/, `rank ${rank} (pid ${pid}) still runs`);
    }
  });

  it('host1, where mpirun runs, cut off with --respawn: its ranks stop as a minority; on the other side the leader cannot spawn (that needs mpirun), is killed as hung by a peer on its host, and so is the next, then respawn is off and the rest finish with the same bits; ft-run ends mpirun, exit 0, no rank left running', async () => {
    const run = await ftRun(6, ['--hang-timeout', '2', '--respawn', '--drill', 'rank=0,step=3,action=cut']).finally(() =>
      hosts.mend('host1'),
    );
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    assert.equal(summaryOf(run).params_sha256, reference);
    const log = (rank: number) => fs.readFileSync(path.join(run.dir, 'logs', `rank-${rank}.log`), 'utf8');
    for (const rank of [0, 3]) assert.match(log(rank), /stop: minority: 2 rank\(s\) left of the last agreed world of 6, and 4 lost/);
    // ranks 1 (host2) and 2 (host3) lead in turn, their spawns never return, and ranks 4 and 5 kill them
    assert.match(log(4), /step 3: killed rank\(s\) 1, declared dead while still running \(hung\)/);
    assert.match(log(5), /step 3: killed rank\(s\) 2, declared dead while still running \(hung\)/);
    // (in its log: its stdout went through mpirun, which cannot reach host2)
    assert.match(
      log(4),
      /step 3: cannot spawn a rank to replace the lost: the last 2 spawns each lost the rank that launched them \(the runtime unreachable\?\); going on with the survivors, --respawn off/,
    );
    const said = run.stderr.split('\n').filter((line) => line.startsWith('ft-run: '));
    assert.equal(said.length, 2, run.stderr);
    assert.equal(said[0], 'ft-run: the run ended 28 s ago but mpirun has not (ranks on a host it cannot reach?): ending it');
    assert.match(
      said[1],
      /^ft-run: mpirun exited \d+ \(it counts a --respawn rank that died or could not start, or a host it lost, against the job\), but the run completed: exit 0$/,
    );
    // the test hosts share this machine's processes: none of the job's ranks runs on
    for (const rank of [0, 1, 2, 3, 4, 5]) {
      const pid = readPidFile(path.join(run.dir, 'pids'), rank)!.pid;
      assert.throws(() => process.kill(pid, 0), /ESRCH/, `rank ${rank} (pid ${pid}) still runs`);
    }
  });
});
