// What the pid files let a rank, or launch/ft-run, do to others of its job on its host: kill one
// stopped for good (hung) but not one stopped and continued in turn (slowed), and mark a spawned
// rank given up for this job only, so that one which writes its pid file after the kill went out
// still learns of it.
import { strict as assert } from 'node:assert';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FrozenRanks } from '../../src/cli/frozen-ranks';
import { killStopped } from '../../src/liveness/hangs';
import { markGivenUp, processStat, wasGivenUp } from '../../src/run/pids';

/** A pid file for `pid` as its rank would write it. */
function writePidFile(pidsDir: string, rank: number, pid: number): void {
  fs.writeFileSync(path.join(pidsDir, String(rank)), `${pid} ${os.hostname()} ${processStat(pid)!.start}\n`);
}

function exited(child: ChildProcess): Promise<NodeJS.Signals | null> {
  return new Promise((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
}

describe('hung ranks and given-up ranks, by their pid files', () => {
  let pidsDir = '';
  const children: ChildProcess[] = [];

  beforeEach(() => {
    pidsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-pids-'));
  });

  afterEach(() => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    fs.rmSync(pidsDir, { recursive: true, force: true });
  });

  function sleeper(): ChildProcess {
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    children.push(child);
    return child;
  }

  it('a rank stopped for good is killed; a running one and one stopped and continued every 10 ms are not', async () => {
    const [hung, running, slowed] = [sleeper(), sleeper(), sleeper()];
    writePidFile(pidsDir, 0, hung.pid!);
    writePidFile(pidsDir, 1, running.pid!);
    writePidFile(pidsDir, 2, slowed.pid!);
    const toggler = spawn('bash', [
      '-c',
      'while kill -STOP "$1" 2>/dev/null; do sleep 0.008; kill -CONT "$1"; sleep 0.002; done',
      '_',
      String(slowed.pid),
    ]);
    children.push(toggler);
    const hungExit = exited(hung);
    hung.kill('SIGSTOP');
    // until the stop has taken (a busy machine delivers it later), and the toggler has stopped the
    // slowed one once: a look now may meet it stopped
    while (processStat(hung.pid!)?.state !== 'T') await new Promise((resolve) => setTimeout(resolve, 1));
    while (processStat(slowed.pid!)?.state !== 'T') await new Promise((resolve) => setTimeout(resolve, 1));
    assert.deepEqual(killStopped(pidsDir, [0, 1, 2]), [0]);
    assert.equal(await hungExit, 'SIGKILL');
    for (let look = 0; look < 5; ++look) assert.deepEqual(killStopped(pidsDir, [1, 2]), []);
    assert.notEqual(processStat(running.pid!), null);
    assert.notEqual(processStat(slowed.pid!), null);
  });

  it("ft-run's watch (FrozenRanks): a rank of its job stopped, unscheduled, through looks no more than 1 s apart for the bound counts; a gap between looks, a rank continued, or another job's rank does not", async () => {
    const marker = `FT_RUN_JOB=test-${process.pid}`;
    const ofJob = (): ChildProcess => {
      const child = spawn('sleep', ['60'], { stdio: 'ignore', env: { ...process.env, FT_RUN_JOB: `test-${process.pid}` } });
      children.push(child);
      return child;
    };
    const [stopped, continued, otherJob] = [ofJob(), ofJob(), sleeper()];
    for (const [rank, child] of [stopped, continued, otherJob].entries()) writePidFile(pidsDir, rank, child.pid!);
    for (const child of [stopped, continued, otherJob]) child.kill('SIGSTOP');
    while ([stopped, continued, otherJob].some((child) => processStat(child.pid!)?.state !== 'T'))
      await new Promise((resolve) => setTimeout(resolve, 1));
    const watch = new FrozenRanks(pidsDir, [marker], 3000);
    assert.deepEqual(watch.look(0), []);
    assert.deepEqual(watch.look(900), []);
    // ft-run itself did not look for 1.1 s (stopped with its job, a suspend): the count starts again
    assert.deepEqual(watch.look(2000), []);
    continued.kill('SIGCONT');
    while (processStat(continued.pid!)?.state === 'T') await new Promise((resolve) => setTimeout(resolve, 1));
    continued.kill('SIGSTOP');
    while (processStat(continued.pid!)?.state !== 'T') await new Promise((resolve) => setTimeout(resolve, 1));
    assert.deepEqual(watch.look(2900), []);
    assert.deepEqual(watch.look(3800), []);
    assert.deepEqual(watch.look(4700), []);
    assert.deepEqual(watch.look(5000), [0]);
    assert.deepEqual(watch.look(5900), [0, 1]);
  });

  it("a given-up mark counts for the job that wrote it (rank 0's pid file names it) and for no later one; none without rank 0's pid file", () => {
    markGivenUp(pidsDir, [4]);
    assert.deepEqual(fs.readdirSync(pidsDir), []);
    const first = sleeper();
    writePidFile(pidsDir, 0, first.pid!);
    markGivenUp(pidsDir, [4, 5]);
    assert.deepEqual(
      [4, 5, 6].map((rank) => wasGivenUp(pidsDir, rank)),
      [true, true, false],
    );
    // a resumed job in the same run directory: its rank 0 writes the pid file anew
    writePidFile(pidsDir, 0, sleeper().pid!);
    assert.equal(wasGivenUp(pidsDir, 4), false);
  });
});
