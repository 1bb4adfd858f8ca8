// The run directory contract without MPI: a run directory is created once (a slow rank of the
// launch that made it takes what its faster ranks wrote); a new leader appends the committed steps
// and events the old one had not written, each once; the reader names a half-written or foreign
// file in one line, and a live run's last line is read only once whole.
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runFiles } from '../../src/run/files';
import { lastRecord, readLines, readObject, RunDirError } from '../../src/run/reader';
import type { StepRecord } from '../../src/run/records';
import { launchMarkName, rankList } from '../../src/run/pids';
import { createRunDir, RunLog } from '../../src/run/writer';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('run-dir-');
let dirs = 0;
const newDir = (): string => path.join(scratch, `run${dirs++}`);

function stepRecord(step: number): StepRecord {
  return { step, epoch: 0, loss: 2 - step / 10, lr: 0.01, world: 2, samples: 64, step_ms: 5, time: 1000 + step };
}

describe('run directory', () => {
  after(() => removeScratch(scratch));

  it('createRunDir makes logs/ and pids/, and refuses a directory that holds a run', () => {
    const dir = newDir();
    createRunDir(dir);
    assert.deepEqual(fs.readdirSync(dir).sort(), [runFiles.logs, runFiles.pids]);
    createRunDir(dir); // logs/ and pids/ alone are no run
    fs.writeFileSync(path.join(dir, runFiles.metrics), '');
    assert.throws(() => createRunDir(dir), {
      message: `${dir}: --run-dir already holds a run (metrics.jsonl); choose a new directory or --resume it`,
    });
  });

  it("a rank of the launch that made the directory takes the files its faster ranks wrote; another launch's rank refuses them", () => {
    const dir = newDir();
    const [launch, other] = ['prterun-host-1234@1', 'prterun-host-5678@1'];
    createRunDir(dir, false, launch);
    assert.deepEqual(fs.readdirSync(path.join(dir, runFiles.pids)), [launchMarkName(launch)]);
    // a faster rank of the launch stopped at start-up and recorded it
    fs.writeFileSync(path.join(dir, runFiles.events), '{"event":"stop"}\n');
    createRunDir(dir, false, launch);
    const refusal = { message: `${dir}: --run-dir already holds a run (events.jsonl); choose a new directory or --resume it` };
    assert.throws(() => createRunDir(dir, false, other), refusal);
    assert.throws(() => createRunDir(dir), refusal);
    // the mark is no rank's pid file
    assert.deepEqual(rankList(path.join(dir, runFiles.pids)), []);
    assert.equal(launchMarkName('prterun-a/b c@1'), 'launch-prterun-a_b_c@1');
  });

  it('a new leader appends the steps and events the old one did not write, each once', async () => {
    const dir = newDir();
    createRunDir(dir);
    const [first, second] = [new RunLog(dir, 0), new RunLog(dir, 1)];
    first.setLeader(true);
    for (const log of [first, second]) log.step(stepRecord(0));
    first.event({ event: 'start', world: 2 });
    // events are matched by time: the failure comes a few ms after the last event written
    await new Promise((resolve) => setTimeout(resolve, 5));
    // the leader dies before it writes step 1 and the failure
    second.step(stepRecord(1));
    second.event({ event: 'failure', step: 2, phase: 'collective' });
    second.setLeader(true);
    second.step(stepRecord(2));
    const steps = readLines(path.join(dir, runFiles.metrics)).map(({ value }) => value.step);
    assert.deepEqual(steps, [0, 1, 2]);
    const events = readLines(path.join(dir, runFiles.events)).map(({ value }) => value.event);
    assert.deepEqual(events, ['start', 'failure']);
    assert.match(fs.readFileSync(path.join(dir, runFiles.pids, '1'), 'utf8'), new RegExp(`^${process.pid} ${os.hostname()} \\d+\n$`));
  });

  it('the reader names a half-written line, a foreign line and a file that is not an object', () => {
    const dir = newDir();
    fs.mkdirSync(dir);
    const metrics = path.join(dir, runFiles.metrics);
    fs.writeFileSync(metrics, `${JSON.stringify(stepRecord(0))}\n{"step":1,"lo`);
    assert.throws(
      () => readLines(metrics),
      (error: Error) => error instanceof RunDirError && error.message === `${metrics}: half-written (its last line has no end)`,
    );
    assert.equal(lastRecord<StepRecord>(metrics), undefined);
    fs.appendFileSync(metrics, 'ss":1}\n[1]\n');
    assert.throws(() => readLines(metrics), { message: `${metrics}: line 3 is not a JSON object` });
    assert.deepEqual(lastRecord<unknown>(metrics), [1]);
    const summary = path.join(dir, runFiles.summary);
    fs.writeFileSync(summary, 'null\n');
    assert.throws(() => readObject(summary), { message: `${summary}: not a JSON object` });
    assert.throws(() => readObject(path.join(dir, 'none.json')), { message: `${path.join(dir, 'none.json')}: missing` });
  });
});
