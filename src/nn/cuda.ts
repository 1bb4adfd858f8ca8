// The GPU backend: cuDNN convolutions, cuBLAS linear layers and the addon's own CUDA kernels
// (binding/src/cuda), present only in an addon built where CUDA, cuDNN, cuBLAS and NCCL were found.
// It runs the layers of image classifiers, residual networks included, and of GPT-style
// transformers (gpuLayerTypes), and the optimizers' updates (the CPU's bits); a layer without GPU
// kernels is refused when the net is built, and its kernels here throw saying so. The collectives and checkpoints stay on the host: the
// net uploads its input before each pass and downloads its gradients and logits after
// (src/nn/net.ts), and with replicated optimizer state the parameters and the state live on the GPU
// (src/solver/replicated-state.ts).
import { addonPart } from '../base/addon';
import type { Backend } from './backend';
import type { LayerSpec } from './spec';

/** What the GPU backend computes: the layer types it has kernels for. */
export const gpuLayerTypes: ReadonlySet<LayerSpec['type']> = new Set([
  'conv',
  'maxpool',
  'avgpool',
  'linear',
  'relu',
  'flatten',
  'batchnorm',
  'globalavgpool',
  'add',
  'embedding',
  'layernorm',
  'attention',
  'gelu',
  'dropout',
  'lmhead',
]);

/** The GPU this process computes on (Open MPI's local rank modulo the GPUs it sees). */
export interface GpuInfo {
  name: string;
  index: number;
  count: number;
  memoryBytes: number;
  freeBytes: number;
}

/** An NCCL communicator (opaque): ULFM decides failures; NCCL's is aborted and made anew over the survivors. */
export type NcclComm = { readonly __nccl: unique symbol };

/** The kernels the GPU backend has: what the layers of gpuLayerTypes and the net call. */
export const gpuKernels = [
  'conv2dForward',
  'conv2dBackwardData',
  'conv2dBackwardWeights',
  'pool2dWorkspaceBytes',
  'pool2dForward',
  'pool2dBackward',
  'convertLayout',
  'linearForward',
  'linearBackward',
  'reluForward',
  'reluBackward',
  'addInPlace',
  'scaleInPlace',
  'copy',
  'batchnormForwardTrain',
  'batchnormForwardEval',
  'batchnormBackward',
  'globalAvgPoolForward',
  'globalAvgPoolBackward',
  'layernormForward',
  'layernormBackward',
  'attentionForward',
  'attentionBackward',
  'geluForward',
  'geluBackward',
  'embeddingForward',
  'embeddingBackward',
  'dropoutMask',
  'multiply',
  'softmaxCrossEntropy',
  'sgdUpdate',
  'sgdStateInput',
  'sgdReplay',
  'adamwUpdate',
  'adamwReplay',
] as const satisfies readonly (keyof Backend)[];

type GpuKernels = Pick<Backend, (typeof gpuKernels)[number] | 'upload' | 'download' | 'hostArray' | 'channelBlock'>;

/** The addon's `cuda` object. */
export interface CudaAddon extends GpuKernels {
  gpu(): GpuInfo;
  /** Versions found at build time: CUDA runtime, cuDNN and NCCL, as each library numbers them. */
  libraries(): { cudaRuntime: number; cudnn: number; nccl: number };
  /** Device bytes the backend holds (mirrors and scratch). */
  heldBytes(): number;
  /** A new NCCL unique id (128 bytes), made by one rank and sent to the others. */
  ncclUniqueId(): Uint8Array;
  /** Joins `size` ranks into an NCCL communicator; past timeoutMs it is aborted and this throws. */
  ncclInit(id: Uint8Array, size: number, rank: number, timeoutMs: number): NcclComm;
  /** array's device copy becomes the sum over the communicator's ranks (bounded as ncclInit). */
  ncclAllReduce(comm: NcclComm, array: Float32Array, timeoutMs: number): void;
  /** Aborts (and frees) the communicator; a second abort does nothing. */
  ncclAbort(comm: NcclComm): void;
}

const addon = addonPart<{ cuda?: CudaAddon }>().cuda;

/** Why there is no GPU backend, or undefined where there is one. */
export const gpuMissing: string | undefined = addon
  ? undefined
  : 'this build of the addon has no GPU backend (CUDA, cuDNN, cuBLAS and NCCL were not all found when it was built: see `npm run build:addon`)';

/** The addon's CUDA part; throws, saying why, where it was not built. */
export function cudaAddon(): CudaAddon {
  if (!addon) throw new Error(`--device cuda: ${gpuMissing}`);
  return addon;
}

let backend: Backend | undefined;

/** The GPU backend (built once); throws where the addon has none. */
export function cudaBackend(): Backend {
  if (backend) return backend;
  const kernels = cudaAddon();
  const missing = (name: string) => (): never => {
    throw new Error(`${name}: not on the GPU backend yet (it computes ${[...gpuLayerTypes].join(', ')} layers)`);
  };
  // every kernel the GPU lacks, listed once (the type makes the list complete)
  const absent: Record<Exclude<keyof Backend, keyof GpuKernels | 'device'>, true> = {
    hostLevel: true,
    pinLevel: true,
    kernelSettings: true,
    setThreads: true,
    setWinograd: true,
    sumOfSquares: true,
  };
  const refused = Object.fromEntries(Object.keys(absent).map((name) => [name, missing(name)]));
  backend = { ...(refused as unknown as Record<keyof typeof absent, () => never>), ...kernels, device: 'cuda' };
  return backend;
}
