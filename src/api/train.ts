// The library's front door to a whole training run: `train(settings)` is what every rank of an
// ft-train job runs (the ft-train program is a thin layer over it). It checks every input before
// MPI starts (one line per problem), bounds the start-up, trains, and has the final leader write
// model.safetensors and summary.json (voted, so a survivor writes them whatever happens). Exit
// codes: 0 done (or stopped by SIGTERM after a checkpoint), 1 an error (one line, every rank
// stops), 2 bad input, 3 fewer ranks left than minRanks (after a checkpoint), 4 on the minority
// side of a partition (it stops, writing nothing).
import { checkConfig, findCheckpoint, type CheckpointManifest } from '../checkpoint/checkpoint';
import { encodeSafetensors } from '../checkpoint/safetensors';
import { canOverlap, ulfm } from '../comm';
import { Dataset } from '../data/dataset';
import { DatasetError } from '../data/errors';
import { Manager } from '../protocol/manager';
import { formatRedundancy } from '../sharding/placement';
import type { CpuLevel, KernelSettings } from '../nn/backend';
import { cpu } from '../nn/cpu';
import { modelSpecJson, namedTensors } from '../nn/export';
import { Net } from '../nn/net';
import { loadSpec, parseSpec, type ModelSpec } from '../nn/spec';
import { levelAsked, type LevelAsked } from '../rank/kernel-level';
import { lossesText, RankJob } from '../rank/job';
import { launcherWorldRank, launcherWorldSize, mpiFaultToleranceOn, underMpirun } from '../rank/launcher-env';
import type { Summary } from '../run/records';
import { createRunDir, writeModel, writeSummary } from '../run/writer';
import { Optimizer, type OptimizerSettings } from '../solver/optimizer';
import { Trainer, type TrainResult } from '../solver/trainer';
import { resolveTrainOptions, SettingsError, type TrainOptions, type TrainSettings } from './train-settings';
import { runSettings } from '../run/settings';

export type { TrainResult } from '../solver/trainer';

/** How a rank's run ended. */
export interface TrainOutcome<Result = TrainResult> {
  /** the process's exit code (0 done; see the file's comment for the others) */
  exitCode: number;
  /** the run's result, on every rank that reached the end */
  result?: Result;
}

/** Bad input, found before MPI starts, alike on every rank: one line, exit code 2. */
export class InputError extends Error {
  override name = 'InputError';
  /** The exit code it ends the process with. */
  readonly exitCode = 2;
}

interface Resume {
  dir: string;
  manifest: CheckpointManifest;
  /** the kernels' level the resumed run asks for */
  isa: LevelAsked;
  /** why newer checkpoints were passed over */
  skipped: string[];
}

/** The optimizer's settings that change the result (a resume may switch between replicated and sharded state: the same bits). */
function optimizerIdentity(o: OptimizerSettings): Record<string, unknown> {
  return o.name === 'sgd'
    ? { name: o.name, momentum: o.momentum, weight_decay: o.weightDecay }
    : { name: o.name, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weightDecay };
}

/** The settings that fix a run's result, at the kernels' level `isa`; a resume must match the checkpoint's. */
function identity(options: TrainOptions, spec: ModelSpec, dataset: Dataset, shards: number, isa: string): Record<string, unknown> {
  return {
    model: { name: spec.name, input: spec.input, classes: spec.classes, layers: spec.layers },
    data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
    batch: options.batch, lr: options.lr, optimizer: optimizerIdentity(options.optimizer),
    lr_schedule: options.lrSchedule, seed: options.seed, shards, on_failure: options.onFailure,
    lr_rescale: options.lrRescale, steps: options.steps ?? null, epochs: options.epochs ?? null,
    // the CPU kernels' reductions are split by thread: another count gives other bits
    threads: options.threads,
    isa,
  };
}

function checkResume(options: TrainOptions, spec: ModelSpec, dataset: Dataset): Resume {
  const found = findCheckpoint(options.resume!);
  const { manifest } = found;
  if (options.shards !== undefined && options.shards !== manifest.shards) {
    throw new Error(`${found.dir}: written with --shards ${manifest.shards}, this run asks for ${options.shards}`);
  }
  // --isa auto resumes at the level the checkpoint was computed at
  const isa = levelAsked(options.isa, { dir: found.dir, level: manifest.config.isa });
  checkConfig(found.dir, manifest, identity(options, spec, dataset, manifest.shards, isa.level));
  return { ...found, isa };
}

