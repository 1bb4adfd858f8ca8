// Linear (inner product): [I] -> [O], weights [O, I], bias [O]. Any input shape is taken flat.
import { type BatchKey, type Layer, type LayerContext, Scratch, product } from '../layer';
import type { ParamView, ParameterStore } from '../params';
import { xavier } from './init';

export class Linear implements Layer {
  readonly outShape: number[];
  private readonly inputs: number;
  private readonly weight: ParamView;
  private readonly bias: ParamView;
  private readonly scratch = new Scratch();
  private input?: Float32Array;

  constructor(
    readonly name: string,
    inShape: number[],
    outputs: number,
    private readonly ctx: LayerContext,
  ) {
    this.inputs = product(inShape);
    this.outShape = [outputs];
    this.weight = ctx.params.reserve(`${name}.weight`, [outputs, this.inputs]);
    this.bias = ctx.params.reserve(`${name}.bias`, [outputs]);
  }

  init(params: ParameterStore, next: () => number): void {
    xavier(params.param(this.weight), this.inputs, next);
    params.param(this.bias).fill(0);
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const { backend, params } = this.ctx;
    this.input = x;
    const y = this.scratch.get('y', batch * this.outShape[0]);
    backend.linearForward(x, params.param(this.weight), params.param(this.bias), y, [batch, this.inputs, this.outShape[0]]);
    return y;
  }

  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    const dx = needInputGrad ? this.scratch.get('dx', this.input!.length) : null;
    backend.linearBackward(this.input!, params.param(this.weight), dy, dx, params.grad(this.weight), params.grad(this.bias), [
      batch,
      this.inputs,
      this.outShape[0],
    ]);
    return dx;
  }
}
