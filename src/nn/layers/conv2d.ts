// Conv2d: K filters of C x R x R over [C, H, W] -> [K, OH, OW]; weights [K, C, R, R], bias [K].
// Input and output in the layouts the net chose for them (see net.ts).
import type { ConvShape, Layout } from '../backend';
import { type BatchKey, type Layer, type LayerContext, Scratch, activationLength } from '../layer';
import type { ParamView, ParameterStore } from '../params';
import { xavier } from './init';

export class Conv2d implements Layer {
  readonly outShape: number[];
  private readonly weight: ParamView;
  private readonly bias: ParamView;
  private readonly scratch = new Scratch();
  private input?: Float32Array;

  constructor(
    readonly name: string,
    private readonly inShape: number[],
    filters: number,
    private readonly kernel: number,
    private readonly stride: number,
    private readonly pad: number,
    private readonly ctx: LayerContext,
    private readonly layouts: { x: Layout; y: Layout },
  ) {
    const [c, h, w] = inShape;
    this.outShape = [filters, Math.floor((h + 2 * pad - kernel) / stride) + 1, Math.floor((w + 2 * pad - kernel) / stride) + 1];
    this.weight = ctx.params.reserve(`${name}.weight`, [filters, c, kernel, kernel]);
    this.bias = ctx.params.reserve(`${name}.bias`, [filters]);
  }

  init(params: ParameterStore, next: () => number): void {
    xavier(params.param(this.weight), this.inShape[0] * this.kernel * this.kernel, next);
    params.param(this.bias).fill(0);
  }

  private shape(batch: number): ConvShape {
    const [c, h, w] = this.inShape;
    return [batch, c, h, w, this.outShape[0], this.kernel, this.kernel, this.stride, this.pad];
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const { backend, params } = this.ctx;
    this.input = x;
    const { layouts } = this;
    const y = this.scratch.get('y', activationLength(backend, this.outShape, batch, layouts.y));
    backend.conv2dForward(x, params.param(this.weight), params.param(this.bias), y, this.shape(batch), layouts.x, layouts.y);
    return y;
  }

  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    const { layouts } = this;
    const shape = this.shape(batch);
    backend.conv2dBackwardWeights(this.input!, dy, params.grad(this.weight), params.grad(this.bias), shape, layouts.x, layouts.y);
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', this.input!.length);
    backend.conv2dBackwardData(dy, params.param(this.weight), dx, shape, layouts.x, layouts.y);
    return dx;
  }
}
