// Net: the layers of a model spec, a graph in topological order (spec.ts), over one flat parameter
// buffer, with the softmax cross-entropy loss on top. Non-trained state (batchnorm's running
// statistics) lives in a second flat buffer, `buffers`, with this micro-batch's contribution to its
// update in `statistics` (see layers/batchnorm.ts). Shapes are checked while the layers are built,
// before any buffer exists. Backward visits the layers in reverse spec order; an output read by
// several layers gets the sum of their gradients, added in that order.
// Layouts: convolutions write the backend's blocked layout; poolings, ReLUs, batchnorms and adds (of
// inputs in one layout) keep their input's, and global average pooling reads either, so a residual
// network never leaves it; the net reorders a blocked output to plain once for the layers (and the
// loss) that read plain, and their input gradients back to blocked.
// On a GPU backend (backend.device 'cuda') the layers' arrays name device memory: before each pass
// the net uploads its input, and its parameters unless an update on the GPU left the newer ones there
// (hostParams() brings those to the host for whoever reads them), after it downloads the gradients
// (into the placed slot) and the logits; everything between stays on the GPU, in the plain layout
// (the GPU's blocked one); the running statistics go up before each pass too.
// It builds only nets of the layer types the GPU computes.
// A language model (spec.language) reads windows of T + 1 tokens and scores its [T, V] logits at
// each position against the window's next token: its loss is the mean over the batch's positions.
import type { Backend, Layout } from './backend';
import { type BatchKey, type Layer, type LayerContext, type MergeLayer, Scratch, activationLength, product } from './layer';
import { Activation } from './layers/activation';
import { Add } from './layers/add';
import { Attention } from './layers/attention';
import { Embedding } from './layers/embedding';
import { LmHead } from './layers/lm-head';
import { BatchNorm } from './layers/batchnorm';
import { Concat } from './layers/concat';
import { Conv2d } from './layers/conv2d';
import { Dropout } from './layers/dropout';
import { Flatten } from './layers/flatten';
import { GlobalAvgPool } from './layers/global-avg-pool';
import { LayerNorm } from './layers/layernorm';
import { Linear } from './layers/linear';
import { Pool2d } from './layers/pool2d';
import { gpuLayerTypes } from './cuda';
import { type ParamView, ParameterStore } from './params';
import { stream } from '../base/random';
import { type LayerSpec, type ModelSpec, SpecError, inputIndices, modelInput } from './spec';

/** What lossAndGradient reports while it runs, for a caller sending gradients before it returns. */
export interface GradientProgress {
  /** the loss (this batch's mean) and the statistics are known; backward starts */
  lossKnown(loss: number): void;
  /** gradient elements [from, P) are final */
  gradientsFrom(from: number): void;
}

export interface StepResult {
  /** Mean cross-entropy over the batch (a language model's: over its positions). */
  loss: number;
  /** Samples whose largest logit is their label (a language model's: positions predicting their next token right, over T). */
  correct: number;
}

const shapeText = (shape: number[]): string => `[${shape.join(', ')}]`;

/** Layer types that take their input in either layout (add: where all its inputs share one). */
const layoutTaking = new Set<LayerSpec['type']>(['conv', 'maxpool', 'avgpool', 'relu', 'batchnorm', 'add', 'globalavgpool']);

/**
 * The layout of a layer's output, given the layout it reads its input in (plain unless it takes
 * either). Not the block's width, which the instruction-set level fixes: a net is built before the
 * job pins that (src/rank/kernel-level.ts).
 */
function outputLayout(spec: LayerSpec, inLayout: Layout): Layout {
  if (spec.type === 'conv') return 'blocked';
  return spec.type === 'globalavgpool' ? 'plain' : inLayout;
}

/** What a layer is built from beside its own spec: the model's, its inputs', and the layers before it. */
interface BuildContext {
  model: ModelSpec;
  inShapes: number[][];
  inNames: string[];
  /** A layer built earlier, by name. */
  earlier(name: string): Layer | MergeLayer | undefined;
}