/** The flags that need the world size: fault tolerance on in MPI, --min-ranks, --drill. */
function checkLauncher(options: TrainOptions, worldSize: number): void {
  if (options.onFailure !== 'none' && underMpirun()) {
    if (!ulfm) throw new Error(`--on-failure ${options.onFailure} needs MPI fault tolerance, but the addon was built against an MPI without ULFM: run launch/setup and npm run build, or use --on-failure none`);
    if (!mpiFaultToleranceOn()) throw new Error(`--on-failure ${options.onFailure} needs MPI fault tolerance: launch with launch/ft-run (or mpirun --with-ft ulfm), or use --on-failure none`);
  }
  if (options.spares >= worldSize) throw new Error(`--spares ${options.spares} leaves no working rank in the world size ${worldSize}`);
  const working = options.spares > 0 ? `working world size ${worldSize - options.spares} (--spares ${options.spares})` : `world size ${worldSize}`;
  if (options.minRanks > worldSize - options.spares) throw new Error(`--min-ranks ${options.minRanks} is above the ${working}`);
  // spawned ranks take the ids after the launch's
  const ids = worldSize + (options.respawnLimit ?? 0);
  const absent = options.drills.find((d) => d.rank >= ids);
  if (absent) throw new Error(`--drill names rank ${absent.rank}, but the world size is ${worldSize}${ids > worldSize ? ` and ranks up to ${ids - 1} may be spawned` : ''}`);
}

/**
 * Checks the shard count S (as main() will take it) against the batch and the dataset; returns the
 * per-rank batch of shrink and none modes (undefined in exact mode).
 */
function checkShards(options: TrainOptions, dataset: Dataset, worldSize: number, resume?: Resume): number | undefined {
  const shards = resume?.manifest.shards ?? options.shards ?? worldSize;
  const origin = resume ? `the checkpoint's, ${resume.dir}` : options.shards !== undefined ? '--shards' : 'the world size by default; see --shards';
  if (options.batch < shards) {
    throw new Error(`--batch ${options.batch} is smaller than the ${shards} shards (${origin}): every shard takes at least one sample per step`);
  }
  try {
    dataset.train.layout(shards);
  } catch (error) {
    if (!(error instanceof DatasetError)) throw error;
    throw new Error(`${error.message} (${shards} shards: ${origin})`);
  }
  if (options.onFailure === 'exact') return undefined;
  // the per-rank batch is the initial world's share, so a resume at any world size keeps it
  const initialWorld = resume ? resume.manifest.world_history[0]?.world : worldSize;
  if (!Number.isSafeInteger(initialWorld) || initialWorld < 1) throw new Error(`${resume!.dir}: its manifest has no initial world size (world_history)`);
  if (options.batch % initialWorld !== 0) {
    const world = resume ? `${initialWorld}, the initial world size of ${resume.dir}` : `the world size ${initialWorld}`;
    throw new Error(`--batch ${options.batch} is not a multiple of ${world}: with --on-failure ${options.onFailure} every rank takes --batch / initial world size samples per step`);
  }
  return options.batch / initialWorld;
}

/** The model spec the settings name: a JSON file, or an object given in code. */
function modelSpec(model: TrainOptions['model']): ModelSpec {
  return typeof model === 'string' ? loadSpec(model) : parseSpec('model', JSON.stringify(model));
}

/** The model's name in messages and the summary: its file, or the spec's name. */
function modelLabel(options: TrainOptions, spec: ModelSpec): string {
  return typeof options.model === 'string' ? options.model : spec.name;
}

async function prepare(options: TrainOptions): Promise<{ dataset: Dataset; net: Net; resume?: Resume }> {
  // a spawned rank joins a running job: the job's ranks checked its settings already
  const joining = options.joinId !== undefined;
  const worldSize = launcherWorldSize() - options.spares;
  let dataset: Dataset | undefined;
  try {
    // --respawn's default limit: the initial working size (a spawned rank learns what is left at the join)
    if (options.respawn) options.respawnLimit ??= launcherWorldSize() - options.spares;
    if (!joining) checkLauncher(options, launcherWorldSize());
    const spec = modelSpec(options.model);
    dataset = await Dataset.open(options.data);
    const label = modelLabel(options, spec);
    const [shape, input] = [dataset.sampleShape.join('x'), spec.input.join('x')];
    if (shape !== input) throw new Error(`${label}: takes ${input} inputs, but ${options.data} holds ${shape} samples`);
    if (spec.classes !== dataset.classes) throw new Error(`${label}: has ${spec.classes} classes, but ${options.data} has ${dataset.classes}`);
    const net = new Net(spec, cpu);
    if (net.buffers.length > 0 && options.optimizerState === 'sharded') {
      throw new Error(`${label}: has batchnorm running statistics, which --optimizer-state sharded does not carry yet; use --optimizer-state replicated`);
    }
    const resume = options.resume !== undefined && !joining ? checkResume(options, spec, dataset) : undefined;
    options.rankBatch = checkShards(options, dataset, worldSize, resume);
    if (!joining) createRunDir(options.runDir, resume !== undefined);
    return { dataset, net, resume };
  } catch (error) {
    // its file handles would otherwise be closed by the garbage collector, with a warning on stderr
    await dataset?.close();
    throw new InputError(`ft-train: ${(error as Error).message}`);
  }
}

