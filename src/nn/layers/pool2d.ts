// Max or average pooling: an R x R window with a stride over [C, H, W] -> [C, OH, OW], output in
// the input's layout.
import type { Layout, PoolKind, PoolShape } from '../backend';
import { type BatchKey, type Layer, type LayerContext, Scratch, activationLength } from '../layer';

export class Pool2d implements Layer {
  readonly outShape: number[];
  private readonly scratch = new Scratch();
  private readonly workspaces = new Map<number, Uint8Array>();
  private inputLength = 0;

  constructor(
    readonly name: string,
    private readonly kind: PoolKind,
    private readonly inShape: number[],
    private readonly kernel: number,
    private readonly stride: number,
    private readonly pad: number,
    private readonly ctx: LayerContext,
    private readonly layout: Layout,
  ) {
    const [c, h, w] = inShape;
    this.outShape = [c, Math.floor((h + 2 * pad - kernel) / stride) + 1, Math.floor((w + 2 * pad - kernel) / stride) + 1];
  }

  private shape(batch: number): PoolShape {
    const [c, h, w] = this.inShape;
    return [batch, c, h, w, this.kernel, this.stride, this.pad];
  }

  private workspace(batch: number): Uint8Array {
    let ws = this.workspaces.get(batch);
    if (!ws) {
      ws = new Uint8Array(this.ctx.backend.pool2dWorkspaceBytes(this.kind, this.shape(batch), this.layout));
      this.workspaces.set(batch, ws);
    }
    return ws;
  }

  forward(x: Float32Array, batch: number, _train: boolean, _key: BatchKey): Float32Array {
    this.inputLength = x.length;
    const y = this.scratch.get('y', activationLength(this.ctx.backend, this.outShape, batch, this.layout));
    this.ctx.backend.pool2dForward(this.kind, x, y, this.workspace(batch), this.shape(batch), this.layout);
    return y;
  }

  backward(dy: Float32Array, batch: number, needInputGrad: boolean): Float32Array | null {
    if (!needInputGrad) return null;
    const dx = this.scratch.get('dx', this.inputLength);
    this.ctx.backend.pool2dBackward(this.kind, dy, dx, this.workspace(batch), this.shape(batch), this.layout);
    return dx;
  }
}
