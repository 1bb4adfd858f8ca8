// Global average pooling: [C, H, W] -> [C], each channel's mean over H x W (summed in float64); the
// input (and its gradient) in its producer's layout, the output plain.
import type { Layout, NormShape } from '../backend';
import { type BatchKey, type Layer, type LayerContext, Scratch, activationLength } from '../layer';

export class GlobalAvgPool implements Layer {
  readonly outShape: number[];
  private readonly scratch = new Scratch();
  private readonly area: number;

  constructor(
    readonly name: string,
    private readonly inShape: number[],
    private readonly ctx: LayerContext,
    private readonly layout: Layout,
  ) {
    this.outShape = [inShape[0]];
    this.area = inShape[1] * inShape[2];
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const y = this.scratch.get('y', batch * this.outShape[0]);
    this.ctx.backend.globalAvgPoolForward(x, y, this.shape(batch), this.layout);
    return y;
  }

  /** dx = dy / (H x W) at every position of the channel. */
  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', activationLength(this.ctx.backend, this.inShape, batch, this.layout));
    this.ctx.backend.globalAvgPoolBackward(dy, dx, this.shape(batch), this.layout);
    return dx;
  }

  private shape(batch: number): NormShape {
    return [batch, this.outShape[0], this.area];
  }
}
