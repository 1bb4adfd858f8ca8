// The CPU backend: oneDNN and OpenBLAS kernels in the addon, over host memory (upload and download are plain copies).
import { addonPart } from '../base/addon';
import type { Backend } from './backend';

type CpuKernels = Omit<Backend, 'device' | 'upload' | 'download' | 'hostArray'>;

const copy = (from: Float32Array, to: Float32Array): void => {
  if (from !== to) to.set(from);
};

export const cpu: Backend = Object.assign(addonPart<{ cpu: CpuKernels }>().cpu, {
  device: 'cpu' as const,
  upload: copy,
  download: copy,
  hostArray: (length: number) => new Float32Array(length),
});