function buildLayer(
  spec: LayerSpec,
  { model, inShapes, inNames, earlier }: BuildContext,
  ctx: LayerContext,
  inLayout: Layout,
  outLayout: Layout,
  fail: (problem: string) => never,
): Layer | MergeLayer {
  const inShape = inShapes[0];
  const sequence = (what: string): [number, number] => {
    if (inShape.length !== 2) fail(`expects a sequence [T, ${what}] input, got ${shapeText(inShape)}`);
    return inShape as [number, number];
  };
  const image = (): void => {
    if (inShape.length !== 3) fail(`expects a [C, H, W] input, got ${shapeText(inShape)}`);
  };
  const spatial = (kernel: number, pad: number): void => {
    image();
    const [, h, w] = inShape;
    if (h + 2 * pad < kernel || w + 2 * pad < kernel) fail(`kernel ${kernel} does not fit the ${h}x${w} input (pad ${pad})`);
  };
  switch (spec.type) {
    case 'conv':
      spatial(spec.kernel, spec.pad);
      return new Conv2d(spec.name, inShape, spec.filters, spec.kernel, spec.stride, spec.pad, ctx, { x: inLayout, y: outLayout });
    case 'maxpool':
    case 'avgpool':
      spatial(spec.kernel, spec.pad);
      return new Pool2d(spec.name, spec.type === 'maxpool' ? 'max' : 'avg', inShape, spec.kernel, spec.stride, spec.pad, ctx, inLayout);
    case 'linear':
      return new Linear(spec.name, inShape, spec.outputs, ctx);
    case 'relu':
      return new Activation(spec.name, inShape, 'relu', ctx);
    case 'flatten':
      return new Flatten(spec.name, inShape);
    case 'dropout':
      return new Dropout(spec.name, inShape, spec.p, ctx);
    case 'batchnorm':
      return new BatchNorm(spec.name, inShape, spec.momentum, spec.eps, ctx, inLayout);
    case 'layernorm':
      return new LayerNorm(spec.name, inShape, spec.eps, ctx);
    case 'embedding': {
      const { context, vocab } = model.language!;
      if (inNames[0] !== modelInput) fail(`reads "${inNames[0]}", but an embedding reads the model input (the token windows)`);
      return new Embedding(spec.name, context, vocab, spec.dim, ctx);
    }
    case 'attention': {
      const [T, width] = sequence('3C');
      if (width % 3 !== 0) fail(`expects queries, keys and values side by side ([T, 3C]), got ${width} values per position`);
      if ((width / 3) % spec.heads !== 0) fail(`${spec.heads} heads do not divide the width ${width / 3}`);
      return new Attention(spec.name, T, width / 3, spec.heads, ctx);
    }
    case 'gelu':
      return new Activation(spec.name, inShape, 'gelu', ctx);
    case 'lmhead': {
      const [T, width] = sequence('C');
      const embedding = earlier(spec.embedding) as Embedding;
      if (width !== embedding.dim) fail(`reads ${width} values per position, but "${spec.embedding}" embeds ${embedding.dim}`);
      return new LmHead(spec.name, T, width, embedding.tie(), ctx);
    }
    case 'globalavgpool':
      image();
      return new GlobalAvgPool(spec.name, inShape, ctx, inLayout);
    case 'add':
      inShapes.forEach((shape, k) => {
        if (shapeText(shape) !== shapeText(inShape)) {
          fail(`cannot add "${inNames[k]}" ${shapeText(shape)} to "${inNames[0]}" ${shapeText(inShape)}: shapes differ`);
        }
      });
      return new Add(spec.name, inShape, inShapes.length, ctx);
    case 'concat':
      inShapes.forEach((shape, k) => {
        if (shape.length !== inShape.length) {
          fail(
            `cannot concat "${inNames[k]}" ${shapeText(shape)} with "${inNames[0]}" ${shapeText(inShape)}: one is [F], the other [C, H, W]`,
          );
        }
        if (shapeText(shape.slice(1)) !== shapeText(inShape.slice(1))) {
          fail(
            `cannot concat "${inNames[k]}" ${shapeText(shape)} with "${inNames[0]}" ${shapeText(inShape)}: spatial sizes differ (${shape[1]}x${shape[2]} vs ${inShape[1]}x${inShape[2]})`,
          );
        }
      });
      return new Concat(spec.name, inShapes);
  }
}

