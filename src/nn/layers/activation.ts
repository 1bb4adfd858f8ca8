// Element-wise activations, same shape in and out: ReLU, y = max(x, 0), and GELU, y = x Phi(x) (the
// exact form, with erf, as PyTorch's nn.GELU()). The backward reads the forward's input.
import type { Backend } from '../backend';
import { type BatchKey, type Layer, type LayerContext, Scratch } from '../layer';

export type ActivationKind = 'relu' | 'gelu';

/** Each kind's kernels: y = f(x), and dx = dy f'(x). */
const kernels: Record<
  ActivationKind,
  (backend: Backend) => [(x: Float32Array, y: Float32Array) => void, (x: Float32Array, dy: Float32Array, dx: Float32Array) => void]
> = {
  relu: (backend) => [backend.reluForward.bind(backend), backend.reluBackward.bind(backend)],
  gelu: (backend) => [backend.geluForward.bind(backend), backend.geluBackward.bind(backend)],
};

export class Activation implements Layer {
  private readonly scratch = new Scratch();
  private readonly kernels: ReturnType<(typeof kernels)[ActivationKind]>;
  private input?: Float32Array;

  constructor(
    readonly name: string,
    readonly outShape: number[],
    kind: ActivationKind,
    ctx: LayerContext,
  ) {
    this.kernels = kernels[kind](ctx.backend);
  }

  forward(x: Float32Array, _batch: number, _train: boolean, _key: BatchKey): Float32Array {
    this.input = x;
    const y = this.scratch.get('y', x.length);
    this.kernels[0](x, y);
    return y;
  }

  backward(dy: Float32Array, _batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', dy.length);
    this.kernels[1](this.input!, dy, dx);
    return dx;
  }
}
