// Exported models in PyTorch: lenet, resnet8 and gpt-tiny, trained a few steps in TS, exported with
// src/nn/export.ts, rebuilt and evaluated by examples/pytorch/load_model.py on the same test samples
// (written as .npy by src/data/npy.ts): the same correct count and the same loss within 1e-4.
import { strict as assert } from 'node:assert';
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Dataset } from '../../src/data/dataset';
import { gatherBatch } from '../../src/data/micro-batches';
import { writeSplitNpy } from '../../src/data/npy';
import type { ShardData } from '../../src/data/split';
import { cpu } from '../../src/nn/cpu';
import { encodeSafetensors } from '../../src/checkpoint/safetensors';
import { modelSpecJson, namedTensors } from '../../src/nn/export';
import { Net } from '../../src/nn/net';
import { loadSpec } from '../../src/nn/spec';
import { writeModel } from '../../src/run/writer';
import { Optimizer } from '../../src/solver/optimizer';
import { makeScratch, removeScratch } from '../helpers/scratch';

/** Debian's python3, where python3-torch installs (not a pyenv or venv one first on PATH). */
const python = process.env.FT_PYTHON ?? '/usr/bin/python3';
const torchMissing = spawnSync(python, ['-c', 'import torch, numpy'], { stdio: 'ignore' }).status !== 0;
const chunk = 500;

/** Rows [0, rows) of `data`. */
function firstRows(data: ShardData, rows: number): ShardData {
  return { ...data, rows, features: data.features.subarray(0, rows * data.sampleSize), labels: data.labels.subarray(0, rows) };
}

/** A few SGD steps on the train split's first rows, running statistics updated as by a one-shard run. */
async function train(net: Net, dataset: Dataset, steps: number, batch: number): Promise<void> {
  const layout = dataset.train.layout(Math.floor(dataset.train.rows / 1000)); // shard 0: about 1000 rows
  const shard = (await dataset.train.readShards(layout, [0])).get(0)!;
  const sgd = new Optimizer({ name: 'sgd', momentum: 0.9, weightDecay: 0, beta1: 0, beta2: 0, eps: 0 }, cpu);
  const velocity = new Float32Array(net.params.data.length);
  const [x, labels] = [new Float32Array(batch * net.inputSize), new Int32Array(batch)];
  for (let step = 0; step < steps; ++step) {
    gatherBatch(
      shard,
      Int32Array.from({ length: batch }, (_, i) => step * batch + i),
      x,
      labels,
    );
    net.lossAndGradient(x, labels, batch, { seed: 1, epoch: 0, step, shard: 0 });
    sgd.update(net.params.data, net.params.gradients, [velocity], 0.05, step);
    net.updateBuffers(net.statistics);
  }
}

/** Correct count and mean loss of net.evaluate over `data`, in chunks. */
function evaluate(net: Net, data: ShardData): { correct: number; loss: number } {
  const [x, labels] = [new Float32Array(chunk * net.inputSize), new Int32Array(chunk)];
  let [correct, lossSum] = [0, 0];
  for (let first = 0; first < data.rows; first += chunk) {
    const rows = Int32Array.from({ length: Math.min(chunk, data.rows - first) }, (_, i) => first + i);
    gatherBatch(data, rows, x, labels);
    const result = net.evaluate(x.subarray(0, rows.length * net.inputSize), labels.subarray(0, rows.length), rows.length);
    correct += result.correct;
    lossSum += result.loss * rows.length;
  }
  return { correct, loss: lossSum / data.rows };
}

describe('Exported models in PyTorch', function () {
  this.timeout(120_000);
  let scratch = '';
  before(function () {
    if (torchMissing) {
      console.log(`    skipped: ${python} cannot import torch and numpy (launch/setup installs python3-torch)`);
      this.skip();
    }
    scratch = makeScratch('ft-export-');
  });
  after(() => {
    if (scratch) removeScratch(scratch);
  });

  // the least accuracy at which a comparison means much: well above chance (1/10; gpt-tiny's 1/113 per position)
  for (const [model, data, rows, least] of [
    ['lenet', 'fashion-mnist', 2000, 0.2],
    ['resnet8', 'synthetic-cifar', 2000, 0.2],
    ['gpt-tiny', 'text-char', 100, 0.1],
  ] as const) {
    it(`${model} on ${data}: PyTorch counts the same correct samples and the same loss`, async () => {
      const dataset = await Dataset.open(`datasets/${data}`);
      try {
        const net = new Net(loadSpec(`models/${model}.json`), cpu);
        net.init(1);
        await train(net, dataset, 16, 32);
        const test = firstRows(await dataset.test.readAll(), rows);
        const ours = evaluate(net, test);
        const [modelDir, dataDir] = [path.join(scratch, model), path.join(scratch, `${model}-data`)];
        fs.mkdirSync(modelDir, { recursive: true });
        writeModel(modelDir, encodeSafetensors(namedTensors(net), { model: net.spec.name }), modelSpecJson(net));
        writeSplitNpy(test, dataset.sampleShape, dataDir);
        const theirs = JSON.parse(execFileSync(python, ['examples/pytorch/load_model.py', modelDir, dataDir], { encoding: 'utf8' }));
        assert.equal(theirs.samples, rows);
        assert.equal(theirs.correct, ours.correct, `PyTorch ${theirs.correct} correct, ft-train ${ours.correct}`);
        assert.ok(Math.abs(theirs.loss - ours.loss) < 1e-4, `PyTorch loss ${theirs.loss}, ft-train ${ours.loss}`);
        assert.ok(ours.correct > rows * least, `accuracy ${ours.correct / rows}: too close to chance for the comparison to mean much`);
      } finally {
        await dataset.close();
      }
    });
  }
});
