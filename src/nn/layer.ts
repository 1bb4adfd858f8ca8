// What every layer is: per-sample shapes in and out, a forward that keeps what its backward
// needs, and a backward that writes parameter gradients into the flat buffer's views.
import type { Backend } from './backend';
import type { ParameterStore } from './params';

/** Keys of the randomness of one micro-batch (DESIGN.md: never the rank). */
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
}

export interface LayerContext {
  backend: Backend;
  params: ParameterStore;
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
