// LayerNorm, PyTorch's nn.LayerNorm(normalized_shape = the per-sample shape): each sample is
// normalised over all of its values with its own mean and biased variance,
// y = (x - mean) / sqrt(var + eps) * w + b, with element-wise affine weight (init 1) and bias
// (init 0) of the per-sample shape. A sequence [T, C] is normalised position by position
// (nn.LayerNorm(C), as in a transformer), with weight and bias [C]. Same in training and evaluation. The backend's kernels sum in
// float64 in a fixed order.
import { type BatchKey, type Layer, type LayerContext, Scratch, product } from '../layer';
import type { ParamView, ParameterStore } from '../params';

export class LayerNorm implements Layer {
  private readonly size: number;
  /** Rows per sample: a sequence's positions, else 1. */
  private readonly positions: number;
  private readonly weight: ParamView;
  private readonly bias: ParamView;
  private readonly scratch = new Scratch();
  /** 1 / sqrt(var + eps) per sample, one array per batch size seen (like Scratch). */
  private readonly invStds = new Map<number, Float64Array>();
  /** Of the last forward: invStd [batch] and x normalised. */
  private invStd: Float64Array = new Float64Array(0);
  private xhat?: Float32Array;

  constructor(
    readonly name: string,
    readonly outShape: number[],
    private readonly eps: number,
    private readonly ctx: LayerContext,
  ) {
    const sequence = outShape.length === 2;
    this.positions = sequence ? outShape[0] : 1;
    const normalized = sequence ? [outShape[1]] : outShape;
    this.size = product(normalized);
    this.weight = ctx.params.reserve(`${name}.weight`, normalized);
    this.bias = ctx.params.reserve(`${name}.bias`, normalized);
  }

  init(params: ParameterStore): void {
    params.param(this.weight).fill(1);
    params.param(this.bias).fill(0);
  }

  forward(x: Float32Array, samples: number, _train: boolean, _key: BatchKey): Float32Array {
    const { backend, params } = this.ctx;
    const batch = samples * this.positions;
    const y = this.scratch.get('y', x.length);
    this.xhat = this.scratch.get('xhat', x.length);
    if (this.invStd.length !== batch) {
      this.invStd = this.invStds.get(batch) ?? new Float64Array(batch);
      this.invStds.set(batch, this.invStd);
    }
    backend.layernormForward(x, params.param(this.weight), params.param(this.bias), y, this.xhat, this.invStd, this.eps, [
      batch,
      this.size,
    ]);
    return y;
  }

  /** Per sample, with g = dy w: dx = invStd (g - mean(g) - xhat mean(g xhat)); dw = sum_n dy xhat, db = sum_n dy. */
  backward(dy: Float32Array, samples: number, needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    const batch = samples * this.positions;
    const dx = needInputGrad ? this.scratch.get('dx', dy.length) : null;
    backend.layernormBackward(
      dy,
      this.xhat!,
      params.param(this.weight),
      this.invStd,
      dx,
      params.grad(this.weight),
      params.grad(this.bias),
      [batch, this.size],
    );
    return dx;
  }
}
