// A custom training loop on ft-train's protocol: a two-layer perceptron written here in plain
// TypeScript (its own forward, backward and SGD with momentum; no model spec, no ft-train kernels),
// trained data-parallel and fault-tolerant by elastic(). Kill a rank and the survivors repair,
// re-read its shards and finish with the same bits as a run that never failed. The protocol's
// options are the trainer's: --on-failure exact|shrink|none, --spares K, --respawn (with
// --respawn-join ready|wait), --verify-every K
// (the check for silent data corruption, which rolls the registered state back); with
// --optimizer sgd|adamw ft-train's optimizer makes the update (loop.update()) instead of this
// file's own SGD, which also allows --optimizer-state sharded and its --redundancy.
//
//   launch/ft-run -n 2 --script dist/examples/custom-loop/mlp.js -- \
//     --data datasets/fashion-mnist --run-dir runs/mlp-loop --steps 30
//   launch/ft-run -n 4 --script dist/examples/custom-loop/mlp.js -- \
//     --run-dir runs/mlp-sharded --steps 30 --optimizer sgd --optimizer-state sharded --spares 1
//
// (A project that installs ft-train imports from 'ft-train' instead of '../../src'.)
import { parseArgs } from 'node:util';
import { elastic, exitWhenDone, type ElasticLoop, type FailurePolicy, type MicroBatch } from '../../src';

const { values: flags } = parseArgs({
  options: {
    data: { type: 'string', default: 'datasets/fashion-mnist' },
    'run-dir': { type: 'string' },
    steps: { type: 'string', default: '30' },
    batch: { type: 'string', default: '64' },
    shards: { type: 'string' },
    hidden: { type: 'string', default: '64' },
    lr: { type: 'string', default: '0.05' },
    seed: { type: 'string', default: '1' },
    'hang-timeout': { type: 'string', default: '30' },
    'checkpoint-every': { type: 'string', default: '0' },
    resume: { type: 'string' },
    drill: { type: 'string', multiple: true, default: [] },
    'verify-every': { type: 'string' },
    'on-failure': { type: 'string', default: 'exact' },
    optimizer: { type: 'string' },
    'optimizer-state': { type: 'string', default: 'replicated' },
    redundancy: { type: 'string' },
    spares: { type: 'string', default: '0' },
    respawn: { type: 'boolean', default: false },
    'respawn-join': { type: 'string', default: 'ready' },
    // a rank spawned to replace a lost one gets these from its job (elastic() reads them)
    isa: { type: 'string' },
    'join-id': { type: 'string' },
    'join-step': { type: 'string' },
  },
});
if (flags['run-dir'] === undefined) {
  console.error('mlp: give --run-dir DIR');
  process.exit(2);
}

const features = 784; // Fashion-MNIST: 1x28x28
const classes = 10;
const hidden = Number(flags.hidden);
const lr = Number(flags.lr);
const momentum = 0.9;
const seed = Number(flags.seed);
/** ft-train's optimizer makes the update; else this file's SGD with momentum, from loop.sum()'s gradient */
const optimizer = flags.optimizer as 'sgd' | 'adamw' | undefined;

