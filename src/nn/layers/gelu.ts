// GELU: y = x Phi(x) (the exact form, with erf, as PyTorch's nn.GELU()), same shape.
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';

export class Gelu implements Layer {
  private readonly scratch = new Scratch();
  private input?: Float32Array;

  constructor(
    readonly name: string,
    readonly outShape: number[],
    private readonly ctx: LayerContext,
  ) {}

  forward(x: Float32Array, _batch: number, _train: boolean, _key: BatchKey): Float32Array {
    this.input = x;
    const y = this.scratch.get('y', x.length);
    this.ctx.backend.geluForward(x, y);
    return y;
  }

  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', dy.length);
    this.ctx.backend.geluBackward(this.input!, dy, dx);
    return dx;
  }
}
