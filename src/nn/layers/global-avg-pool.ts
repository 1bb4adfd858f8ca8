// Global average pooling: [C, H, W] -> [C], each channel's mean over H x W (summed in float64).
import { type BatchKey, type Layer, Scratch } from '../layer';

export class GlobalAvgPool implements Layer {
  readonly outShape: number[];
  private readonly scratch = new Scratch();
  private readonly area: number;

  constructor(readonly name: string, inShape: number[]) {
    this.outShape = [inShape[0]];
    this.area = inShape[1] * inShape[2];
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const y = this.scratch.get('y', batch * this.outShape[0]);
    for (let j = 0; j < y.length; ++j) {
      let sum = 0;
      for (let i = j * this.area, end = i + this.area; i < end; ++i) sum += x[i];
      y[j] = sum / this.area;
    }
    return y;
  }

  /** dx = dy / (H x W) at every position of the channel. */
  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', dy.length * this.area);
    for (let j = 0; j < dy.length; ++j) dx.fill(dy[j] / this.area, j * this.area, (j + 1) * this.area);
    return dx;
  }
}
