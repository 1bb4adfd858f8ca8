// Dropout (inverted): in training, each activation is kept with probability 1 - p and scaled by
// 1 / (1 - p). The mask is a pure function of (seed, layer, epoch, step, shard, index).
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';
import { uniform } from '../../base/random';

export class Dropout implements Layer {
  private readonly scratch = new Scratch();
  private mask?: Float32Array;

  constructor(
    readonly name: string,
    readonly outShape: number[],
    private readonly p: number,
    private readonly ctx: LayerContext,
  ) {}

  forward(x: Float32Array, _batch: number, train: boolean, key: BatchKey): Float32Array {
    if (!train || this.p === 0) {
      this.mask = undefined;
      return x;
    }
    const mask = this.scratch.get('mask', x.length);
    const y = this.scratch.get('y', x.length);
    const scale = 1 / (1 - this.p);
    for (let i = 0; i < x.length; ++i) {
      mask[i] = uniform(key.seed, this.ctx.index, key.epoch, key.step, key.shard, i) < this.p ? 0 : scale;
      y[i] = x[i] * mask[i];
    }
    this.mask = mask;
    return y;
  }

  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    if (!this.mask) return dy;
    const dx = this.scratch.get('dx', dy.length);
    for (let i = 0; i < dy.length; ++i) dx[i] = dy[i] * this.mask[i];
    return dx;
  }
}
