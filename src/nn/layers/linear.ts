// Linear (inner product): [I] -> [O], weights [O, I], bias [O]. An image input [C, H, W] is taken
// flat; a sequence [T, I] (a language model's) is mapped position by position: [T, I] -> [T, O].
import { type BatchKey, type Layer, type LayerContext, Scratch, product } from '../layer';
import type { ParamView, ParameterStore } from '../params';
import { xavier } from './init';

export class Linear implements Layer {
  readonly outShape: number[];
  private readonly inputs: number;
  /** Rows per sample: a sequence's positions, else 1. */
  private readonly positions: number;
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
    const sequence = inShape.length === 2;
    this.positions = sequence ? inShape[0] : 1;
    this.inputs = sequence ? inShape[1] : product(inShape);
    this.outShape = sequence ? [inShape[0], outputs] : [outputs];
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
    const y = this.scratch.get('y', batch * product(this.outShape));
    backend.linearForward(x, params.param(this.weight), params.param(this.bias), y, this.shape(batch));
    return y;
  }

  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    const dx = needInputGrad ? this.scratch.get('dx', this.input!.length) : null;
    backend.linearBackward(
      this.input!,
      params.param(this.weight),
      dy,
      dx,
      params.grad(this.weight),
      params.grad(this.bias),
      this.shape(batch),
    );
    return dx;
  }

  private shape(batch: number): [number, number, number] {
    return [batch * this.positions, this.inputs, this.outShape[this.outShape.length - 1]];
  }
}
