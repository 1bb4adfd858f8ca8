// BatchNorm: per channel over [C, H, W] (statistics over the batch and H x W) or per feature over
// [F] (over the batch); affine weight [C] (init 1) and bias [C] (init 0), like PyTorch's
// BatchNorm2d / BatchNorm1d.
//
// Training normalises with the statistics of the micro-batch it is given (one shard's rows at this
// step, like DDP without SyncBatchNorm): a shard's gradient does not depend on which rank computes it.
// Running statistics are buffers, not parameters, and are world-size independent:
//   running = (1 - momentum) * running + momentum * S    (float32, each operation rounded)
// where S is the row-weighted average over the step's shards of each shard's batch mean (and of its
// unbiased batch variance, as PyTorch's running_var uses), summed in shard order. After a training
// forward, recordStatistics writes this micro-batch's mean and unbiased variance times
// batch / normalizer (the loss's weighting), so summing the statistics of the step's micro-batches in
// shard order gives S; updateBuffers then applies the formula. With one value per channel in a
// micro-batch (m = batch x H x W = 1) the unbiased variance is undefined; the biased one (0) is used.
// Evaluation normalises with the running statistics: y = (x - mean) / sqrt(var + eps) * w + b.
// The backend's kernels sum in float64 in a fixed order (sample, then position), independent of
// thread count and of the layout: a [C, H, W] input comes in its producer's layout (the net's choice),
// and the output and input gradient keep it.
import type { Layout, NormShape } from '../backend';
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';
import type { ParamView, ParameterStore } from '../params';

export class BatchNorm implements Layer {
  private readonly channels: number;
  /** Values per channel per sample (H x W, or 1). */
  private readonly spatial: number;
  private readonly weight: ParamView;
  private readonly bias: ParamView;
  private readonly runningMean: ParamView;
  private readonly runningVar: ParamView;
  private readonly scratch = new Scratch();
  /** Per channel, of the last training forward: batch mean, unbiased variance, 1 / sqrt(biased var + eps). */
  private readonly mean: Float64Array;
  private readonly unbiased: Float64Array;
  private readonly invStd: Float64Array;
  /** x normalised, [batch, ...outShape], of the last training forward. */
  private xhat?: Float32Array;

  constructor(
    readonly name: string,
    readonly outShape: number[],
    private readonly momentum: number,
    private readonly eps: number,
    private readonly ctx: LayerContext,
    private readonly layout: Layout,
  ) {
    this.channels = outShape[0];
    this.spatial = outShape.length === 3 ? outShape[1] * outShape[2] : 1;
    this.weight = ctx.params.reserve(`${name}.weight`, [this.channels]);
    this.bias = ctx.params.reserve(`${name}.bias`, [this.channels]);
    this.runningMean = ctx.buffers.reserve(`${name}.running_mean`, [this.channels]);
    this.runningVar = ctx.buffers.reserve(`${name}.running_var`, [this.channels]);
    this.mean = new Float64Array(this.channels);
    this.unbiased = new Float64Array(this.channels);
    this.invStd = new Float64Array(this.channels);
  }

  init(params: ParameterStore): void {
    params.param(this.weight).fill(1);
    params.param(this.bias).fill(0);
    this.ctx.buffers.param(this.runningMean).fill(0);
    this.ctx.buffers.param(this.runningVar).fill(1);
  }

  forward(x: Float32Array, batch: number, train: boolean, _key: BatchKey): Float32Array {
    const { backend, params, buffers } = this.ctx;
    const w = params.param(this.weight);
    const b = params.param(this.bias);
    const y = this.scratch.get('y', x.length);
    const shape: NormShape = [batch, this.channels, this.spatial];
    if (!train) {
      backend.batchnormForwardEval(
        x,
        w,
        b,
        buffers.param(this.runningMean),
        buffers.param(this.runningVar),
        y,
        this.eps,
        shape,
        this.layout,
      );
      return y;
    }
    this.xhat = this.scratch.get('xhat', x.length);
    backend.batchnormForwardTrain(x, w, b, y, this.xhat, this.mean, this.unbiased, this.invStd, this.eps, shape, this.layout);
    return y;
  }

  /** dx = w invStd (dy - mean(dy) - xhat mean(dy xhat)), per channel; dw = sum(dy xhat), db = sum(dy). */
  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    const dx = needInputGrad ? this.scratch.get('dx', dy.length) : null;
    backend.batchnormBackward(
      dy,
      this.xhat!,
      params.param(this.weight),
      this.invStd,
      dx,
      params.grad(this.weight),
      params.grad(this.bias),
      [batch, this.channels, this.spatial],
      this.layout,
    );
    return dx;
  }

  recordStatistics(buffers: ParameterStore, scale: number): void {
    const mean = buffers.grad(this.runningMean);
    const variance = buffers.grad(this.runningVar);
    for (let ch = 0; ch < this.channels; ++ch) {
      mean[ch] = this.mean[ch] * scale;
      variance[ch] = this.unbiased[ch] * scale;
    }
  }

  updateBuffers(buffers: ParameterStore, summed: Float32Array): void {
    const keep = Math.fround(1 - this.momentum);
    const momentum = Math.fround(this.momentum);
    for (const view of [this.runningMean, this.runningVar]) {
      const running = buffers.param(view);
      for (let i = 0; i < view.length; ++i) {
        running[i] = Math.fround(keep * running[i]) + Math.fround(momentum * summed[view.offset + i]);
      }
    }
  }
}
