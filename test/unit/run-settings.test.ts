// summary.json's settings: flat values from the identity a resume is checked against; nested parts
// by the sha256 of their canonical JSON, which does not depend on key order.
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { canonicalJson, runSettings } from '../../src/run/settings';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe('run settings', () => {
  it('canonical JSON sorts keys at every depth and leaves arrays in order', () => {
    assert.equal(canonicalJson({ b: 1, a: [{ d: null, c: 'x' }, 2], e: undefined }), '{"a":[{"c":"x","d":null},2],"b":1}');
    assert.equal(canonicalJson({ y: { q: 1, p: 2 }, x: true }), canonicalJson({ x: true, y: { p: 2, q: 1 } }));
  });

  it("flattens a trainer identity: model by name and sha256, data by split, the optimizer's fields, the schedule as spelled", () => {
    const model = { name: 'mlp', input: [784], classes: 10, layers: [{ type: 'dense', units: 32 }] };
    const settings = runSettings({
      model,
      data: { train: 'a'.repeat(64), test: 'b'.repeat(64) },
      batch: 64,
      lr: 0.001,
      optimizer: { name: 'adamw', beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 },
      lr_schedule: { kind: 'step', every: 10, gamma: 0.5 },
      seed: 7,
      shards: 4,
      on_failure: 'shrink',
      steps: null,
      epochs: 2,
      threads: 1,
    });
    assert.deepEqual(settings, {
      model: 'mlp',
      model_sha256: sha256('{"classes":10,"input":[784],"layers":[{"type":"dense","units":32}],"name":"mlp"}'),
      data_train_sha256: 'a'.repeat(64),
      data_test_sha256: 'b'.repeat(64),
      batch: 64,
      lr: 0.001,
      optimizer: 'adamw',
      beta1: 0.9,
      beta2: 0.999,
      eps: 1e-8,
      weight_decay: 0.01,
      lr_schedule: 'step:10:0.5',
      seed: 7,
      shards: 4,
      on_failure: 'shrink',
      steps: null,
      epochs: 2,
      threads: 1,
    });
    assert.equal(runSettings({ lr_schedule: { kind: 'cosine' } }).lr_schedule, 'cosine');
  });

  it("gives any other nested part (a custom loop's tensors, slots, user identity) as NAME_sha256", () => {
    const settings = runSettings({ model: 'quadratic', tensors: [{ name: 'w', size: 3 }], slots: [], user: { scale: 2 }, batch: 8 });
    assert.deepEqual(settings, {
      model: 'quadratic',
      tensors_sha256: sha256('[{"name":"w","size":3}]'),
      slots_sha256: sha256('[]'),
      user_sha256: sha256('{"scale":2}'),
      batch: 8,
    });
  });
});
