// The settings table behind both front doors: the command line and the library's options object
// resolve to the same options with the same defaults, and each names a bad setting its own way.
import { strict as assert } from 'node:assert';
import { resolveLoopSettings } from '../../src/api/loop-settings';
import { parseTrainOptions } from '../../src/cli/train-flags';
import { flagName, resolveTrainOptions, trainSettings } from '../../src/api/train-settings';

describe('ft-train settings: one table for flags and options', () => {
  const required = { model: 'models/lenet.json', data: 'datasets/fashion-mnist', runDir: 'runs/x' };

  it('the flags and the options object give the same options, defaults included', () => {
    const fromFlags = parseTrainOptions(['--model', required.model, '--data', required.data, '--run-dir', required.runDir]);
    assert.deepEqual(fromFlags, { ...resolveTrainOptions(required), joinId: undefined, joinStep: undefined });
    assert.equal(fromFlags.batch, 64);
    assert.equal(fromFlags.lr, 0.01);
    assert.equal(fromFlags.optimizer.weightDecay, 5e-4);
    assert.equal(fromFlags.hangTimeout, 30);
    assert.equal(fromFlags.checkpointDir, 'runs/x/ckpt');
    assert.equal(fromFlags.epochs, 1);
  });

  it('every setting, camelCased, is the kebab-cased flag', () => {
    const flags = [
      '--steps',
      '7',
      '--weight-decay',
      '0.1',
      '--optimizer',
      'adamw',
      '--lr-schedule',
      'step:2:0.5',
      '--jit-checkpoint',
      'off',
      '--drill',
      'rank=1,step=2',
      '--device',
      'cuda',
      '--eval-samples',
      '500',
    ];
    const settings = {
      steps: 7,
      weightDecay: 0.1,
      optimizer: 'adamw',
      lrSchedule: 'step:2:0.5',
      jitCheckpoint: 'off',
      drill: ['rank=1,step=2'] as string[],
      device: 'cuda',
      evalSamples: 500,
    } as const;
    assert.deepEqual(parseTrainOptions(['--model', required.model, '--data', required.data, '--run-dir', required.runDir, ...flags]), {
      ...resolveTrainOptions({ ...required, ...settings }),
      joinId: undefined,
      joinStep: undefined,
    });
    assert.equal(flagName('respawnLimit'), 'respawn-limit');
    assert.equal(Object.keys(trainSettings).length, 48);
  });

  it("a bad setting is one line in the caller's spelling", () => {
    const refused = (settings: Record<string, unknown>) => {
      try {
        resolveTrainOptions({ ...required, ...settings });
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    };
    assert.equal(refused({ lr: -1 }), 'ft-train: lr expects a number >= 0, got -1');
    assert.equal(refused({ batch: 2.5 }), 'ft-train: batch expects an integer >= 1, got 2.5');
    assert.equal(refused({ stpes: 3 }), 'ft-train: unknown setting stpes');
    assert.equal(refused({ runDir: undefined }), 'ft-train: runDir is required');
    assert.equal(refused({ optimizer: 'adam' }), 'ft-train: optimizer expects one of sgd, adamw, got "adam"');
    assert.equal(refused({ steps: 3, epochs: 2 }), 'ft-train: give steps or epochs, not both');
    assert.equal(refused({ redundancy: 'ec:2+1' }), 'ft-train: redundancy applies to optimizerState sharded only');
    assert.equal(
      refused({ clipNorm: 1, optimizerState: 'sharded' }),
      'ft-train: clipNorm needs the whole summed gradient on each rank: use optimizerState replicated',
    );
    assert.equal(refused({ warmupSteps: -1 }), 'ft-train: warmupSteps expects an integer >= 0, got -1');
    assert.equal(
      refused({ verifyEvery: 5, onFailure: 'shrink' }),
      'ft-train: verifyEvery needs onFailure exact (equal bits whoever computes), got shrink',
    );
    assert.equal(refused({ onCorruption: 'ignore' }), 'ft-train: onCorruption expects one of evict, stop, got "ignore"');
    for (const noCheck of [{ onFailure: 'shrink' }, { verifyEvery: 0 }])
      assert.equal(
        refused({ onCorruption: 'stop', ...noCheck }),
        'ft-train: onCorruption stop needs the check for corruption (onFailure exact, verifyEvery above 0)',
      );
    assert.equal(resolveTrainOptions({ ...required, onCorruption: 'stop' }).onCorruption, 'stop');
    assert.equal(
      refused({ rebalance: 'auto', onFailure: 'shrink' }),
      'ft-train: rebalance auto needs onFailure exact (the same bits whoever computes a shard), got shrink',
    );
    assert.equal(refused({ evictSlower: 1 }), 'ft-train: evictSlower expects 0 (never) or a factor above 1, got 1');
    assert.equal(refused({ slowMargin: 0 }), 'ft-train: slowMargin expects a number > 0, got 0');
    assert.equal(
      refused({ drill: ['rank=1,step=2,action=slow'] }),
      'ft-train: --drill: action slow takes factor=F (and only it does), in "rank=1,step=2,action=slow"',
    );
    assert.equal(
      refused({ drill: ['rank=1,step=2,factor=2'] }),
      'ft-train: --drill: action slow takes factor=F (and only it does), in "rank=1,step=2,factor=2"',
    );
    assert.equal(
      refused({ drill: ['rank=1,step=2,action=slow,factor=0.5'] }),
      'ft-train: --drill: factor expects a number in [1, 1000], got "0.5" in "rank=1,step=2,action=slow,factor=0.5"',
    );
    // slow ranks are balanced by default where moving shards keeps the bits, not elsewhere
    assert.deepEqual(resolveTrainOptions(required).rebalance, { slowMargin: 0.5, slowSteps: 3, evictSlower: 4 });
    assert.equal(resolveTrainOptions({ ...required, onFailure: 'shrink' }).rebalance, undefined);
    assert.equal(resolveTrainOptions({ ...required, rebalance: 'off' }).rebalance, undefined);
    // the check is on by default where it can be, off where it cannot
    assert.equal(resolveTrainOptions(required).verifyEvery, 100);
    assert.equal(resolveTrainOptions({ ...required, onFailure: 'shrink' }).verifyEvery, 0);
    assert.equal(resolveTrainOptions({ ...required, optimizerState: 'sharded' }).verifyEvery, 100);
    // the custom loop clips only before ft-train's own update
    const loop = { data: 'd', runDir: 'r', tensors: { w: [2, 2] }, clipNorm: 1 };
    assert.throws(() => resolveLoopSettings(loop), {
      message:
        "ft-train: clipNorm: clips the gradient before ft-train's update; give optimizer (or clip the sum yourself before your update)",
    });
    assert.equal(resolveLoopSettings({ ...loop, optimizer: 'adamw' }).clipNorm, 1);
    // the custom loop scores the test split's first evalSamples too, checked alike
    assert.equal(resolveLoopSettings({ ...loop, optimizer: 'adamw', evalSamples: 300 }).evalSamples, 300);
    assert.throws(() => resolveLoopSettings({ ...loop, optimizer: 'adamw', evalSamples: 0 }), {
      message: 'ft-train: evalSamples expects an integer >= 1, got 0',
    });
    assert.throws(() => parseTrainOptions(['--model', 'm', '--data', 'd', '--run-dir', 'r', '--lr', '-1']), {
      message: 'ft-train: --lr expects a number >= 0, got -1 (see --help)',
    });
  });
});
