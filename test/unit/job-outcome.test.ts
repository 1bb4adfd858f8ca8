// launch/ft-run's judgement of how a job ended: mpirun's exit code against the run directory's
// summary and stop event (PRRTE counts a --respawn rank's SIGKILL against the job).
import { strict as assert } from 'node:assert';
import { outcome } from '../../src/cli/job-outcome';

describe("ft-run: a job's outcome", () => {
  const notFinished = 'no summary.json in runs/x';

  it("a stop of the ranks' own with a newcomer on its way: their exit code, not the 137 mpirun counts for the newcomer's SIGKILL", () => {
    assert.deepEqual(outcome(137, false, notFinished, false, { event: 'stop', reason: 'corruption' }, true), {
      code: 1,
      unfinished:
        'mpirun exited 137 (it counts a --respawn rank that left at the stop against the job) and the run did not finish: the ranks stopped (corruption), exit 1',
    });
    assert.equal(outcome(137, false, notFinished, false, { event: 'stop', reason: 'below-min-ranks' }, true).code, 3);
    assert.equal(outcome(137, false, notFinished, false, { event: 'stop', reason: 'state-lost' }, true).code, 3);
  });

  it("mpirun's code where nothing was spawned, where it is the ranks' own, or where no stop says otherwise", () => {
    const line = (code: number) => `mpirun exited ${code} and the run did not finish: ${notFinished}`;
    assert.deepEqual(outcome(137, false, notFinished, false, { event: 'stop', reason: 'corruption' }, false), {
      code: 137,
      unfinished: line(137),
    });
    assert.deepEqual(outcome(1, false, notFinished, false, { event: 'stop', reason: 'corruption' }, true), {
      code: 1,
      unfinished: line(1),
    });
    assert.deepEqual(outcome(137, false, notFinished, false, undefined, true), { code: 137, unfinished: line(137) });
    assert.deepEqual(outcome(137, false, notFinished, false, { event: 'stop', reason: 'no-such-reason' }, true), {
      code: 137,
      unfinished: line(137),
    });
  });
});