/** One rank's whole run with resolved options: the ft-train program's and `train()`'s body. */
export async function runTraining(options: TrainOptions): Promise<TrainOutcome> {
  const started = Date.now();
  const { dataset, net, resume } = await prepare(options);
  cpu.setThreads(options.threads);
  const job = new RankJob({
    runDir: options.runDir, hangTimeout: options.hangTimeout, drills: options.drills, joinId: options.joinId,
    steps: options.steps, stopOnSigterm: options.onFailure !== 'none', startStep: resume?.manifest.step ?? 0,
    isa: resume?.isa ?? levelAsked(options.isa),
  });
  const world = await job.start();
  const { observer, progress, runLog, logger } = job;
  const { level } = job.kernels;
  const shards = resume?.manifest.shards ?? options.shards ?? world.size - options.spares;
  const settings = identity(options, net.spec, dataset, shards, level);
  const ft = new Manager({
    ...options, shards, identity: settings, commTimeoutMs: job.bounds.commMs, pidsDir: job.pidsDir,
    spareCheckpoint: (options.onFailure !== 'none' && options.jitCheckpoint) || options.checkpointEvery > 0,
    sumLength: net.params.data.length + net.buffers.length + 1, add: (acc, x) => cpu.addInPlace(acc, x), overlap: canOverlap(options.threads),
    sharded: options.optimizerState === 'sharded'
      ? { optimizer: new Optimizer(options.optimizer, cpu), params: net.params.dataWithTail, redundancy: options.redundancy }
      : undefined,
    respawn: options.respawn ? { limit: options.respawnLimit!, ...respawnCommand(shards, level) } : undefined,
    joined: job.joined,
  }, world, dataset, dataset.train.layout(shards), observer, job.faults);
  const trainer = new Trainer({ ...options, shards }, ft, dataset, net, cpu, observer);
  progress.setTotal(trainer.totalSteps);
  job.stopWith(() => trainer.requestStop());
  // started_ms: from this process's start to MPI's, what a spawned rank adds to a recovery
  logger.info(job.joined ? 'joined' : 'start', { world: world.size, shards, started_ms: performance.now(), options });
  const label = modelLabel(options, net.spec);
  if (runLog.isLeader) {
    const spares = options.spares > 0 ? ` (+${options.spares} spare${options.spares > 1 ? 's' : ''})` : '';
    runLog.event({ event: 'start', world: world.size - options.spares, spares: options.spares, shards, on_failure: options.onFailure, batch: options.batch, isa: level });
    progress.line(`training ${label} on ${options.data}: ${world.size - options.spares} ranks${spares}, ${shards} shards, global batch ${options.batch}, on failure: ${options.onFailure}, kernels at ${level}; run dir ${options.runDir}`);
    for (const reason of resume?.skipped ?? []) progress.line(`${reason}; using ${resume!.dir}`);
  }
  let code = 0;
  let result: TrainResult | undefined;
  try {
    const trained = await trainer.run(resume);
    // a failure during the final write changes the world the results report
    const outcome = (): TrainResult => ({ ...trained, worldFinal: ft.size, failures: ft.failures });
    await ft.finish(() => writeResults(options, label, shards, net, outcome(), ft.bytesReadBack, started, settings, job.kernels));
    result = outcome();
    if (ft.isLeader) {
      const lost = lossesText(result.failures);
      progress.line(`done: ${result.steps} steps, final loss ${result.finalLoss.toFixed(4)}, test accuracy ${(result.testAccuracy * 100).toFixed(2)}%, ` +
        `${result.worldFinal} of ${result.worldInitial} ranks left${lost ? ` (lost ${lost}; ${ft.bytesReadBack} bytes read back)` : ''}, params_sha256 ${result.paramsSha256.slice(0, 16)}`);
    }
    logger.info('end', { ...result });
  } catch (error) {
    const stop = await job.stopped(error, ft, options.checkpointDir);
    if (stop.leave) return { exitCode: stop.code };
    code = stop.code;
  }
  return { exitCode: await job.end(code, ft, dataset), result };
}

