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
import { cudaBackend } from '../nn/cuda';
import type { TextInfo } from '../data/manifest';
import { decodeTokens, encodeText, vocabularySize } from '../data/text-tokens';
import { modelSpecJson, namedTensors, textMetadataKey } from '../nn/export';
import { sampleTokens } from '../nn/sample';
import { beat } from '../liveness/hangs';
import { Net } from '../nn/net';
import { loadSpec, parseSpec, type ModelSpec } from '../nn/spec';
import { writeModel, writeSample } from '../run/writer';
import { matrixRanges, optimizerIdentity } from '../solver/optimizer';
import { Trainer, warmUpKernels, type TrainResult } from '../solver/trainer';
import { InputError, runRank, type RankDoor, type TrainOutcome } from './rank-run';
import { resolveTrainOptions, SettingsError, type TrainOptions, type TrainSettings } from './train-settings';

export type { TrainResult } from '../solver/trainer';
export { exitWhenDone, InputError, type TrainOutcome } from './rank-run';

/** The model spec the settings name: a JSON file, or an object given in code. */
function modelSpec(model: TrainOptions['model']): ModelSpec {
  return typeof model === 'string' ? loadSpec(model) : parseSpec('model', JSON.stringify(model));
}

/** Refuses, in one line, a dataset the model cannot read. */
function checkData(label: string, spec: ModelSpec, dataset: Dataset, data: string): void {
  const [shape, input] = [dataset.sampleShape.join('x'), spec.input.join('x')];
  const { language } = spec;
  if (language) {
    if (shape !== input) {
      throw new Error(
        `${label}: a language model of context ${language.context} reads windows of ${language.context + 1} tokens, but ${data} holds ${shape} values per sample (make one with ft-data text --context ${language.context})`,
      );
    }
    if (dataset.classes > language.vocab)
      throw new Error(`${label}: embeds ${language.vocab} tokens, but ${data} has a vocabulary of ${dataset.classes}`);
    return;
  }
  if (shape !== input) throw new Error(`${label}: takes ${input} inputs, but ${data} holds ${shape} samples`);
  if (spec.classes !== dataset.classes) throw new Error(`${label}: has ${spec.classes} classes, but ${data} has ${dataset.classes}`);
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
      checkData(label(), spec!, dataset, options.data);
      net = new Net(spec!, options.device === 'cuda' ? cudaBackend() : cpu);
      if (net.buffers.length > 0 && options.optimizerState === 'sharded') {
        throw new Error(
          `${label()}: has batchnorm running statistics, which --optimizer-state sharded does not carry yet; use --optimizer-state replicated`,
        );
      }
    },
    warmUp: (dataset, shards) => warmUpKernels(net!, dataset, { shards, batch: options.batch, seed: options.seed }),
    identity: (dataset, shards, isa) => ({
      model: { name: spec!.name, input: spec!.input, classes: spec!.classes, layers: spec!.layers },
      data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
      batch: options.batch,
      lr: options.lr,
      optimizer: optimizerIdentity(options.optimizer),
      lr_schedule: options.lrSchedule,
      ...(options.clipNorm > 0 ? { clip_norm: options.clipNorm } : {}),
      seed: options.seed,
      shards,
      on_failure: options.onFailure,
      lr_rescale: options.lrRescale,
      steps: options.steps ?? null,
      epochs: options.epochs ?? null,
      // the CPU kernels' reductions are split by thread: another count gives other bits
      threads: options.threads,
      // the GPU's kernels give other bits than the CPU's (absent: the CPU, as before the option)
      ...(options.device === 'cpu' ? {} : { device: options.device }),
      isa,
    }),
    loop(_options, dataset, shards) {
      const model = net!;
      let trainer: Trainer | undefined;
      let trained: TrainResult | undefined;
      const text = model.spec.language ? dataset.manifest.text : undefined;
      let sample: string | undefined;
      return {
        sumLength: model.params.data.length + model.buffers.length + 1,
        paramsWithTail: model.params.dataWithTail,
        decayed: matrixRanges(model.params.views),
        overlaps: true,
        attach(manager, observer) {
          trainer = new Trainer({ ...options, shards }, manager, dataset, model, cpu, observer);
        },
        get totalSteps() {
          return trainer!.totalSteps;
        },
        async train(resume) {
          trained = await trainer!.run(resume);
          // every rank writes it (the same bits), so that none waits on the leader's final write for it
          if (text && options.sampleTokens > 0) sample = finalSample(model, text, options);
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
              ...(text ? { [textMetadataKey]: JSON.stringify(text) } : {}),
            }),
            modelSpecJson(model),
          );
          if (sample !== undefined) writeSample(options.runDir, sample);
        },
        hashName: 'params_sha256',
      };
    },
  };
}

/** The text a trained language model writes after a new line (its first token where a new line is no token), drawn at temperature 1 with the run's seed. */
function finalSample(net: Net, text: TextInfo, options: TrainOptions): string {
  let prompt: number[];
  try {
    prompt = encodeText(text, '\n');
  } catch {
    prompt = [0];
  }
  const ids = sampleTokens(net, {
    prompt,
    tokens: options.sampleTokens,
    temperature: 1,
    seed: options.seed,
    vocabulary: vocabularySize(text),
    afterToken: beat, // a long sample must not read as a stuck rank
  });
  return decodeTokens(text, ids);
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
    if (error instanceof SettingsError) throw new InputError(error.message, true);
    throw error;
  }
  return runTraining(options);
}
