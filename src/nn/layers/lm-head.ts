// A language model's head tied to its embedding: logits[T, V] = x[T, C] wte^T at every position,
// wte being the embedding's token table (no bias, no parameters of its own; GPT-2's weight tying).
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';
import type { ParamView } from '../params';

export class LmHead implements Layer {
  readonly outShape: number[];
  private readonly scratch = new Scratch();
  private input?: Float32Array;
  private readonly zeroBias: Float32Array;
  private readonly biasGrad: Float32Array;

  constructor(
    readonly name: string,
    private readonly context: number,
    private readonly dim: number,
    private readonly table: ParamView,
    private readonly ctx: LayerContext,
  ) {
    const vocab = table.shape[0];
    this.outShape = [context, vocab];
    // the linear kernels take a bias: adding zeros leaves every logit's bits as they are
    this.zeroBias = new Float32Array(vocab);
    this.biasGrad = new Float32Array(vocab);
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const { backend, params } = this.ctx;
    this.input = x;
    const y = this.scratch.get('y', batch * this.context * this.outShape[1]);
    backend.linearForward(x, params.param(this.table), this.zeroBias, y, this.shape(batch));
    return y;
  }

  /** Writes (overwrites) the table's gradient: the embedding's backward, later, adds its own. */
  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    const dx = needInputGrad ? this.scratch.get('dx', this.input!.length) : null;
    backend.linearBackward(this.input!, params.param(this.table), dy, dx, params.grad(this.table), this.biasGrad, this.shape(batch));
    return dx;
  }

  private shape(batch: number): [number, number, number] {
    return [batch * this.context, this.dim, this.outShape[1]];
  }
}
