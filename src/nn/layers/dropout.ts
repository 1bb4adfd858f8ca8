// Dropout (inverted): in training, each activation is kept with probability 1 - p and scaled by
// 1 / (1 - p). The mask is a pure function of (seed, layer, epoch, step, shard, index), drawn by the
// backend (Backend.dropoutMask): the same on any rank and either device.
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';

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
    const { backend } = this.ctx;
    const mask = this.scratch.get('mask', x.length);
    const y = this.scratch.get('y', x.length);
    backend.dropoutMask(mask, this.p, [key.seed, this.ctx.index, key.epoch, key.step, key.shard]);
    backend.multiply(x, mask, y);
    this.mask = mask;
    return y;
  }

  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    if (!this.mask) return dy;
    const dx = this.scratch.get('dx', dy.length);
    this.ctx.backend.multiply(dy, this.mask, dx);
    return dx;
  }
}
