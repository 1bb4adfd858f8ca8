// The replicated optimizer state (each slot over all P parameters) and its update, kept where the
// net computes. On a GPU the slots and the parameters live in device memory and the update runs
// there (the same bits as on the CPU: binding/src/optimizer_math.h): only the summed gradient, which
// MPI leaves on the host, goes up. The slots' host arrays are brought up to date only when something
// reads them (onHost: a checkpoint, a join, a cross-check) and go up again after something wrote
// them (hostWritten: a resume, a join, a rollback, a drill's flip); the parameters likewise, through
// the net (Net.hostParams). On the CPU the host arrays are the kernels' arrays and nothing is copied.
import type { Backend } from '../nn/backend';
import type { Net } from '../nn/net';
import type { Optimizer } from './optimizer';

/** Where the parameters live on a GPU (the net): made current there before the update, marked newer there after it. */
export type DeviceParams = Pick<Net, 'paramsToDevice' | 'paramsUpdatedOnDevice'>;

export class ReplicatedState {
  private readonly onDevice: boolean;
  /** On a GPU: the array whose device copy takes the summed gradient (its host side stays unused), made at the first update. */
  private gradients?: Float32Array;
  /** Whether the device's slots hold the host's values, and the host's the device's. */
  private deviceCurrent = false;
  private hostCurrent = true;

  constructor(
    readonly optimizer: Optimizer,
    private readonly backend: Pick<Backend, 'device' | 'upload' | 'download'>,
    private readonly slots: Float32Array[],
    /** on a GPU: the net whose parameters the update changes */
    private readonly deviceParams?: DeviceParams,
  ) {
    this.onDevice = backend.device !== 'cpu';
    if (this.onDevice && !deviceParams) throw new Error('ReplicatedState: an update on a GPU needs the net whose parameters it changes');
  }

  /** Elements in all slots. */
  get length(): number {
    return this.slots.reduce((n, slot) => n + slot.length, 0);
  }

  /**
   * Step `step`'s update (0-based) of `params` from the summed `grads` (host). On a GPU, `params`
   * (the net's) names their device copy, which holds the newer values after it.
   */
  update(params: Float32Array, grads: Float32Array, lr: number, step: number): void {
    if (!this.onDevice) return this.optimizer.update(params, grads, this.slots, lr, step);
    this.deviceParams!.paramsToDevice();
    this.gradients ??= new Float32Array(grads.length);
    this.backend.upload(grads, this.gradients);
    if (!this.deviceCurrent) for (const slot of this.slots) this.backend.upload(slot, slot);
    this.deviceCurrent = true;
    this.optimizer.update(params, this.gradients, this.slots, lr, step);
    this.hostCurrent = false;
    this.deviceParams!.paramsUpdatedOnDevice();
  }

  /** The slots' host arrays, brought up to date. */
  onHost(): Float32Array[] {
    if (!this.hostCurrent) for (const slot of this.slots) this.backend.download(slot, slot);
    this.hostCurrent = true;
    return this.slots;
  }

  /** The slots' host arrays were written (whole, or after onHost): the next update takes them up. */
  hostWritten(): void {
    this.deviceCurrent = !this.onDevice;
    this.hostCurrent = true;
  }
}
