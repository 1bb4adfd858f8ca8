// The optimizers (SGD with momentum, PyTorch's AdamW) over any range of the parameters: replicated
// state updates all P at once, sharded state (src/sharding/sharded-state.ts) one chunk per rank; the
// update is element-wise, so both give the same bits. Each optimizer also splits its state's
// advance into an input worked out with the parameters (stateInput) and a step that needs nothing
// else (replay): a lost chunk's state is rebuilt from a peer's copy of its previous state and the
// input the owner sent before the vote.
// AdamW's decoupled weight decay applies to the matrices only (weights of linear and convolution
// layers, embedding tables), never to biases and normalisation scales, as transformers are trained.
import type { Backend } from '../nn/backend';
import type { ParamView } from '../nn/params';

export const optimizerNames = ['sgd', 'adamw'] as const;
export type OptimizerName = (typeof optimizerNames)[number];

export interface OptimizerSettings {
  name: OptimizerName;
  /** SGD */
  momentum: number;
  /** SGD: L2 (added to the gradient); AdamW: decoupled */
  weightDecay: number;
  /** AdamW */
  beta1: number;
  beta2: number;
  eps: number;
}

/** [from, to) ranges of the flat parameters. */
export type Ranges = readonly (readonly [number, number])[];

/** Where the tensors of two or more dimensions lie in the flat parameters (adjacent ones merged). */
export function matrixRanges(views: readonly Pick<ParamView, 'offset' | 'shape'>[]): Ranges {
  const ranges: [number, number][] = [];
  for (const { offset, shape } of views) {
    if (shape.length < 2) continue;
    const end = offset + shape.reduce((a, b) => a * b, 1);
    const last = ranges[ranges.length - 1];
    if (last && last[1] === offset) last[1] = end;
    else ranges.push([offset, end]);
  }
  return ranges;
}

export class Optimizer {
  /** the state tensors per parameter, in checkpoint order (PyTorch's names) */
  readonly slots: readonly string[];

  /** `decayed`: where AdamW's weight decay applies (matrixRanges; absent: everywhere, for parameters of unknown shapes). */
  constructor(
    readonly settings: OptimizerSettings,
    private readonly backend: Backend,
    private readonly decayed?: Ranges,
  ) {
    this.slots = settings.name === 'sgd' ? ['velocity'] : ['exp_avg', 'exp_avg_sq'];
  }

  /**
   * Applies step `step`'s update (0-based) to `params` from `grads`; `state[k]` is slot k over the
   * same elements, which start at element `from` of the flat parameters. Given `out`, the updated
   * parameters and state go there instead and the inputs stay as they were.
   */
  update(
    params: Float32Array,
    grads: Float32Array,
    state: readonly Float32Array[],
    lr: number,
    step: number,
    from = 0,
    out?: { params: Float32Array; state: readonly Float32Array[] },
  ): void {
    const s = this.settings;
    if (s.name === 'sgd') {
      this.backend.sgdUpdate(params, grads, state[0], lr, s.momentum, s.weightDecay, out?.params, out?.state[0]);
      return;
    }
    const adamw = (a: number, b: number, weightDecay: number): void => {
      const part = (x: Float32Array): Float32Array => x.subarray(a, b);
      const into = out && { params: part(out.params), m: part(out.state[0]), v: part(out.state[1]) };
      this.backend.adamwUpdate(
        part(params),
        part(grads),
        part(state[0]),
        part(state[1]),
        lr,
        s.beta1,
        s.beta2,
        s.eps,
        weightDecay,
        step + 1,
        into?.params,
        into?.m,
        into?.v,
      );
    };
    if (!this.decayed || s.weightDecay === 0) return adamw(0, params.length, s.weightDecay);
    // pieces of [from, from + length): decayed or not, in order
    let at = 0;
    for (const [start, end] of this.decayed) {
      const [a, b] = [Math.max(start - from, at), Math.min(end - from, params.length)];
      if (b <= a) continue;
      if (a > at) adamw(at, a, 0);
      adamw(a, b, s.weightDecay);
      at = b;
    }
    if (at < params.length) adamw(at, params.length, 0);
  }

  /** Whether stateInput() is the gradient itself (AdamW): a peer replaying the update needs nothing else. */
  get inputIsGradient(): boolean {
    return this.settings.name === 'adamw';
  }

  /**
   * What the update adds into the state besides the state itself: SGD's g + wd p, worked out into
   * `scratch` (as long as grads); AdamW's g, which is `grads` itself (no copy).
   */
  stateInput(params: Float32Array, grads: Float32Array, scratch: Float32Array): Float32Array {
    if (this.settings.name === 'adamw') return grads;
    this.backend.sgdStateInput(params, grads, this.settings.weightDecay, scratch);
    return scratch;
  }

  /** Advances `state` by one update from its input alone: the same bits as update() gives it. */
  replay(state: readonly Float32Array[], input: Float32Array): void {
    const s = this.settings;
    if (s.name === 'sgd') this.backend.sgdReplay(state[0], input, s.momentum);
    else this.backend.adamwReplay(state[0], state[1], input, s.beta1, s.beta2);
  }
}

/** The optimizer's settings that change the result (a resume may switch between replicated and sharded state: the same bits). */
export function optimizerIdentity(o: OptimizerSettings): Record<string, unknown> {
  return o.name === 'sgd'
    ? { name: o.name, momentum: o.momentum, weight_decay: o.weightDecay }
    : { name: o.name, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weightDecay };
}
