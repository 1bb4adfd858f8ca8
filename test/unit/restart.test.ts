// ft-run --max-restarts: the flags a restart runs with (restart.ts): --resume replaced by the
// checkpoint, whatever form it was given in, and the drills of steps the ended job reached left out.
import { strict as assert } from 'node:assert';
import { restartArgs } from '../../src/cli/restart';

describe('a restart of an unfinished job (ft-run --max-restarts)', () => {
  it('resumes from the checkpoint, replacing a --resume given as "--resume X" or "--resume=X"', () => {
    assert.deepEqual(restartArgs(['--run-dir', 'r', '--resume', 'old', '--steps', '9'], 'r/ckpt/step-00000004', 6), [
      '--run-dir',
      'r',
      '--steps',
      '9',
      '--resume',
      'r/ckpt/step-00000004',
    ]);
    assert.deepEqual(restartArgs(['--resume=old', '--run-dir=r'], 'c', 0), ['--run-dir=r', '--resume', 'c']);
  });

  it('leaves out the drills of steps up to the one the job was in, keeps later ones and their other fields', () => {
    const args = [
      '--drill',
      'rank=2,step=5',
      '--drill=rank=1,step=6,phase=commit',
      '--drill',
      'step=7,rank=0,action=stop',
      '--steps',
      '20',
    ];
    assert.deepEqual(restartArgs(args, 'c', 5), [
      '--drill',
      'rank=1,step=6,phase=commit',
      '--drill',
      'step=7,rank=0,action=stop',
      '--steps',
      '20',
      '--resume',
      'c',
    ]);
    assert.deepEqual(restartArgs(args, 'c', 6), ['--drill', 'step=7,rank=0,action=stop', '--steps', '20', '--resume', 'c']);
    assert.deepEqual(restartArgs(args, 'c', 7), ['--steps', '20', '--resume', 'c']);
  });

  it('keeps a drill it cannot read a step from, for ft-train to refuse in its own words', () => {
    assert.deepEqual(restartArgs(['--drill', 'rank=1'], 'c', 9), ['--drill', 'rank=1', '--resume', 'c']);
  });
});
