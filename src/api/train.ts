// The library's front door to a whole training run: `train(settings)` is what every rank of an
// ft-train job runs (the ft-train program is a thin layer over it). It checks every input before
// MPI starts (one line per problem), bounds the start-up, trains, and has the final leader write
// model.safetensors and summary.json (voted, so a survivor writes them whatever happens). Exit
// codes: 0 done (or stopped by SIGTERM after a checkpoint), 1 an error (one line, every rank
// stops), 2 bad input, 3 fewer ranks left than minRanks (after a checkpoint), 4 on the minority
// side of a partition (it stops, writing nothing).
import { encodeSafetensors } from '../checkpoint/safetensors';
import type { Dataset } from '../data/dataset';
import { cpu } from '../nn/cpu';
import { modelSpecJson, namedTensors } from '../nn/export';
import { Net } from '../nn/net';
import { loadSpec, parseSpec, type ModelSpec } from '../nn/spec';
import { writeModel } from '../run/writer';
import { optimizerIdentity } from '../solver/optimizer';
import { Trainer, type TrainResult } from '../solver/trainer';
import { InputError, runRank, type RankDoor, type TrainOutcome } from './rank-run';
import { resolveTrainOptions, SettingsError, type TrainOptions, type TrainSettings } from './train-settings';

export type { TrainResult } from '../solver/trainer';
export { exitWhenDone, InputError, type TrainOutcome } from './rank-run';

/** The model spec the settings name: a JSON file, or an object given in code. */
function modelSpec(model: TrainOptions['model']): ModelSpec {
  return typeof model === 'string' ? loadSpec(model) : parseSpec('model', JSON.stringify(model));
}

/** The trainer as a front door: a model spec trained by ft-train's Net and optimizer. */
function trainerDoor(options: TrainOptions): RankDoor<TrainResult> {
  let spec: ModelSpec | undefined;
  let net: Net | undefined;
  const label = (): string => (typeof options.model === 'string' ? options.model : spec!.name);
  return {
    get label() {
      return label();
    },
    get title() {
      return label();
    },
    threads: options.threads,
    optimizer: options.optimizer.name,
    checkModel() {
      spec = modelSpec(options.model);
    },
    check(dataset: Dataset) {
      const [shape, input] = [dataset.sampleShape.join('x'), spec!.input.join('x')];
      if (shape !== input) throw new Error(`${label()}: takes ${input} inputs, but ${options.data} holds ${shape} samples`);
      if (spec!.classes !== dataset.classes)
        throw new Error(`${label()}: has ${spec!.classes} classes, but ${options.data} has ${dataset.classes}`);
      net = new Net(spec!, cpu);
      if (net.buffers.length > 0 && options.optimizerState === 'sharded') {
        throw new Error(
          `${label()}: has batchnorm running statistics, which --optimizer-state sharded does not carry yet; use --optimizer-state replicated`,
        );
      }
    },
    identity: (dataset, shards, isa) => ({
      model: { name: spec!.name, input: spec!.input, classes: spec!.classes, layers: spec!.layers },
      data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
      batch: options.batch,
      lr: options.lr,
      optimizer: optimizerIdentity(options.optimizer),
      lr_schedule: options.lrSchedule,
      seed: options.seed,
      shards,
      on_failure: options.onFailure,
      lr_rescale: options.lrRescale,
      steps: options.steps ?? null,
      epochs: options.epochs ?? null,
      // the CPU kernels' reductions are split by thread: another count gives other bits
      threads: options.threads,
      isa,
    }),
    loop(_options, dataset, shards) {
      const model = net!;
      let trainer: Trainer | undefined;
      let trained: TrainResult | undefined;
      return {
        sumLength: model.params.data.length + model.buffers.length + 1,
        paramsWithTail: model.params.dataWithTail,
        overlaps: true,
        attach(manager, observer) {
          trainer = new Trainer({ ...options, shards }, manager, dataset, model, cpu, observer);
        },
        get totalSteps() {
          return trainer!.totalSteps;
        },
        async train(resume) {
          trained = await trainer!.run(resume);
        },
        // a failure during the final write changes the world the results report
        result: (manager) => ({ ...trained!, worldFinal: manager.world.size, failures: manager.failures }),
        writeModel(result) {
          writeModel(
            options.runDir,
            encodeSafetensors(namedTensors(model), {
              model: model.spec.name,
              steps: String(result.steps),
              params_sha256: result.paramsSha256,
            }),
            modelSpecJson(model),
          );
        },
        hashName: 'params_sha256',
      };
    },
  };
}

/** One rank's whole run with resolved options: the ft-train program's and `train()`'s body. */
export function runTraining(options: TrainOptions): Promise<TrainOutcome<TrainResult>> {
  return runRank(options, trainerDoor(options));
}

/**
 * Trains as every rank of an ft-train job (start the script that calls it with launch/ft-run or
 * `mpirun --with-ft ulfm`): the settings are ft-train's flags, camelCased, with the same defaults.
 * Resolves with the exit code the process should end with; bad settings reject with an InputError
 * (exit code 2). If MPI cannot start in time, the process exits (code 1, one line).
 */
export async function train(settings: TrainSettings): Promise<TrainOutcome<TrainResult>> {
  let options: TrainOptions;
  try {
    options = resolveTrainOptions(settings);
  } catch (error) {
    if (error instanceof SettingsError) throw new InputError(error.message);
    throw error;
  }
  return runTraining(options);
}
