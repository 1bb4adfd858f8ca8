// A CPU backend with the GPU backend's memory model, so that CI (which has no GPU) checks the net's
// side of it: every array a kernel takes names a copy of its own (a "device" copy, one per host
// ArrayBuffer, so that views share it as they share the host buffer), the CPU kernels compute on
// those copies only, and values cross only through upload and download. A net that forgot an
// upload computes on zeros; one that forgot a download leaves its host arrays unchanged.
import type { Backend } from '../../src/nn/backend';
import { cpu } from '../../src/nn/cpu';
import { gpuKernels } from '../../src/nn/cuda';

/** A fresh double (its own "device" memory) and how many bytes crossed each way. */
export function mirroredBackend(): { backend: Backend; traffic: { up: number; down: number } } {
  const copies = new WeakMap<ArrayBufferLike, ArrayBuffer>();
  const copyOf = <T extends Float32Array | Uint8Array>(host: T): T => {
    let copy = copies.get(host.buffer);
    if (!copy) {
      copy = new ArrayBuffer(host.buffer.byteLength);
      copies.set(host.buffer, copy);
    }
    const Kind = host.constructor as new (buffer: ArrayBuffer, offset: number, length: number) => T;
    return new Kind(copy, host.byteOffset, host.length);
  };
  // labels (Int32Array) stay on the host, as the GPU backend reads them
  const onCopies = (value: unknown): unknown => (value instanceof Float32Array || value instanceof Uint8Array ? copyOf(value) : value);
  const traffic = { up: 0, down: 0 };
  // the GPU backend's kernels, computed by the CPU's on the copies
  const kernels = Object.fromEntries(
    gpuKernels.map((name) => {
      const kernel = cpu[name] as (...args: unknown[]) => unknown;
      return [name, (...args: unknown[]) => kernel.apply(cpu, args.map(onCopies))];
    }),
  );
  const backend: Backend = {
    ...cpu,
    ...kernels,
    device: 'cuda',
    channelBlock: 1,
    upload(host, mirrored) {
      copyOf(mirrored).set(host);
      traffic.up += host.byteLength;
    },
    download(mirrored, host) {
      host.set(copyOf(mirrored));
      traffic.down += host.byteLength;
    },
    hostArray: (length) => new Float32Array(length),
  };
  return { backend, traffic };
}
