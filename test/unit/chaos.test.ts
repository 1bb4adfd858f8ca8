// ChaosKills (launch/drill --chaos): which working rank it kills and when, against real processes
// standing in for ranks (their pid files as ranks write them), with the run's events written by hand.
import { strict as assert } from 'node:assert';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ChaosKills } from '../../src/cli/chaos';
import { sendKill, type Kill } from '../../src/cli/fault-drill';
import { processStat } from '../../src/run/pids';
import type { StepRecord } from '../../src/run/records';

describe('launch/drill --chaos (ChaosKills)', function () {
  this.timeout(20_000);
  let dir: string;
  const ranks = new Map<number, ChildProcess>();

  /** A process standing in for world rank `rank`, with its pid file. */
  function startRank(rank: number): void {
    const child = spawn('sleep', ['60'], { stdio: 'ignore' });
    ranks.set(rank, child);
    fs.writeFileSync(path.join(dir, 'pids', String(rank)), `${child.pid} ${os.hostname()} ${processStat(child.pid!)!.start}\n`);
  }

  const event = (record: object): void =>
    fs.appendFileSync(path.join(dir, 'events.jsonl'), JSON.stringify({ time: Date.now(), ...record }) + '\n');
  const step = (n: number, world: number): StepRecord => ({
    step: n,
    world,
    epoch: 0,
    loss: 1,
    lr: 0.1,
    samples: 64,
    step_ms: 1,
    time: Date.now(),
  });
  const killed = (): number[] => [...ranks].filter(([, child]) => child.signalCode === 'SIGKILL').map(([rank]) => rank);
  const send = (kill: Kill): void => sendKill(dir, kill, kill.step, 'chaos: ');
  /** Lets a period of everyMs pass. */
  const settle = () => new Promise((resolve) => setTimeout(resolve, 100));
  /** Resolves once the stand-ins for `killedRanks` have exited: a SIGKILL is sent at once, its exit seen later. */
  const exited = (killedRanks: number[]): Promise<unknown> =>
    Promise.all(
      killedRanks.map((rank) => {
        const child = ranks.get(rank)!;
        return child.exitCode !== null || child.signalCode !== null ? undefined : new Promise((resolve) => child.once('exit', resolve));
      }),
    );

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-chaos-test-'));
    fs.mkdirSync(path.join(dir, 'pids'));
  });

  afterEach(() => {
    for (const child of ranks.values()) child.kill('SIGKILL');
    ranks.clear();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('kills one working rank per period, never a spare, and waits for the recovery before the next', async () => {
    for (const rank of [0, 1, 2, 3]) startRank(rank); // rank 3: a spare
    event({ event: 'start', world: 3, spares: 1 });
    const chaos = new ChaosKills({ everyMs: 50, seed: 7 }, dir, send);
    chaos.poll(step(0, 3)); // the period starts at the first step
    chaos.poll(step(1, 3));
    assert.equal(chaos.sent.length, 0, 'nothing before a period has passed');
    await settle();
    chaos.poll(step(5, 3));
    await settle();
    assert.equal(chaos.sent.length, 1);
    const first = chaos.sent[0];
    await exited([first.rank]);
    assert.deepEqual(killed(), [first.rank]);
    assert.ok(first.rank < 3, `a working rank, not the spare (killed ${first.rank})`);
    assert.equal(first.step, 5);
    assert.equal(first.pid, ranks.get(first.rank)!.pid);
    // its private memory as it was killed: a sleep holds some, and little
    assert.ok(
      Number.isInteger(first.rss_anon_kb) && first.rss_anon_kb! > 0 && first.rss_anon_kb! < 10_000,
      `RssAnon ${first.rss_anon_kb} kB`,
    );

    // due again, but the job has not recovered: no step committed on the working ranks since
    chaos.poll(step(5, 3));
    event({ event: 'revoke+shrink', step: 6, lost: [first.rank] });
    chaos.poll(step(6, 2)); // the retried step, without the spare taking its place yet
    event({ event: 'join', step: 6, ranks: [3] });
    chaos.poll(step(6, 3));
    assert.equal(chaos.sent.length, 1, 'not before a step after the join has committed');
    chaos.poll(step(7, 3));
    await settle();
    assert.equal(chaos.sent.length, 2);
    const second = chaos.sent[1];
    assert.notEqual(second.rank, first.rank);
    await exited([second.rank]);
    assert.deepEqual(killed().sort(), [first.rank, second.rank].sort());
    chaos.close();
  });

  it('a rank spawned to refill the spares (its join names it among the spares) is no target, and the kills go on', async () => {
    for (const rank of [0, 1, 2]) startRank(rank); // rank 2: a spare
    event({ event: 'start', world: 2, spares: 1 });
    const chaos = new ChaosKills({ everyMs: 20, seed: 3 }, dir, send);
    chaos.poll(step(0, 2));
    await settle();
    chaos.poll(step(1, 2));
    const [first] = chaos.sent;
    assert.ok(first.rank < 2, `a working rank (killed ${first.rank})`);
    event({ event: 'revoke+shrink', step: 2, lost: [first.rank] });
    event({ event: 'join', step: 2, ranks: [2] }); // the spare takes its place
    startRank(3);
    event({ event: 'spawn', step: 3, ranks: [3] }); // at the retried step's end: a spare again
    await settle();
    chaos.poll(step(3, 2));
    assert.equal(chaos.sent.length, 1, 'not while the spawned rank is on its way');
    event({ event: 'join', step: 4, ranks: [3], spares: [3] });
    chaos.poll(step(4, 2));
    chaos.poll(step(5, 2));
    assert.equal(chaos.sent.length, 2, 'the working ranks are 2 again, as the steps say');
    const second = chaos.sent[1];
    assert.ok(second.rank !== 3 && second.rank !== first.rank, `a working rank, not the new spare (killed ${second.rank})`);
    await exited([first.rank, second.rank]);
    assert.deepEqual(killed().sort(), [first.rank, second.rank].sort());
    chaos.close();
  });

  it('never kills the last working rank, and records a rank without a pid file as an error', async () => {
    event({ event: 'start', world: 1 });
    startRank(0);
    const alone = new ChaosKills({ everyMs: 1, seed: 1 }, dir, send);
    alone.poll(step(0, 1));
    await settle();
    alone.poll(step(9, 1));
    assert.equal(alone.sent.length, 0);
    alone.close();

    fs.writeFileSync(path.join(dir, 'events.jsonl'), '');
    event({ event: 'start', world: 2 });
    fs.rmSync(path.join(dir, 'pids', '0'));
    const chaos = new ChaosKills({ everyMs: 1, seed: 1 }, dir, send);
    chaos.poll(step(0, 2));
    await settle();
    for (let n = 1; chaos.sent.length === 0 && n < 100; ++n) chaos.poll(step(n, 2));
    assert.equal(chaos.sent.length, 1);
    const [kill] = chaos.sent;
    assert.equal(kill.error, `no pid file for world rank ${kill.rank}`);
    assert.equal(kill.time, undefined);
    assert.deepEqual(killed(), []);
    chaos.close();
  });

  it('kills nothing once the last step has committed (the start event names the steps): the job is ending', async () => {
    for (const rank of [0, 1, 2]) startRank(rank);
    event({ event: 'start', world: 3, spares: 0, steps: 10 });
    const chaos = new ChaosKills({ everyMs: 1, seed: 3 }, dir, send);
    chaos.poll(step(0, 3));
    await settle();
    chaos.poll(step(9, 3)); // due, and the job at full strength: but step 9 was the last
    await settle();
    assert.equal(chaos.sent.length, 0);
    chaos.poll(step(8, 3)); // the same job before its last step: the kill is due there
    await settle();
    assert.equal(chaos.sent.length, 1);
    await exited([chaos.sent[0].rank]);
    assert.deepEqual(killed(), [chaos.sent[0].rank]);
    chaos.close();
  });
});
