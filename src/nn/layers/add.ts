// Add: the element-wise sum of inputs of one shape, added in the order of the inputs (float32).
import { type MergeLayer, type LayerContext, Scratch } from '../layer';

export class Add implements MergeLayer {
  readonly merge = true;
  private readonly scratch = new Scratch();
  private readonly dxs: Float32Array[];

  constructor(
    readonly name: string,
    readonly outShape: number[],
    inputs: number,
    private readonly ctx: LayerContext,
  ) {
    this.dxs = new Array<Float32Array>(inputs);
  }

  forward(xs: Float32Array[], _batch: number): Float32Array {
    const y = this.scratch.get('y', xs[0].length);
    this.ctx.backend.copy(xs[0], y);
    for (let k = 1; k < xs.length; ++k) this.ctx.backend.addInPlace(y, xs[k]);
    return y;
  }

  /** Every input's gradient is dy itself. */
  backward(dy: Float32Array, _batch: number): Float32Array[] {
    return this.dxs.fill(dy);
  }
}
