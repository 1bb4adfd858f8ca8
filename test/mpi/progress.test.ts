// The leader's console: under a pseudo-terminal of 80 columns, one bar redrawn in place (every
// rendered line fits, the last says 100%), evaluation and recovery lines above it in the order
// things happened (the drill's own line comes through another path: see README, Drills); piped, plain lines without control codes.
import { strict as assert } from 'node:assert';
import * as path from 'node:path';
import { fewTestSamples, lenetOnFashion, repoRoot, runCommand, runTrain } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-progress-');
const common = [...lenetOnFashion, '--steps', '24', '--batch', '64', '--eval-every', '12', ...fewTestSamples];

/** A shell word. */
const quote = (word: string): string => `'${word.replace(/'/g, `'\\''`)}'`;

/**
 * What the terminal shows as it is drawn: every piece between carriage returns and newlines, erase
 * codes removed, and Open MPI's own note of a revoked collective (it writes to the pty after the bar).
 */
function rendered(output: string): string[] {
  return output
    .split(/\r|\n/)
    .map((piece) => piece.replaceAll('\x1b[K', '').replace(/NBC_Progress: an error \d+ was found during schedule .*$/, ''))
    .filter((piece) => piece !== '');
}

describe('progress on the leader console', function () {
  this.timeout(180_000);
  after(() => removeScratch(scratch));

  it('under an 80-column pty: one bar redrawn in place, recovery and evaluation lines above it in order', async () => {
    const dir = path.join(scratch, 'pty');
    const drill = [path.join(repoRoot, 'launch', 'drill'), '-n', '3', '--kill', '1@9', '--', ...common, '--run-dir', dir]
      .map(quote)
      .join(' ');
    const job = await runCommand(
      'script',
      ['-qfec', `stty cols 80; ${quote(process.execPath)} ${drill}`, '/dev/null'],
      process.env,
      150_000,
      'launch/drill in a pty',
    );
    assert.equal(job.code, 0, job.stdout + job.stderr);
    const pieces = rendered(job.stdout);
    const bars = pieces.filter((piece) => /^\[[#.]+\] \d+% step \d+\/23 /.test(piece));
    // every render of the bar fits (lines above it are as long as they are, and wrap)
    for (const bar of bars) assert.ok(bar.length <= 80, `${bar.length} columns: ${JSON.stringify(bar)}`);
    assert.ok(bars.length >= 24, `${bars.length} bar renders`);
    // each render starts with a carriage return: redrawn in place, not a line per step
    assert.ok((job.stdout.match(/\r\[[#.]+\] \d+% step /g) ?? []).length >= 24, JSON.stringify(job.stdout.slice(0, 400)));
    assert.match(bars[bars.length - 1], /^\[#+\] 100% step 23\/23 .* samples\/s \(avg \d+\) world 2$/);
    assert.match(bars[0], /^\[[#.]+\] 4% step 0\/23 \d+s<\d+s loss \d\.\d{4} \d+ samples\/s \(avg \d+\) world 3$/);

    const at = (pattern: RegExp): number => {
      const index = pieces.findIndex((piece) => pattern.test(piece));
      assert.ok(index >= 0, `no ${pattern} in ${JSON.stringify(pieces)}`);
      return index;
    };
    const stepOf = (piece: string): number => Number(/step (\d+)\/23/.exec(piece)![1]);
    const kill = at(/^\[drill\] kill -9 \d+ \(world rank 1\) after step \d+$/);
    const killedAfter = Number(/after step (\d+)/.exec(pieces[kill])![1]);
    const failure = at(/^\[ft-train\] step \d+: lost rank\(s\) 1/);
    assert.ok(failure > kill);
    const failedAt = Number(/step (\d+):/.exec(pieces[failure])![1]);
    assert.ok(failedAt > killedAfter, 'the failure is in a step after the one the kill followed');
    // after the failure line the bar is only redrawn (the step before) until the retried step commits
    const next = pieces
      .slice(failure)
      .filter((piece) => bars.includes(piece))
      .map(stepOf)
      .find((step) => step !== failedAt - 1);
    assert.equal(next, failedAt, "the recovery lines come before the retried step's bar");
    const evaluation = at(/^\[ft-train\] step 11: test accuracy \d+\.\d%, test loss \d\.\d{4}$/);
    assert.equal(
      stepOf(
        pieces
          .slice(0, evaluation)
          .filter((piece) => bars.includes(piece))
          .pop()!,
      ),
      11,
    );
    assert.ok(at(/^\[ft-train\] done: 24 steps/) > pieces.lastIndexOf(bars[bars.length - 1]));
  });

  it('piped: plain lines, no control codes, the last one 100%', async () => {
    const job = await runTrain(2, [...common, '--run-dir', path.join(scratch, 'piped')]);
    assert.equal(job.code, 0, job.stderr);
    // eslint-disable-next-line no-control-regex -- control characters are what this asserts are absent
    assert.doesNotMatch(job.stdout, /[\x00-\x09\x0b-\x1f\x7f]/);
    const steps = job.stdout.split('\n').filter((line) => line.startsWith('[ft-train] step ') && !line.includes('test accuracy'));
    assert.match(
      steps[0],
      /^\[ft-train\] step 0\/23 4% epoch 0 loss \d\.\d{4} lr \S+ world 2 \d+\.\d ms\/step \d+ samples\/s \(avg \d+\) elapsed \d+s ETA \d+s$/,
    );
    assert.match(steps[steps.length - 1], /^\[ft-train\] step 23\/23 100% /);
    assert.match(job.stdout, /\n\[ft-train\] step 11: test accuracy \d+\.\d%, test loss \d\.\d{4}\n/);
  });
});
