// LayerNorm, PyTorch's nn.LayerNorm(normalized_shape = the per-sample shape): each sample is
// normalised over all of its values with its own mean and biased variance,
// y = (x - mean) / sqrt(var + eps) * w + b, with element-wise affine weight (init 1) and bias
// (init 0) of the per-sample shape. Same in training and evaluation. Sums in float64, fixed order.
import { type BatchKey, type Layer, type LayerContext, Scratch, product } from '../layer';
import type { ParamView, ParameterStore } from '../params';

export class LayerNorm implements Layer {
  private readonly size: number;
  private readonly weight: ParamView;
  private readonly bias: ParamView;
  private readonly scratch = new Scratch();
  /** 1 / sqrt(var + eps) per sample of the last forward, [batch] (grows to the largest batch seen). */
  private invStd = new Float64Array(0);
  /** Weight and bias gradients summed over the batch in float64, [size] each. */
  private readonly dwSum: Float64Array;
  private readonly dbSum: Float64Array;
  private xhat?: Float32Array;

  constructor(readonly name: string, readonly outShape: number[], private readonly eps: number,
    private readonly ctx: LayerContext) {
    this.size = product(outShape);
    this.weight = ctx.params.reserve(`${name}.weight`, outShape);
    this.bias = ctx.params.reserve(`${name}.bias`, outShape);
    this.dwSum = new Float64Array(this.size);
    this.dbSum = new Float64Array(this.size);
  }

  init(params: ParameterStore): void {
    params.param(this.weight).fill(1);
    params.param(this.bias).fill(0);
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const { params } = this.ctx;
    const w = params.param(this.weight);
    const b = params.param(this.bias);
    const y = this.scratch.get('y', x.length);
    const xhat = this.scratch.get('xhat', x.length);
    if (this.invStd.length < batch) this.invStd = new Float64Array(batch);
    const d = this.size;
    for (let n = 0; n < batch; ++n) {
      const base = n * d;
      let sum = 0;
      for (let i = 0; i < d; ++i) sum += x[base + i];
      const mean = sum / d;
      let squares = 0;
      for (let i = 0; i < d; ++i) squares += (x[base + i] - mean) ** 2;
      const invStd = 1 / Math.sqrt(squares / d + this.eps);
      this.invStd[n] = invStd;
      for (let i = 0; i < d; ++i) {
        xhat[base + i] = (x[base + i] - mean) * invStd;
        y[base + i] = xhat[base + i] * w[i] + b[i];
      }
    }
    this.xhat = xhat;
    return y;
  }

  /** Per sample, with g = dy w: dx = invStd (g - mean(g) - xhat mean(g xhat)); dw = sum_n dy xhat, db = sum_n dy. */
  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    const { params } = this.ctx;
    const w = params.param(this.weight);
    const xhat = this.xhat!;
    const d = this.size;
    const dx = needInputGrad ? this.scratch.get('dx', dy.length) : null;
    this.dwSum.fill(0);
    this.dbSum.fill(0);
    for (let n = 0; n < batch; ++n) {
      const base = n * d;
      let sumG = 0;
      let sumGXhat = 0;
      for (let i = 0; i < d; ++i) {
        const g = dy[base + i] * w[i];
        sumG += g;
        sumGXhat += g * xhat[base + i];
        this.dwSum[i] += dy[base + i] * xhat[base + i];
        this.dbSum[i] += dy[base + i];
      }
      if (!dx) continue;
      const [meanG, meanGXhat] = [sumG / d, sumGXhat / d];
      for (let i = 0; i < d; ++i) {
        dx[base + i] = this.invStd[n] * (dy[base + i] * w[i] - meanG - xhat[base + i] * meanGXhat);
      }
    }
    params.grad(this.weight).set(this.dwSum);
    params.grad(this.bias).set(this.dbSum);
    return dx;
  }
}
