// Global average pooling: [C, H, W] -> [C], each channel's mean over H x W (summed in float64).
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';

export class GlobalAvgPool implements Layer {
  readonly outShape: number[];
  private readonly scratch = new Scratch();
  private readonly area: number;

  constructor(readonly name: string, inShape: number[], private readonly ctx: LayerContext) {
    this.outShape = [inShape[0]];
    this.area = inShape[1] * inShape[2];
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const y = this.scratch.get('y', batch * this.outShape[0]);
    this.ctx.backend.globalAvgPoolForward(x, y, [y.length, this.area]);
    return y;
  }

  /** dx = dy / (H x W) at every position of the channel. */
  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', dy.length * this.area);
    this.ctx.backend.globalAvgPoolBackward(dy, dx, [dy.length, this.area]);
    return dx;
  }
}
