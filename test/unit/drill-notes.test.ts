// The notes drills leave in the logs as they fire, read back: which drills of a run fired
// (firedPoints, from each log's start or from given offsets) and which did not (unfired: what a
// finished run warns of), and a drill written back as --drill takes it (drillText).
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { drillText, FaultInjector, firedPoints, parseDrill, unfired } from '../../src/liveness/drills';

describe('drill notes', () => {
  let dir = '';
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-drill-notes-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('writes a drill back as --drill takes it, every field kept', () => {
    for (const text of [
      'rank=0,step=3,phase=compute,action=kill',
      'rank=2,step=0,phase=update,action=corrupt,target=state',
      'rank=5,step=9,phase=compute,action=slow,factor=2.5',
    ])
      assert.equal(drillText(parseDrill(text)), text);
    assert.equal(drillText(parseDrill('step=4,rank=1')), 'rank=1,step=4,phase=compute,action=kill');
  });

  it('finds the drills that fired in every log of the folder, from the offsets given, and names those that did not', () => {
    const drills = ['rank=1,step=2,action=slow,factor=1', 'rank=1,step=3,phase=collective,action=flip', 'rank=4,step=2,phase=woken'].map(
      parseDrill,
    );
    const rank1 = path.join(dir, 'rank-1.log');
    fs.writeFileSync(rank1, '{"message":"start"}\n');
    const faults = new FaultInjector(drills, 1, rank1, dir, 7);
    faults.at(2, 'compute');
    const laterJob = fs.statSync(rank1).size;
    assert.ok(faults.flipAt(3, 'collective', 10));
    // another rank's log (a reserve's); the offsets below leave out what an earlier job noted
    fs.writeFileSync(
      path.join(dir, 'reserve-4.log'),
      `${new Date().toISOString()} drill: rank 4 sends itself SIGKILL at step 2, phase woken\n`,
    );
    assert.deepEqual(firedPoints(dir), [
      { rank: 1, step: 2, phase: 'compute' },
      { rank: 1, step: 3, phase: 'collective' },
      { rank: 4, step: 2, phase: 'woken' },
    ]);
    const fromHere = firedPoints(
      dir,
      new Map([
        ['rank-1.log', laterJob],
        ['reserve-4.log', 10_000],
      ]),
    );
    assert.deepEqual(fromHere, [{ rank: 1, step: 3, phase: 'collective' }]);
    assert.deepEqual(unfired(drills, fromHere).map(drillText), [
      'rank=1,step=2,phase=compute,action=slow,factor=1',
      'rank=4,step=2,phase=woken,action=kill',
    ]);
    assert.deepEqual(firedPoints(path.join(dir, 'absent')), []);
  });

  it('takes a corrupt drill as fired at its step or a later one, any other only at its own step, rank and phase', () => {
    const corrupt = parseDrill('rank=2,step=5,phase=update,action=corrupt');
    const kill = parseDrill('rank=2,step=5,phase=update,action=kill');
    assert.deepEqual(unfired([corrupt, kill], [{ rank: 2, step: 6, phase: 'update' }]), [kill]);
    assert.deepEqual(unfired([corrupt, kill], [{ rank: 2, step: 4, phase: 'update' }]), [corrupt, kill]);
    assert.deepEqual(unfired([corrupt, kill], [{ rank: 2, step: 5, phase: 'update' }]), []);
    assert.deepEqual(
      unfired(
        [kill],
        [
          { rank: 3, step: 5, phase: 'update' },
          { rank: 2, step: 5, phase: 'compute' },
        ],
      ),
      [kill],
    );
  });
});