export class Net {
  readonly params = new ParameterStore();
  /** Running statistics (data) and this micro-batch's statistics (gradients), in layer order. */
  private readonly state = new ParameterStore();
  readonly layers: Array<Layer | MergeLayer> = [];
  /** The nodes each layer reads, in the order of its inputs: a layer's index, -1 for the model input. */
  private readonly sources: number[][] = [];
  /** Per layer: it or a layer it reads from, directly or not, has parameters (backward stops elsewhere). */
  private readonly needsGrad: boolean[] = [];
  /** Per layer: where its parameters start in the flat buffer (undefined: it has none). */
  private readonly paramsFrom: Array<number | undefined> = [];
  /** Per layer: how many inputs of later layers read its output. */
  private readonly readers: number[];
  /** Per layer: the layout of its output, whether it reads its inputs in their layouts, and its per-sample output shape. */
  private readonly layouts: Layout[] = [];
  private readonly takesLayout: boolean[] = [];
  private readonly shapes: number[][] = [];
  /** Per layer whose blocked output some layer (or the loss) reads plain: that output reordered, after each forward. */
  private readonly plainReaders: boolean[];
  private readonly plainOutputs: Float32Array[];
  /** Per layer: its output of the last forward, and its gradient during backward. */
  private readonly outputs: Float32Array[];
  private readonly grads: Array<Float32Array | null>;
  /** Per merge layer: the arrays of its inputs, filled at each forward. */
  private readonly mergeInputs: Float32Array[][];
  private readonly scratch = new Scratch();
  /** A language model's next tokens, for the largest batch seen. */
  private targets = new Int32Array(0);
  /** The backend computes on a GPU (see the top of this file). */
  private readonly onDevice: boolean;
  /** On a GPU: where the gradients go after each pass (placeGradients), else params.gradients. */
  private gradientTarget?: Float32Array;
  /**
   * On a GPU: whether an update on the device (paramsUpdatedOnDevice) made the parameters' device
   * copy newer than the host's, which hostParams() then brings up to date. Otherwise the host's are
   * the newest (anything may have written them) and each pass uploads them.
   */
  private deviceParamsNewer = false;

  constructor(
    readonly spec: ModelSpec,
    /** where the layers compute */
    readonly backend: Backend,
  ) {
    this.onDevice = backend.device !== 'cpu';
    const shapes = this.shapes;
    const shapeOf = (node: number): number[] => (node < 0 ? spec.input : shapes[node]);
    const nameOf = (node: number): string => (node < 0 ? modelInput : spec.layers[node].name);
    this.readers = new Array<number>(spec.layers.length).fill(0);
    this.plainReaders = new Array<boolean>(spec.layers.length).fill(false);
    spec.layers.forEach((layerSpec, index) => {
      const fail = (problem: string): never => {
        throw new SpecError(`${spec.file}: layer ${index + 1} (${layerSpec.name}): ${problem}`);
      };
      const sources = inputIndices(spec, index);
      if (this.onDevice && !gpuLayerTypes.has(layerSpec.type)) {
        fail(
          `a ${layerSpec.type} layer has no GPU kernels yet (--device ${backend.device} computes ${[...gpuLayerTypes].join(', ')} layers)`,
        );
      }
      const reserved = this.params.views.length;
      const context = { backend, params: this.params, buffers: this.state, index };
      const sourceLayouts = sources.map((j): Layout => (j >= 0 ? this.layouts[j] : 'plain'));
      const takesLayout = layoutTaking.has(layerSpec.type) && sourceLayouts.every((layout) => layout === sourceLayouts[0]);
      const inLayout = takesLayout ? sourceLayouts[0] : 'plain';
      const outLayout = this.onDevice ? 'plain' : outputLayout(layerSpec, inLayout);
      const build = {
        model: spec,
        inShapes: sources.map(shapeOf),
        inNames: sources.map(nameOf),
        earlier: (name: string) => this.layers[spec.layers.findIndex((l) => l.name === name)],
      };
      const layer = buildLayer(layerSpec, build, context, inLayout, outLayout, fail);
      if (layer.outShape.some((d) => d < 1)) fail(`output shape [${layer.outShape.join(', ')}] is empty`);
      this.layers.push(layer);
      this.sources.push(sources);
      this.layouts.push(outLayout);
      this.takesLayout.push(takesLayout);
      if (!takesLayout) for (const j of sources) if (j >= 0) this.plainReaders[j] = true;
      this.needsGrad.push(this.params.views.length > reserved || sources.some((j) => j >= 0 && this.needsGrad[j]));
      this.paramsFrom.push(this.params.views[reserved]?.offset);
      for (const j of sources) if (j >= 0) this.readers[j] += 1;
      shapes.push(layer.outShape);
    });
    const shape = shapes[shapes.length - 1];
    if (spec.language) {
      const { context, vocab } = spec.language;
      if (shapeText(shape) !== shapeText([context, vocab])) {
        const last = spec.layers[spec.layers.length - 1];
        throw new SpecError(
          `${spec.file}: layer ${spec.layers.length} (${last.name}): outputs ${shapeText(shape)} but a language model outputs [context, vocab] = ${shapeText([context, vocab])}`,
        );
      }
    } else if (product(shape) !== spec.classes) {
      const last = spec.layers[spec.layers.length - 1];
      throw new SpecError(
        `${spec.file}: layer ${spec.layers.length} (${last.name}): outputs ${product(shape)} values but the model has ${spec.classes} classes`,
      );
    }
    this.plainReaders[this.layers.length - 1] = true;
    this.plainOutputs = new Array<Float32Array>(this.layers.length);
    this.outputs = new Array<Float32Array>(this.layers.length);
    this.grads = new Array<Float32Array | null>(this.layers.length).fill(null);
    this.mergeInputs = this.sources.map((sources) => new Array<Float32Array>(sources.length));
    const count = this.params.views.reduce((n, view) => n + view.length, 0);
    try {
      // on a GPU, in page-locked memory: each pass uploads the parameters and downloads the gradients
      this.params.allocate(this.onDevice ? (length) => backend.hostArray(length) : undefined);
      this.state.allocate();
    } catch (error) {
      // V8's own message ("Invalid typed array length", "Array buffer allocation failed") names neither the file nor the size
      throw new SpecError(
        `${spec.file}: ${count} parameters (${((8 * count) / 2 ** 30).toFixed(1)} GiB with their gradients) cannot be allocated: ${(error as Error).message}`,
      );
    }
  }

