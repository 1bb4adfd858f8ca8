// Your own training loop with ft-train's protocol (in the spirit of Horovod's hvd.elastic.run and
// torchft's Manager): user code computes gradients however it likes; the loop gives it each held
// shard's micro-batch, sums the gradients (exact: over all shards in shard order, so the bits never
// depend on the world size; shrink/none: a plain allreduce of each rank's pieces), has the
// survivors vote on every step, repairs the communicator after a failure, reads back only the lost
// ranks' shards and asks for just their gradients again, and writes JIT and periodic checkpoints
// of the state it registered. Everything the trainer has, the loop has too: every failure policy,
// hot spares, respawned ranks, and sharded optimizer state when ft-train's optimizer makes the
// update (update() instead of sum()). No MPI in user code.
//
//   exitWhenDone(elastic({ data, runDir, steps, tensors: { w: [10, 784], b: [10] }, slots: ['velocity'] }, {
//     init(loop) { ...fill loop.tensors from the seed... },
//     async train(loop) {
//       while (!loop.done) {
//         const { gradient, loss } = await loop.sum((batch) => { ...gradient of batch into loop.gradient...; return meanLoss; });
//         ...update loop.state (and loop.slot('velocity')) from gradient...
//         await loop.commit({ lr });
//       }
//     },
//   }));
import { encodeSafetensors } from '../checkpoint/safetensors';
import { writeModel } from '../run/writer';
import { matrixRanges, optimizerIdentity } from '../solver/optimizer';
import { ElasticLoop, type LoopResult } from './elastic-loop';
import { resolveLoopSettings, type LoopOptions, type LoopSettings } from './loop-settings';
import { runRank, type RankDoor, type RunResult, type TrainOutcome } from './rank-run';

export type { Evaluation, GradientFn, MicroBatch, Score, ScoreFn } from '../solver/shard-steps';
export type { LoopSettings } from './loop-settings';
export { ElasticLoop, type CommitRecord, type LoopResult, type StepSum } from './elastic-loop';

/** What user code provides: the initial state, and the loop itself. */
export interface LoopProgram {
  /** Fills the state for step 0, the same on every rank (e.g. from settings.seed); not called on a resume or a join. */
  init(loop: ElasticLoop): void;
  /** Trains until `loop.done`, calling sum() (or update()) then commit() once per step. */
  train(loop: ElasticLoop): Promise<void>;
}

/** The custom loop as a front door: user code's state, trained by `program`. */
function loopDoor(options: LoopOptions, program: LoopProgram): RankDoor<RunResult & { loop: LoopResult }> {
  const size = Object.values(options.tensors).reduce((n, shape) => n + shape.reduce((a, b) => a * b, 1), 0);
  let loop: ElasticLoop | undefined;
  return {
    label: options.model,
    title: `${options.model} (custom loop)`,
    optimizer: options.updates ? options.optimizer.name : 'custom',
    checkModel: () => undefined,
    check: () => undefined,
    identity: (dataset, shards, isa) => ({
      model: options.model,
      tensors: options.tensors,
      slots: options.slots,
      data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
      batch: options.batch,
      seed: options.seed,
      shards,
      steps: options.steps ?? null,
      epochs: options.epochsNamed,
      // beyond the defaults only, so that a checkpoint of a plain exact loop keeps its identity
      ...(options.onFailure !== 'exact' ? { on_failure: options.onFailure } : {}),
      ...(options.onFailure === 'shrink' ? { lr_rescale: options.lrRescale } : {}),
      ...(options.updates ? { optimizer: optimizerIdentity(options.optimizer) } : {}),
      ...(options.clipNorm > 0 ? { clip_norm: options.clipNorm } : {}),
      user: options.identity,
      // the kernels' level user code computes at, if it uses ft-train's
      isa,
    }),
    loop(_options, dataset, shards) {
      const stateWithTail = new Float32Array(size + 1);
      return {
        // the user's gradient is copied into the sum once computed: nothing to overlap
        sumLength: size + 1,
        paramsWithTail: stateWithTail,
        decayed: matrixRanges(tensorViews(options.tensors)),
        overlaps: false,
        attach(manager, observer) {
          loop = new ElasticLoop(options, manager, dataset, shards, observer, stateWithTail);
        },
        get totalSteps() {
          return loop!.totalSteps;
        },
        async train(resume) {
          await loop!.start((fresh) => program.init(fresh), resume);
          await program.train(loop!);
        },
        result() {
          const result = loop!.result();
          return {
            steps: result.steps,
            finalLoss: result.finalLoss,
            testAccuracy: result.evaluation?.accuracy ?? null,
            testLoss: result.evaluation?.loss ?? null,
            testSamples: result.evaluation?.samples ?? null,
            failures: result.failures,
            worldInitial: result.worldInitial,
            worldFinal: result.worldFinal,
            paramsSha256: result.stateSha256,
            optimizerBytes: loop!.optimizerBytes(),
            loop: result,
          };
        },
        writeModel(result) {
          writeModel(
            options.runDir,
            encodeSafetensors(loop!.modelTensors(), {
              model: options.model,
              steps: String(result.steps),
              state_sha256: result.paramsSha256,
            }),
          );
        },
        hashName: 'state_sha256',
      };
    },
  };
}

/**
 * Runs `program` as every rank of a job (start the script with launch/ft-run or `mpirun --with-ft
 * ulfm`): checks the settings and the dataset before MPI starts (bad ones reject with an
 * InputError, exit code 2), starts MPI (bounded), fills or restores the state, runs the program's
 * loop under the protocol, and has the final leader write model.safetensors (the tensors) and
 * summary.json. Resolves with the exit code the process should end with (see train()).
 */
export async function elastic(settings: LoopSettings, program: LoopProgram): Promise<TrainOutcome<LoopResult>> {
  const options = resolveLoopSettings(settings);
  const outcome = await runRank(options, loopDoor(options, program));
  return { exitCode: outcome.exitCode, result: outcome.result?.loop };
}

/** The registered tensors' places in the flat state, in order. */
function tensorViews(tensors: Record<string, number[]>): { offset: number; shape: number[] }[] {
  let offset = 0;
  return Object.values(tensors).map((shape) => {
    const view = { offset, shape };
    offset += shape.reduce((a, b) => a * b, 1);
    return view;
  });
}
