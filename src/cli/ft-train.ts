// ft-train: what every rank runs under `mpirun --with-ft ulfm`. Checks all inputs before MPI
// starts (one line per problem, printed by world rank 0 only), trains, and has the final leader
// write model.safetensors and summary.json. Exit codes: 0 done (or stopped by SIGTERM after a
// checkpoint), 1 unexpected error, 2 bad input, 3 fewer ranks left than --min-ranks (after a checkpoint).
import { hideBin } from 'yargs/helpers';
import { findCheckpoint, type CheckpointManifest } from '../checkpoint/checkpoint';
import { encodeSafetensors } from '../checkpoint/safetensors';
import { finalize, init } from '../comm';
import { Dataset } from '../data/dataset';
import { cpu } from '../nn/cpu';
import { Net } from '../nn/net';
import { loadSpec, type ModelSpec } from '../nn/spec';
import type { Summary } from '../run/records';
import { createRunDir, RunLog, writeModel, writeSummary } from '../run/writer';
import { FaultInjector } from '../solver/fault-injection';
import { Trainer, type TrainResult } from '../solver/trainer';
import { UsageError } from './command';
import { closeLogger, rankLogger } from './logger';
import { Progress } from './progress';
import { parseTrainOptions, type TrainOptions } from './train-options';

/** Bad input: printed as one line, exit code 2. */
class InputError extends Error {}

interface Resume {
  dir: string;
  manifest: CheckpointManifest;
  /** why newer checkpoints were passed over */
  skipped: string[];
}

/** The settings that fix a run's result; a resume must match the checkpoint's. */
function identity(options: TrainOptions, spec: ModelSpec, dataset: Dataset, shards: number): Record<string, unknown> {
  return {
    model: { name: spec.name, input: spec.input, classes: spec.classes, layers: spec.layers },
    data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
    batch: options.batch, lr: options.lr, momentum: options.momentum, weight_decay: options.weightDecay,
    lr_schedule: options.lrSchedule, seed: options.seed, shards, on_failure: options.onFailure,
    lr_rescale: options.lrRescale, steps: options.steps ?? null, epochs: options.epochs ?? null,
  };
}

function checkResume(options: TrainOptions, spec: ModelSpec, dataset: Dataset): Resume {
  const found = findCheckpoint(options.resume!);
  const { manifest } = found;
  if (options.shards !== undefined && options.shards !== manifest.shards) {
    throw new Error(`${found.dir}: written with --shards ${manifest.shards}, this run asks for ${options.shards}`);
  }
  const mine = identity(options, spec, dataset, manifest.shards);
  for (const key of Object.keys(mine)) {
    const [theirs, ours] = [JSON.stringify(manifest.config[key]), JSON.stringify(mine[key])];
    if (theirs !== ours) throw new Error(`${found.dir}: written with ${key} ${theirs.slice(0, 80)}, this run has ${ours.slice(0, 80)}`);
  }
  return found;
}

async function prepare(): Promise<{ options: TrainOptions; dataset: Dataset; net: Net; resume?: Resume }> {
  let options: TrainOptions;
  try {
    options = parseTrainOptions(hideBin(process.argv));
  } catch (error) {
    throw new InputError((error as Error).message);
  }
  let dataset: Dataset | undefined;
  try {
    const spec = loadSpec(options.model);
    dataset = await Dataset.open(options.data);
    const [shape, input] = [dataset.sampleShape.join('x'), spec.input.join('x')];
    if (shape !== input) throw new Error(`${options.model}: takes ${input} inputs, but ${options.data} holds ${shape} samples`);
    if (spec.classes !== dataset.classes) throw new Error(`${options.model}: has ${spec.classes} classes, but ${options.data} has ${dataset.classes}`);
    const net = new Net(spec, cpu);
    const resume = options.resume !== undefined ? checkResume(options, spec, dataset) : undefined;
    createRunDir(options.runDir);
    return { options, dataset, net, resume };
  } catch (error) {
    // its file handles would otherwise be closed by the garbage collector, with a warning on stderr
    await dataset?.close();
    throw new InputError(`ft-train: ${(error as Error).message}`);
  }
}