  /** A zeroed buffer of `length` floats for this net's inputs, the kind its backend uploads fastest (page-locked on a GPU). */
  inputBuffer(length: number): Float32Array {
    return this.backend.hostArray(length);
  }

  /** Per-sample input length. */
  get inputSize(): number {
    return product(this.spec.input);
  }

  /** Non-trained state (batchnorm running means and variances), in layer order; empty without any. */
  get buffers(): Float32Array {
    return this.state.data;
  }

  /** Names, offsets and shapes of the tensors in `buffers` (e.g. "bn1.running_mean"). */
  get bufferViews(): readonly ParamView[] {
    return this.state.views;
  }

  /**
   * Laid out like `buffers`: after lossAndGradient, this micro-batch's batch mean and unbiased batch
   * variance per element, times batch / normalizer. Summed over a step's micro-batches in shard
   * order, it is what updateBuffers takes.
   */
  get statistics(): Float32Array {
    return this.state.gradients;
  }

  /**
   * Where lossAndGradient leaves its results from now on: the gradient in vector[0, P) and the
   * statistics in vector[P, P + B) (a slot of the shard-ordered sum: no copy into it follows).
   */
  placeGradients(vector: Float32Array): void {
    const P = this.params.data.length;
    if (this.onDevice) {
      // the layers keep computing into the store's gradients on the GPU; each pass downloads them
      // here. The statistics are written on the host (recordStatistics), straight into the slot.
      this.gradientTarget = vector.subarray(0, P);
      this.state.placeGradients(vector.subarray(P, P + this.buffers.length));
      return;
    }
    this.params.placeGradients(vector.subarray(0, P));
    this.state.placeGradients(vector.subarray(P, P + this.buffers.length));
  }

  /** Fills the parameters and buffers from the seed alone: the same seed gives the same bits. */
  init(seed: number): void {
    const next = stream(seed);
    for (const layer of this.layers) if (!('merge' in layer)) layer.init?.(this.params, next);
  }

  /** logits[batch, classes] (in host memory on any backend). */
  forward(x: Float32Array, batch: number, train: boolean, key: BatchKey): Float32Array {
    if (!this.onDevice) return this.run(x, batch, train, key);
    const logits = this.run(this.toDevice(x), batch, train, key);
    return this.toHost(logits, 'hostLogits');
  }

  /** On a GPU: uploads the parameters (unless the device's are newer) and x, and returns the array naming x's device copy. */
  private toDevice(x: Float32Array): Float32Array {
    this.paramsToDevice();
    // the running statistics (an evaluation reads them) change on the host, at each step's end
    if (this.buffers.length > 0) this.backend.upload(this.buffers, this.buffers);
    const input = this.scratch.get('input', x.length);
    this.backend.upload(x, input);
    return input;
  }

