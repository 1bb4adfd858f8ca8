// What every layer is: per-sample shapes in and out, a forward that keeps what its backward
// needs, and a backward that writes parameter gradients into the flat buffer's views. Most layers
// take one input (Layer); add and concat take several (MergeLayer). Layers with state that is not
// trained by gradients (batchnorm's running statistics) keep it in the net's buffer store.
import type { Backend, Layout } from './backend';
import type { ParameterStore } from './params';

/** Keys of the randomness of one micro-batch: never the rank (docs/architecture.md, Determinism). */
export interface BatchKey {
  seed: number;
  epoch: number;
  step: number;
  shard: number;
}

export interface Layer {
  readonly name: string;
  /** Per-sample output shape: [C, H, W] or [F]. */
  readonly outShape: number[];
  /** Draws initial parameters from `next` (a seeded stream). */
  init?(params: ParameterStore, next: () => number): void;
  /** y[batch, ...outShape]; `train` turns dropout on. */
  forward(x: Float32Array, batch: number, train: boolean, key: BatchKey): Float32Array;
  /** dx for dy; writes (overwrites) this layer's parameter gradients. null when !needInputGrad. */
  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null;
  /** After a training forward: writes this micro-batch's statistics, times `scale`, into buffers.gradients' views. */
  recordStatistics?(buffers: ParameterStore, scale: number): void;
  /** Folds the step's summed statistics (laid out like buffers.data) into the buffers. */
  updateBuffers?(buffers: ParameterStore, summed: Float32Array): void;
}

/** A layer over several inputs of the same sample count; no parameters. */
export interface MergeLayer {
  readonly merge: true;
  readonly name: string;
  readonly outShape: number[];
  /** y[batch, ...outShape] from xs[k][batch, ...inShapes[k]]. */
  forward(xs: Float32Array[], batch: number): Float32Array;
  /** One dx per input, in the order of the inputs (they may be the same array). */
  backward(dy: Float32Array, batch: number): Float32Array[];
}

export interface LayerContext {
  backend: Backend;
  params: ParameterStore;
  /** Non-trained state (data) and each micro-batch's statistics for it (gradients), like params. */
  buffers: ParameterStore;
  /** Position in the net, part of the keys of its randomness. */
  index: number;
}

/** Reuses one Float32Array per size: activations live as long as the layer. */
export class Scratch {
  private buffers = new Map<string, Float32Array>();

  get(tag: string, length: number): Float32Array {
    const key = `${tag}:${length}`;
    let buffer = this.buffers.get(key);
    if (!buffer) {
      buffer = new Float32Array(length);
      this.buffers.set(key, buffer);
    }
    return buffer;
  }
}

export const product = (shape: number[]): number => shape.reduce((a, b) => a * b, 1);

/** Elements of `batch` activations of per-sample shape [C, H, W] in `layout` ('blocked' pads C to a multiple of the block). */
export function activationLength(backend: Backend, [c, h, w]: number[], batch: number, layout: Layout): number {
  const channels = layout === 'blocked' ? Math.ceil(c / backend.channelBlock) * backend.channelBlock : c;
  return batch * channels * h * w;
}