async function main(): Promise<number> {
  const started = Date.now();
  const { options, dataset, net, resume } = await prepare();
  cpu.setThreads(options.threads);
  const { world } = await init();
  const worldRank = world.worldRanks[world.rank];
  const runLog = new RunLog(options.runDir, worldRank);
  runLog.setLeader(world.rank === 0);
  const logger = rankLogger(runLog.logFile, worldRank);
  const shards = resume?.manifest.shards ?? options.shards ?? world.size;
  const progress = new Progress(options.steps);
  const trainer = new Trainer({ ...options, shards, identity: identity(options, net.spec, dataset, shards) }, world, dataset, net, cpu, {
    step: (record) => {
      runLog.step(record);
      progress.step(record, runLog.isLeader);
    },
    event: (record) => {
      runLog.event(record);
      logger.info('event', record);
    },
    leader: (isLeader) => runLog.setLeader(isLeader),
    log: (message) => {
      logger.warn(message);
      if (runLog.isLeader) progress.line(message);
    },
  }, new FaultInjector(options.drills, worldRank, runLog.logFile));
  logger.info('start', { world: world.size, shards, options: { ...options, drills: options.drills } });
  // preemption: a checkpoint at the next step boundary, then a clean exit (needs the agreement)
  if (options.onFailure !== 'none') process.on('SIGTERM', () => trainer.requestStop());
  if (runLog.isLeader) {
    runLog.event({ event: 'start', world: world.size, shards, on_failure: options.onFailure, batch: options.batch });
    progress.line(`training ${options.model} on ${options.data}: ${world.size} ranks, ${shards} shards, global batch ${options.batch}, on failure: ${options.onFailure}; run dir ${options.runDir}`);
    for (const reason of resume?.skipped ?? []) progress.line(`${reason}; using ${resume!.dir}`);
  }
  let result: TrainResult;
  try {
    result = await trainer.run(resume);
  } catch (error) {
    // ULFM cannot help with this one; the job stops (other ranks see this rank fail)
    logger.error((error as Error).stack ?? String(error));
    await closeLogger(logger);
    throw error;
  }
  if (runLog.isLeader && result.stopped) {
    progress.line(`stopped (${result.stopped === 'sigterm' ? 'SIGTERM' : 'below --min-ranks'}) at step ${result.steps}; continue with --resume ${result.checkpoint ?? options.checkpointDir}`);
  }
  if (runLog.isLeader && !result.stopped) {
    writeResults(options, shards, net, result, started);
    const lost = result.failures.map((f) => `rank${f.lost.length > 1 ? 's' : ''} ${f.lost.join(', ')} at step ${f.step}`).join('; ');
    progress.line(`done: ${result.steps} steps, final loss ${result.finalLoss.toFixed(4)}, test accuracy ${(result.testAccuracy * 100).toFixed(2)}%, ` +
      `${result.worldFinal} of ${result.worldInitial} ranks left${lost ? ` (lost ${lost}; ${result.bytesReadBack} bytes read back)` : ''}, params_sha256 ${result.paramsSha256.slice(0, 16)}`);
  }
  logger.info('end', { ...result });
  await dataset.close();
  await closeLogger(logger);
  await finalize();
  return result.stopped === 'min-ranks' ? 3 : 0;
}

function writeResults(options: TrainOptions, shards: number, net: Net, result: TrainResult, started: number): void {
  const tensors = net.params.views.map((view) => ({ name: view.name, shape: view.shape, data: net.params.param(view) }));
  writeModel(options.runDir, encodeSafetensors(tensors, { model: net.spec.name, steps: String(result.steps), params_sha256: result.paramsSha256 }));
  const summary: Summary = {
    status: 'complete',
    steps: result.steps,
    final_loss: result.finalLoss,
    test_accuracy: result.testAccuracy,
    test_loss: result.testLoss,
    wall_s: (Date.now() - started) / 1000,
    failures: result.failures,
    ranks_lost: result.failures.reduce((n, f) => n + f.lost.length, 0),
    bytes_read_back: result.bytesReadBack,
    world_initial: result.worldInitial,
    world_final: result.worldFinal,
    params_sha256: result.paramsSha256,
    model: options.model,
    data: options.data,
    shards,
    on_failure: options.onFailure,
    batch: options.batch,
    seed: options.seed,
  };
  writeSummary(options.runDir, summary);
}

/** Before MPI starts every rank has the same problem: world rank 0 alone prints it. */
function firstRank(): boolean {
  return (process.env.OMPI_COMM_WORLD_RANK ?? '0') === '0';
}

export function run(): void {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      const input = error instanceof InputError || error instanceof UsageError;
      process.exitCode = input ? 2 : 1;
      if (firstRank() || !input) console.error(input ? (error as Error).message : `ft-train: ${(error as Error).stack ?? error}`);
      // mpirun tears the job down at the first non-zero exit: the others give rank 0 time to print
      else setTimeout(() => undefined, 1000);
    },
  );
}
