// Net: the layers of a model spec over one flat parameter buffer, with the softmax cross-entropy
// loss on top. Shapes are checked while the layers are built, before any buffer exists.
import type { Backend } from './backend';
import { type BatchKey, type Layer, type LayerContext, Scratch, product } from './layer';
import { Conv2d } from './layers/conv2d';
import { Dropout } from './layers/dropout';
import { Flatten } from './layers/flatten';
import { Linear } from './layers/linear';
import { Pool2d } from './layers/pool2d';
import { Relu } from './layers/relu';
import { ParameterStore } from './params';
import { stream } from '../random';
import { type LayerSpec, type ModelSpec, SpecError } from './spec';

export interface StepResult {
  /** Mean cross-entropy over the batch. */
  loss: number;
  /** Samples whose largest logit is their label. */
  correct: number;
}

function buildLayer(spec: LayerSpec, inShape: number[], ctx: LayerContext,
  fail: (problem: string) => never): Layer {
  const spatial = (kernel: number, pad: number): void => {
    if (inShape.length !== 3) fail(`expects a [C, H, W] input, got [${inShape.join(', ')}]`);
    const [, h, w] = inShape;
    if (h + 2 * pad < kernel || w + 2 * pad < kernel) fail(`kernel ${kernel} does not fit the ${h}x${w} input (pad ${pad})`);
  };
  switch (spec.type) {
    case 'conv':
      spatial(spec.kernel, spec.pad);
      return new Conv2d(spec.name, inShape, spec.filters, spec.kernel, spec.stride, spec.pad, ctx);
    case 'maxpool':
    case 'avgpool':
      spatial(spec.kernel, spec.pad);
      return new Pool2d(spec.name, spec.type === 'maxpool' ? 'max' : 'avg', inShape, spec.kernel, spec.stride, spec.pad, ctx);
    case 'linear':
      return new Linear(spec.name, inShape, spec.outputs, ctx);
    case 'relu':
      return new Relu(spec.name, inShape, ctx);
    case 'flatten':
      return new Flatten(spec.name, inShape);
    case 'dropout':
      return new Dropout(spec.name, inShape, spec.p, ctx);
  }
}

export class Net {
  readonly params = new ParameterStore();
  readonly layers: Layer[] = [];
  private readonly scratch = new Scratch();
  /** Backward stops here: no layer below the first one with parameters needs a gradient. */
  private firstTrainable = -1;

  constructor(readonly spec: ModelSpec, private readonly backend: Backend) {
    let shape: number[] = spec.input;
    spec.layers.forEach((layerSpec, index) => {
      const fail = (problem: string): never => {
        throw new SpecError(`${spec.file}: layer ${index + 1} (${layerSpec.name}): ${problem}`);
      };
      const reserved = this.params.views.length;
      const layer = buildLayer(layerSpec, shape, { backend, params: this.params, index }, fail);
      if (this.firstTrainable < 0 && this.params.views.length > reserved) this.firstTrainable = index;
      if (layer.outShape.some((d) => d < 1)) fail(`output shape [${layer.outShape.join(', ')}] is empty`);
      this.layers.push(layer);
      shape = layer.outShape;
    });
    if (this.firstTrainable < 0) this.firstTrainable = this.layers.length;
    if (product(shape) !== spec.classes) {
      const last = spec.layers[spec.layers.length - 1];
      throw new SpecError(`${spec.file}: layer ${spec.layers.length} (${last.name}): outputs ${product(shape)} values but the model has ${spec.classes} classes`);
    }
    const count = this.params.views.reduce((n, view) => n + view.length, 0);
    try {
      this.params.allocate();
    } catch (error) {
      // V8's own message ("Invalid typed array length", "Array buffer allocation failed") names neither the file nor the size
      throw new SpecError(`${spec.file}: ${count} parameters (${((8 * count) / 2 ** 30).toFixed(1)} GiB with their gradients) cannot be allocated: ${(error as Error).message}`);
    }
  }

  /** Per-sample input length. */
  get inputSize(): number {
    return product(this.spec.input);
  }

  /** Fills the parameters from the seed alone: the same seed gives the same bits. */
  init(seed: number): void {
    const next = stream(seed);
    for (const layer of this.layers) layer.init?.(this.params, next);
  }

  /** logits[batch, classes]. */
  forward(x: Float32Array, batch: number, train: boolean, key: BatchKey): Float32Array {
    let y = x;
    for (const layer of this.layers) y = layer.forward(y, batch, train, key);
    return y;
  }

  /**
   * Forward, loss, and backward: params.gradients holds the gradient (overwritten) of the summed
   * per-sample losses divided by `normalizer` (default: the mean over this batch). A micro-batch
   * of a larger global batch passes the global batch's size. The loss returned is this batch's mean.
   */
  lossAndGradient(x: Float32Array, labels: Int32Array, batch: number, key: BatchKey, normalizer = batch): StepResult {
    const logits = this.forward(x, batch, true, key);
    const result = this.score(logits, labels, batch);
    let dy: Float32Array | null = this.scratch.get('dlogits', logits.length);
    if (normalizer !== batch) {
      const scale = batch / normalizer;
      for (let i = 0; i < dy.length; ++i) dy[i] *= scale;
    }
    for (let i = this.layers.length - 1; i >= this.firstTrainable && dy; --i) {
      dy = this.layers[i].backward(dy, batch, i > this.firstTrainable);
    }
    return result;
  }

  /** Loss and correct count without training behaviour (dropout off) or gradients. */
  evaluate(x: Float32Array, labels: Int32Array, batch: number): StepResult {
    return this.score(this.forward(x, batch, false, { seed: 0, epoch: 0, step: 0, shard: 0 }), labels, batch);
  }

  /** Loss and correct count of `logits`; leaves the loss gradient in the 'dlogits' scratch. */
  private score(logits: Float32Array, labels: Int32Array, batch: number): StepResult {
    const dlogits = this.scratch.get('dlogits', logits.length);
    const loss = this.backend.softmaxCrossEntropy(logits, labels, dlogits, [batch, this.spec.classes]);
    return { loss, correct: countCorrect(logits, labels, this.spec.classes) };
  }
}

function countCorrect(logits: Float32Array, labels: Int32Array, classes: number): number {
  let correct = 0;
  for (let i = 0; i < labels.length; ++i) {
    let best = 0;
    for (let c = 1; c < classes; ++c) if (logits[i * classes + c] > logits[i * classes + best]) best = c;
    if (best === labels[i]) correct += 1;
  }
  return correct;
}