/**
 * Trains as every rank of an ft-train job (start the script that calls it with launch/ft-run or
 * `mpirun --with-ft ulfm`): the settings are ft-train's flags, camelCased, with the same defaults.
 * Resolves with the exit code the process should end with; bad settings reject with an InputError
 * (exit code 2). If MPI cannot start in time, the process exits (code 1, one line).
 */
export async function train(settings: TrainSettings): Promise<TrainOutcome> {
  let options: TrainOptions;
  try {
    options = resolveTrainOptions(settings);
  } catch (error) {
    if (error instanceof SettingsError) throw new InputError(error.message);
    throw error;
  }
  // a rank spawned to replace a lost one runs this script again, told its place on the command line
  const spawned = spawnedAs(process.argv);
  return runTraining(spawned ? { ...options, ...spawned } : options);
}

/** `--shards S --isa L --join-id J` as respawnCommand appends them, if present. */
function spawnedAs(argv: string[]): { shards: number; isa: CpuLevel; joinId: number } | undefined {
  const at = argv.lastIndexOf('--join-id');
  const shardsAt = argv.lastIndexOf('--shards');
  const isaAt = argv.lastIndexOf('--isa');
  if (at < 0 || shardsAt < 0 || isaAt < 0) return undefined;
  return { shards: Number(argv[shardsAt + 1]), isa: argv[isaAt + 1] as CpuLevel, joinId: Number(argv[at + 1]) };
}

/**
 * Ends the process the way the ft-train program does once `outcome` settles: the exit code, and a
 * bad input's line printed by world rank 0 alone (every rank finds it).
 */
export function exitWhenDone(outcome: Promise<TrainOutcome<unknown>>): void {
  outcome.then(
    ({ exitCode }) => {
      process.exitCode = exitCode;
    },
    (error: unknown) => {
      const input = error instanceof InputError;
      process.exitCode = input ? 2 : 1;
      // bad input is found before MPI starts, alike on every rank: world rank 0 alone prints it
      if (launcherWorldRank() === 0 || !input) console.error(input ? (error as Error).message : `ft-train: ${(error as Error).stack ?? error}`);
      // mpirun tears the job down at the first non-zero exit: the others give rank 0 time to print
      else setTimeout(() => undefined, 1000);
    },
  );
}

/**
 * What a rank spawned to replace a lost one runs: this program with this rank's flags, minus
 * --resume (it receives the run's state from the ranks instead), with the shard count and the
 * kernels' level fixed and its id given (it joins under ids that no rank had).
 */
function respawnCommand(shards: number, level: CpuLevel): { command: string; args(firstId: number): string[] } {
  const flags: string[] = [];
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; ++i) {
    const [flag] = argv[i].split('=');
    if (['--resume', '--shards', '--isa', '--join-id'].includes(flag)) {
      if (!argv[i].includes('=')) i += 1;
      continue;
    }
    flags.push(argv[i]);
  }
  return {
    command: process.execPath,
    args: (firstId) => [...process.execArgv, process.argv[1], ...flags, '--shards', String(shards), '--isa', level, '--join-id', String(firstId)],
  };
}

/** `bytesReadBack`: what every rank read back from disk, summed (the Manager's, once it has finished). */
function writeResults(options: TrainOptions, model: string, shards: number, net: Net, result: TrainResult, bytesReadBack: number, started: number,
  settings: Record<string, unknown>, kernels: KernelSettings): void {
  writeModel(options.runDir, encodeSafetensors(namedTensors(net), { model: net.spec.name, steps: String(result.steps), params_sha256: result.paramsSha256 }), modelSpecJson(net));
  const summary: Summary = {
    status: 'complete',
    steps: result.steps,
    final_loss: result.finalLoss,
    test_accuracy: result.testAccuracy,
    test_loss: result.testLoss,
    wall_s: (Date.now() - started) / 1000,
    failures: result.failures,
    ranks_lost: result.failures.reduce((n, f) => n + f.lost.length, 0),
    bytes_read_back: bytesReadBack,
    world_initial: result.worldInitial,
    world_final: result.worldFinal,
    params_sha256: result.paramsSha256,
    model,
    data: options.data,
    shards,
    on_failure: options.onFailure,
    batch: options.batch,
    seed: options.seed,
    optimizer: options.optimizer.name,
    optimizer_state: options.optimizerState,
    redundancy: options.optimizerState === 'sharded' ? formatRedundancy(options.redundancy) : null,
    optimizer_state_bytes_per_rank: result.optimizerBytes.state,
    redundancy_bytes_per_rank: result.optimizerBytes.redundancy,
    settings: runSettings(settings),
    kernels,
  };
  writeSummary(options.runDir, summary);
}