/** A seeded uniform stream in [0, 1) (mulberry32), so every rank draws the same initial weights. */
function uniform(state: number): () => number {
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// activations of the largest micro-batch, allocated once
let h = new Float32Array(0); // [rows, hidden] after ReLU
let logits = new Float32Array(0); // [rows, classes]
let dh = new Float32Array(0); // [rows, hidden]

function ensure(rows: number): void {
  if (h.length >= rows * hidden) return;
  h = new Float32Array(rows * hidden);
  logits = new Float32Array(rows * classes);
  dh = new Float32Array(rows * hidden);
}

/** Forward of x[rows, 784]: logits[rows, 10]. */
function forward(loop: ElasticLoop, x: Float32Array, rows: number): void {
  const { w1, b1, w2, b2 } = loop.tensors;
  ensure(rows);
  for (let n = 0; n < rows; ++n) {
    for (let j = 0; j < hidden; ++j) {
      let a = b1[j];
      for (let i = 0; i < features; ++i) a += w1[j * features + i] * x[n * features + i];
      h[n * hidden + j] = a > 0 ? a : 0;
    }
    for (let c = 0; c < classes; ++c) {
      let a = b2[c];
      for (let j = 0; j < hidden; ++j) a += w2[c * hidden + j] * h[n * hidden + j];
      logits[n * classes + c] = a;
    }
  }
}

/** Softmax cross-entropy of row n: its loss; leaves d loss / d logits in logits' row when `grad`. */
function crossEntropy(n: number, label: number, grad: boolean): { loss: number; correct: boolean } {
  const row = logits.subarray(n * classes, (n + 1) * classes);
  let best = 0;
  for (let c = 1; c < classes; ++c) if (row[c] > row[best]) best = c;
  const max = row[best];
  let sum = 0;
  for (let c = 0; c < classes; ++c) sum += Math.exp(row[c] - max);
  const loss = Math.log(sum) - (row[label] - max);
  if (grad) for (let c = 0; c < classes; ++c) row[c] = Math.exp(row[c] - max) / sum - (c === label ? 1 : 0);
  return { loss, correct: best === label };
}

/** The micro-batch's gradient (sum over its samples / the step's samples) into loop.gradient; its mean loss. */
function gradient(loop: ElasticLoop, batch: MicroBatch): number {
  const { x, labels, rows, samples } = batch;
  const { w2 } = loop.tensors;
  const g = loop.gradient;
  const [gw1, gb1, gw2, gb2] = [0, hidden * features, hidden * features + hidden, hidden * features + hidden + classes * hidden];
  g.fill(0);
  forward(loop, x, rows);
  let loss = 0;
  for (let n = 0; n < rows; ++n) {
    loss += crossEntropy(n, labels[n], true).loss;
    for (let c = 0; c < classes; ++c) {
      const d = logits[n * classes + c] / samples;
      g[gb2 + c] += d;
      for (let j = 0; j < hidden; ++j) g[gw2 + c * hidden + j] += d * h[n * hidden + j];
    }
    for (let j = 0; j < hidden; ++j) {
      let d = 0;
      for (let c = 0; c < classes; ++c) d += w2[c * hidden + j] * (logits[n * classes + c] / samples);
      dh[n * hidden + j] = h[n * hidden + j] > 0 ? d : 0;
      g[gb1 + j] += dh[n * hidden + j];
      for (let i = 0; i < features; ++i) g[gw1 + j * features + i] += dh[n * hidden + j] * x[n * features + i];
    }
  }
  return loss / rows;
}

exitWhenDone(
  elastic(
    {
      data: flags.data!,
      runDir: flags['run-dir'],
      steps: Number(flags.steps),
      batch: Number(flags.batch),
      shards: flags.shards === undefined ? undefined : Number(flags.shards),
      seed,
      hangTimeout: Number(flags['hang-timeout']),
      checkpointEvery: Number(flags['checkpoint-every']),
      resume: flags.resume,
      drill: flags.drill,
      verifyEvery: flags['verify-every'] === undefined ? undefined : Number(flags['verify-every']),
      onFailure: flags['on-failure'] as FailurePolicy,
      spares: Number(flags.spares),
      respawn: flags.respawn,
      respawnJoin: flags.respawn ? (flags['respawn-join'] as 'ready' | 'wait') : undefined,
      optimizerState: flags['optimizer-state'] as 'replicated' | 'sharded',
      redundancy: flags.redundancy,
      ...(optimizer ? { optimizer, momentum, weightDecay: 0 } : {}),
      model: `mlp-${hidden} (examples/custom-loop/mlp.ts)`,
      tensors: { w1: [hidden, features], b1: [hidden], w2: [classes, hidden], b2: [classes] },
      slots: optimizer ? [] : ['velocity'],
      identity: { hidden, lr, momentum },
    },
    {
      init(loop) {
        // uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, zero biases
        const next = uniform(seed);
        const { w1, w2 } = loop.tensors;
        for (let i = 0; i < w1.length; ++i) w1[i] = (2 * next() - 1) / Math.sqrt(features);
        for (let i = 0; i < w2.length; ++i) w2[i] = (2 * next() - 1) / Math.sqrt(hidden);
      },
      async train(loop) {
        while (!loop.done) {
          if (optimizer) await loop.update((batch) => gradient(loop, batch), { lr });
          else {
            const { gradient: g } = await loop.sum((batch) => gradient(loop, batch));
            const velocity = loop.slot('velocity');
            for (let i = 0; i < loop.state.length; ++i) {
              velocity[i] = momentum * velocity[i] + g[i];
              loop.state[i] -= lr * velocity[i];
            }
          }
          await loop.commit({ lr });
        }
        await loop.evaluate((x, labels, rows) => {
          forward(loop, x, rows);
          let loss = 0;
          let correct = 0;
          for (let n = 0; n < rows; ++n) {
            const scored = crossEntropy(n, labels[n], false);
            loss += scored.loss;
            correct += scored.correct ? 1 : 0;
          }
          return { loss: loss / rows, correct };
        });
      },
    },
  ),
);
