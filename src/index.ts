// ft-train as a library: `import { train, elastic, ... } from 'ft-train'`. Every rank of a job runs
// the script that calls these (start it with launch/ft-run --script FILE or `mpirun --with-ft ulfm`).
export { train, exitWhenDone, InputError, type TrainOutcome, type TrainResult } from './train';
export { trainSettings, defaultHangTimeoutS, type TrainSettings, type ModelSpecInput, type Setting } from './train-options';
export {
  elastic, ElasticLoop, type LoopSettings, type LoopProgram, type LoopResult, type CommitRecord,
  type MicroBatch, type GradientFn, type ScoreFn, type Evaluation,
} from './loop/elastic';
export type { ModelSpec, LayerSpec } from './nn/spec';
export type { BatchKey } from './nn/layer';