  /** On a GPU: the parameters' device copy made current, uploaded unless an update there made it the newer one. */
  paramsToDevice(): void {
    if (this.onDevice && !this.deviceParamsNewer) this.backend.upload(this.params.data, this.params.data);
  }

  /** On a GPU: an update on the device changed the parameters there; the host's copy is older until hostParams(). */
  paramsUpdatedOnDevice(): void {
    this.deviceParamsNewer = this.onDevice;
  }

  /**
   * The parameters on the host, brought up to date where an update on the GPU made the device's
   * newer. Whatever reads or writes params.data on the host between steps (a checkpoint, a hash, a
   * join, a rollback) takes them from here; the next pass then uploads them again.
   */
  hostParams(): Float32Array {
    if (this.deviceParamsNewer) this.backend.download(this.params.data, this.params.data);
    this.deviceParamsNewer = false;
    return this.params.data;
  }

  /** On a GPU: a host copy of `mirrored`, in a buffer kept under `tag`. */
  private toHost(mirrored: Float32Array, tag: string): Float32Array {
    const host = this.scratch.get(tag, mirrored.length);
    this.backend.download(mirrored, host);
    return host;
  }

  /** The layers' forward over x (device memory on a GPU): logits[batch, classes], on the backend's side. */
  private run(x: Float32Array, batch: number, train: boolean, key: BatchKey): Float32Array {
    const input = (j: number, reader: number): Float32Array => {
      if (j < 0) return x;
      return this.isBlocked(j) && !this.takesLayout[reader] ? this.plainOutputs[j] : this.outputs[j];
    };
    this.layers.forEach((layer, i) => {
      const sources = this.sources[i];
      if ('merge' in layer) {
        const xs = this.mergeInputs[i];
        sources.forEach((j, k) => {
          xs[k] = input(j, i);
        });
        this.outputs[i] = layer.forward(xs, batch);
      } else {
        this.outputs[i] = layer.forward(input(sources[0], i), batch, train, key);
      }
      if (this.isBlocked(i) && this.plainReaders[i]) this.plainOutputs[i] = this.converted(i, this.outputs[i], batch, 'plain');
    });
    const last = this.layers.length - 1;
    return this.isBlocked(last) ? this.plainOutputs[last] : this.outputs[last];
  }

  private isBlocked(node: number): boolean {
    return this.layouts[node] === 'blocked';
  }

  /** Node j's output (or its gradient), x, reordered into `to` in a buffer kept for it. */
  private converted(j: number, x: Float32Array, batch: number, to: Layout, tag = ''): Float32Array {
    const [c, h, w] = this.shapes[j];
    const y = this.scratch.get(`${to}${j}${tag}`, activationLength(this.backend, this.shapes[j], batch, to));
    this.backend.convertLayout(x, y, [batch, c, h, w], to);
    return y;
  }

  /**
   * Forward, loss, and backward: params.gradients holds the gradient (overwritten) of the summed
   * per-sample losses divided by `normalizer` (default: the mean over this batch), and `statistics`
   * this batch's statistics with the same weight, batch / normalizer. A micro-batch of a larger
   * global batch passes the global batch's size. The loss returned is this batch's mean.
   * `progress` hears of the loss before backward starts and of each layer's gradients once final.
   */
  lossAndGradient(
    x: Float32Array,
    labels: Int32Array,
    batch: number,
    key: BatchKey,
    normalizer = batch,
    progress?: GradientProgress,
  ): StepResult {
    const logits = this.run(this.onDevice ? this.toDevice(x) : x, batch, true, key);
    const result = this.score(logits, x, labels, batch);
    const dy = this.scratch.get('dlogits', logits.length);
    if (normalizer !== batch) {
      const scale = batch / normalizer;
      if (this.onDevice) this.backend.scaleInPlace(dy, scale);
      else for (let i = 0; i < dy.length; ++i) dy[i] *= scale;
    }
    for (const layer of this.layers) if (!('merge' in layer)) layer.recordStatistics?.(this.state, batch / normalizer);
    progress?.lossKnown(result.loss);
    if (!this.onDevice) {
      this.backward(dy, batch, progress);
      return result;
    }
    this.backward(dy, batch);
    const gradients = this.params.gradients;
    this.backend.download(gradients, this.gradientTarget ?? gradients);
    progress?.gradientsFrom(0);
    return result;
  }

