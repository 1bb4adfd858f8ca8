// The CPU backend: oneDNN and OpenBLAS kernels in the addon, over host memory (upload and download are plain copies).
import { addonPart } from '../base/addon';
import type { Backend } from './backend';

type CpuKernels = Omit<Backend, 'device' | 'upload' | 'download' | 'hostArray' | 'copy'>;

const copy = (from: Float32Array, to: Float32Array): void => {
  // the addon's format for argument errors (binding/src/args.h)
  if (from.length !== to.length)
    throw new TypeError(`copy: expected y to be a Float32Array of ${from.length} elements, got Float32Array of ${to.length}`);
  if (from !== to) to.set(from);
};

export const cpu: Backend = Object.assign(addonPart<{ cpu: CpuKernels }>().cpu, {
  device: 'cpu' as const,
  upload: copy,
  download: copy,
  copy,
  hostArray: (length: number) => new Float32Array(length),
});
