// Embedding of a language model's input: each sequence is a window of T + 1 token ids (the model
// input, as the dataset stores it; the last token is only a target), and position t of the output
// is the token's row of the token table plus row t of the position table: [T + 1] -> [T, C].
// The language-model head (lm-head.ts) may read the token table as its weights (tied): its backward
// then writes the table's gradient first, and this layer adds the embedding's share to it.
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';
import type { ParamView, ParameterStore } from '../params';
import { normal } from './init';

export class Embedding implements Layer {
  readonly outShape: number[];
  readonly tokens: ParamView;
  private readonly positions: ParamView;
  private readonly scratch = new Scratch();
  private input?: Float32Array;
  /** Set by the net when a head reads the token table. */
  private tied = false;

  constructor(
    readonly name: string,
    private readonly context: number,
    private readonly vocab: number,
    readonly dim: number,
    private readonly ctx: LayerContext,
  ) {
    this.outShape = [context, dim];
    this.tokens = ctx.params.reserve(`${name}.token.weight`, [vocab, dim]);
    this.positions = ctx.params.reserve(`${name}.position.weight`, [context, dim]);
  }

  /** The token table, for a head that shares it: from now on backward adds to its gradient instead of writing it. */
  tie(): ParamView {
    this.tied = true;
    return this.tokens;
  }

  init(params: ParameterStore, next: () => number): void {
    normal(params.param(this.tokens), 0.02, next);
    normal(params.param(this.positions), 0.02, next);
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    const { backend, params } = this.ctx;
    this.input = x;
    const y = this.scratch.get('y', batch * this.context * this.dim);
    backend.embeddingForward(x, this.context + 1, params.param(this.tokens), params.param(this.positions), y, this.shape(batch));
    return y;
  }

  backward(dy: Float32Array, batch: number, _needInputGrad: boolean): Float32Array | null {
    const { backend, params } = this.ctx;
    backend.embeddingBackward(
      this.input!,
      this.context + 1,
      dy,
      params.grad(this.tokens),
      params.grad(this.positions),
      this.shape(batch),
      this.tied,
    );
    return null; // token ids have no gradient
  }

  private shape(batch: number): [number, number, number, number] {
    return [batch, this.context, this.dim, this.vocab];
  }
}