  /** Folds a step's summed `statistics` into `buffers`: running = (1 - momentum) running + momentum S. */
  updateBuffers(summedStatistics: Float32Array): void {
    if (summedStatistics.length !== this.buffers.length) {
      throw new RangeError(`updateBuffers: ${summedStatistics.length} statistics for ${this.buffers.length} buffer values`);
    }
    for (const layer of this.layers) if (!('merge' in layer)) layer.updateBuffers?.(this.state, summedStatistics);
  }

  /** Loss and correct count in evaluation mode (dropout off, batchnorm on running statistics), no gradients. */
  evaluate(x: Float32Array, labels: Int32Array, batch: number): StepResult {
    const input = this.onDevice ? this.toDevice(x) : x;
    return this.score(this.run(input, batch, false, { seed: 0, epoch: 0, step: 0, shard: 0 }), x, labels, batch);
  }

  /** Reverse spec order, from the logits' gradient; skips what no parameter needs. */
  private backward(dlogits: Float32Array, batch: number, progress?: GradientProgress): void {
    const grads = this.grads;
    grads.fill(null);
    const last = this.layers.length - 1;
    grads[last] = this.isBlocked(last) ? this.converted(last, dlogits, batch, 'blocked', 'loss') : dlogits;
    const wanted = (j: number): boolean => j >= 0 && this.needsGrad[j];
    // dx of reader i's k-th input, node j, in j's layout
    const inLayout = (j: number, i: number, k: number, dx: Float32Array): Float32Array =>
      this.isBlocked(j) && !this.takesLayout[i] ? this.converted(j, dx, batch, 'blocked', `by${i}.${k}`) : dx;
    for (let i = last; i >= 0; --i) {
      if (!this.needsGrad[i]) continue;
      const layer = this.layers[i];
      const sources = this.sources[i];
      if ('merge' in layer) {
        const dxs = layer.backward(grads[i]!, batch);
        sources.forEach((j, k) => {
          if (wanted(j)) this.accumulate(j, inLayout(j, i, k, dxs[k]));
        });
      } else {
        const dx = layer.backward(grads[i]!, batch, wanted(sources[0]));
        const from = this.paramsFrom[i];
        // parameters are laid out in layer order, visited here in reverse: all from here on are final
        if (from !== undefined) progress?.gradientsFrom(from);
        if (dx) this.accumulate(sources[0], inLayout(sources[0], i, 0, dx));
      }
    }
  }

  /** Adds dx into node j's gradient: a node read once takes dx itself, others a sum of copies. */
  private accumulate(j: number, dx: Float32Array): void {
    const current = this.grads[j];
    if (this.readers[j] === 1) {
      this.grads[j] = dx;
    } else if (!current) {
      const sum = this.scratch.get(`grad${j}`, dx.length);
      this.backend.copy(dx, sum);
      this.grads[j] = sum;
    } else {
      this.backend.addInPlace(current, dx);
    }
  }

  /** Loss and correct count of `logits` (the backend's) for inputs x (host); leaves the loss gradient in the 'dlogits' scratch. */
  private score(logits: Float32Array, x: Float32Array, labels: Int32Array, batch: number): StepResult {
    const dlogits = this.scratch.get('dlogits', logits.length);
    const { classes, language } = this.spec;
    const hostLogits = (): Float32Array => (this.onDevice ? this.toHost(logits, 'hostLogits') : logits);
    if (!language) {
      const loss = this.backend.softmaxCrossEntropy(logits, labels, dlogits, [batch, classes]);
      return { loss, correct: countCorrect(hostLogits(), labels, classes) };
    }
    const T = language.context;
    const targets = this.nextTokens(x, batch, T);
    const loss = this.backend.softmaxCrossEntropy(logits, targets, dlogits, [batch * T, classes]);
    return { loss, correct: countCorrect(hostLogits(), targets, classes) / T };
  }

  /** targets[n T + t] = token t + 1 of window n: what position t predicts. */
  private nextTokens(x: Float32Array, batch: number, T: number): Int32Array {
    if (this.targets.length < batch * T) this.targets = new Int32Array(batch * T);
    const targets = this.targets.subarray(0, batch * T);
    for (let n = 0; n < batch; ++n) for (let t = 0; t < T; ++t) targets[n * T + t] = x[n * (T + 1) + t + 1];
    return targets;
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
