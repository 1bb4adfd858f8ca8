// ft-run --max-restarts: the flags a restart runs with (restart.ts): --resume replaced by the
// checkpoint, whatever form it was given in, and the drills that fired left out: those of steps the
// ended job reached, and those whose notes its ranks' logs hold (FaultInjector writes, firedDrill reads).
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { restartArgs } from '../../src/cli/restart';
import { FaultInjector, firedDrill, parseDrill } from '../../src/liveness/drills';

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
      '--drill=rank=1,step=6,phase=checkpoint-commit',
      '--drill',
      'step=7,rank=0,action=stop',
      '--steps',
      '20',
    ];
    assert.deepEqual(restartArgs(args, 'c', 5), [
      '--drill',
      'rank=1,step=6,phase=checkpoint-commit',
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

  it('keeps a drill it cannot read, for ft-train to refuse in its own words', () => {
    assert.deepEqual(restartArgs(['--drill', 'rank=1'], 'c', 9), ['--drill', 'rank=1', '--resume', 'c']);
    assert.deepEqual(restartArgs(['--drill', 'rank=1,step=2,phase=nowhere'], 'c', 9), [
      '--drill',
      'rank=1,step=2,phase=nowhere',
      '--resume',
      'c',
    ]);
  });

  it('leaves out a drill past the step the job was in when its note says it fired (a rank a step ahead of the leader), and only that one', () => {
    const args = ['--drill', 'rank=1,step=12,action=host', '--drill', 'rank=1,step=12,phase=update', '--drill', 'rank=2,step=12'];
    const fired = [{ rank: 1, step: 12, phase: 'compute' as const }];
    assert.deepEqual(restartArgs(args, 'c', 11, fired), [
      '--drill',
      'rank=1,step=12,phase=update',
      '--drill',
      'rank=2,step=12',
      '--resume',
      'c',
    ]);
    assert.deepEqual(restartArgs(args, 'c', 11), [...args, '--resume', 'c']);
  });

  it('reads back the point of every note a drill leaves as it fires, and nothing from other lines', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-notes-'));
    try {
      const note = path.join(dir, 'rank-3.log');
      fs.writeFileSync(note, '{"level":"info","message":"event","event":"failure","step":7,"phase":"compute"}\n');
      const drills = [
        'rank=3,step=7,action=slow,factor=2',
        'rank=3,step=8,phase=collective,action=flip',
        'rank=3,step=9,phase=update,action=corrupt,target=state',
      ];
      const faults = new FaultInjector(drills.map(parseDrill), 3, note, dir, 1);
      faults.at(7, 'compute');
      assert.ok(faults.flipAt(8, 'collective', 100));
      assert.ok(faults.flipAt(9, 'update', 100, 0, 'state'));
      assert.ok(faults.flipAt(10, 'update', 100, 0, 'state'));
      const lines = fs.readFileSync(note, 'utf8').trimEnd().split('\n');
      assert.equal(lines.length, 5);
      assert.deepEqual(lines.map(firedDrill), [
        undefined,
        { rank: 3, step: 7, phase: 'compute' },
        { rank: 3, step: 8, phase: 'collective' },
        { rank: 3, step: 9, phase: 'update' },
        { rank: 3, step: 10, phase: 'update' },
      ]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
