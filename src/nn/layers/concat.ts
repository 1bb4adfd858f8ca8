// Concat: joins the inputs of each sample along channels ([C_k, H, W] -> [sum C_k, H, W]) or
// features ([F_k] -> [sum F_k]), in the order of the inputs. Per sample, input k's values are one
// contiguous run, so both cases are the same copy.
import { type MergeLayer, Scratch, product } from '../layer';

export class Concat implements MergeLayer {
  readonly merge = true;
  readonly outShape: number[];
  private readonly sizes: number[];
  private readonly total: number;
  private readonly scratch = new Scratch();
  private readonly dxs: Float32Array[];

  constructor(
    readonly name: string,
    inShapes: number[][],
  ) {
    this.sizes = inShapes.map(product);
    this.total = this.sizes.reduce((a, b) => a + b, 0);
    const channels = inShapes.reduce((sum, shape) => sum + shape[0], 0);
    this.outShape = [channels, ...inShapes[0].slice(1)];
    this.dxs = new Array<Float32Array>(inShapes.length);
  }

  forward(xs: Float32Array[], batch: number): Float32Array {
    const y = this.scratch.get('y', batch * this.total);
    for (let n = 0; n < batch; ++n) {
      let at = n * this.total;
      xs.forEach((x, k) => {
        const size = this.sizes[k];
        y.set(x.subarray(n * size, (n + 1) * size), at);
        at += size;
      });
    }
    return y;
  }

  backward(dy: Float32Array, batch: number): Float32Array[] {
    this.sizes.forEach((size, k) => {
      const dx = this.scratch.get(`dx${k}`, batch * size);
      let at = this.sizes.slice(0, k).reduce((a, b) => a + b, 0);
      for (let n = 0; n < batch; ++n, at += this.total) dx.set(dy.subarray(at, at + size), n * size);
      this.dxs[k] = dx;
    });
    return this.dxs;
  }
}
