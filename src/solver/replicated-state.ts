// The replicated optimizer state (each slot over all P parameters) and its update, kept where the
// net computes. On a GPU the slots live in device memory and the update runs there (the same bits as
// on the CPU: binding/src/optimizer_math.h): the summed gradient (on the host after MPI's sum) and
// the parameters go up, the updated parameters come back, since checkpoints, hashes, cross-checks
// and joining ranks read them on the host. The slots' host arrays are brought up to date only when
// something reads them (onHost: a checkpoint, a join, a cross-check) and go up again after something
// wrote them (hostWritten: a resume, a join, a rollback, a drill's flip). On the CPU the host arrays
// are the kernels' arrays and nothing is copied.
import type { Backend } from '../nn/backend';
import type { Optimizer } from './optimizer';

export class ReplicatedState {
  private readonly onDevice: boolean;
  /** On a GPU: the array whose device copy takes the summed gradient (its host side stays unused). */
  private readonly gradients?: Float32Array;
  /** Whether the device's slots hold the host's values, and the host's the device's. */
  private deviceCurrent = false;
  private hostCurrent = true;

  constructor(
    readonly optimizer: Optimizer,
    private readonly backend: Pick<Backend, 'device' | 'upload' | 'download'>,
    private readonly slots: Float32Array[],
    parameters: number,
  ) {
    this.onDevice = backend.device !== 'cpu';
    if (this.onDevice) this.gradients = new Float32Array(parameters);
  }

  /** Elements in all slots. */
  get length(): number {
    return this.slots.reduce((n, slot) => n + slot.length, 0);
  }

  /** Step `step`'s update (0-based) of `params` (host, current) from the summed `grads` (host); params are current on the host after it. */
  update(params: Float32Array, grads: Float32Array, lr: number, step: number): void {
    if (!this.onDevice) return this.optimizer.update(params, grads, this.slots, lr, step);
    this.backend.upload(params, params);
    this.backend.upload(grads, this.gradients!);
    if (!this.deviceCurrent) for (const slot of this.slots) this.backend.upload(slot, slot);
    this.deviceCurrent = true;
    this.optimizer.update(params, this.gradients!, this.slots, lr, step);
    this.hostCurrent = false;
    this.backend.download(params, params);
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
