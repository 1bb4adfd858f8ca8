// Flatten: [C, H, W] -> [C * H * W]; the data is already laid out so, nothing moves.
import { type Layer, product } from '../layer';

export class Flatten implements Layer {
  readonly outShape: number[];

  constructor(
    readonly name: string,
    inShape: number[],
  ) {
    this.outShape = [product(inShape)];
  }

  forward(x: Float32Array): Float32Array {
    return x;
  }

  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    return needInputGrad ? dy : null;
  }
}
