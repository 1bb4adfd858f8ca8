// ft-train as a library: `import { train, elastic, ... } from 'ft-train'`. Every rank of a job runs
// the script that calls these (start it with launch/ft-run --script FILE or `mpirun --with-ft ulfm`).
export { train, exitWhenDone, InputError, type TrainOutcome, type TrainResult } from './api/train';
export { defaultHangTimeoutS, type TrainSettings, type ModelSpecInput } from './api/train-settings';
export {
  elastic,
  ElasticLoop,
  type LoopSettings,
  type LoopProgram,
  type LoopResult,
  type CommitRecord,
  type StepSum,
  type MicroBatch,
  type GradientFn,
  type ScoreFn,
  type Score,
  type Evaluation,
} from './api/elastic';
export type { ModelSpec, LayerSpec, Inputs, LanguageModel } from './nn/spec';
export type { BatchKey, Layer, MergeLayer } from './nn/layer';
export type { ParameterStore, ParamView } from './nn/params';
export type { Failure, FailurePolicy, RespawnJoin } from './protocol/contracts';
export type { OnCorruption } from './protocol/verification';
export { Net, type StepResult, type GradientProgress } from './nn/net';
export { loadSpec, parseSpec, SpecError } from './nn/spec';
export { cpu } from './nn/cpu';
export { cudaBackend, gpuMissing } from './nn/cuda';
export type {
  AttentionShape,
  Backend,
  ConvShape,
  CpuLevel,
  Device,
  EmbeddingShape,
  KernelSettings,
  Layout,
  LinearShape,
  NormShape,
  PoolKind,
  PoolShape,
} from './nn/backend';
export type { LevelRequest } from './rank/kernel-level';
