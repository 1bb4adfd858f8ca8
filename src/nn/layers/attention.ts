// Causal multi-head self-attention over a sequence's projected queries, keys and values:
// [T, 3C] -> [T, C] (the projections are linear layers before and after it, as in GPT-2's c_attn
// and c_proj). Each head attends over positions up to its own with softmax(q k^T / sqrt(D)).
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';

export class Attention implements Layer {
  readonly outShape: number[];
  private readonly scratch = new Scratch();
  private input?: Float32Array;
  private probabilities?: Float32Array;

  constructor(
    readonly name: string,
    private readonly context: number,
    width: number,
    private readonly heads: number,
    private readonly ctx: LayerContext,
  ) {
    this.outShape = [context, width];
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const T = this.context;
    this.input = x;
    this.probabilities = this.scratch.get('att', batch * this.heads * T * T);
    const y = this.scratch.get('y', batch * T * this.outShape[1]);
    this.ctx.backend.attentionForward(x, this.probabilities, y, this.shape(batch));
    return y;
  }

  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', this.input!.length);
    this.ctx.backend.attentionBackward(this.input!, this.probabilities!, dy, dx, this.shape(batch));
    return dx;
  }

  private shape(batch: number): [number, number, number, number] {
    return [batch, this.context, this.heads, this.outShape[1] / this.heads];
  }
}
