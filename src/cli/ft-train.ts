// ft-train: what every rank runs under `mpirun --with-ft ulfm` (launch/ft-run). Checks all inputs
// before MPI starts (one line per problem, printed by world rank 0 only), bounds the start-up,
// trains, and has the final leader write model.safetensors and summary.json (voted, so a survivor
// writes them whatever happens). Exit codes: 0 done (or stopped by SIGTERM after a checkpoint),
// 1 an error (one line, every rank stops), 2 bad input, 3 fewer ranks left than --min-ranks
// (after a checkpoint), 4 on the minority side of a partition (it stops, writing nothing).
import * as fs from 'node:fs';
import * as path from 'node:path';
import type * as winston from 'winston';
import { hideBin } from 'yargs/helpers';
import { findCheckpoint, newestCheckpoint, type CheckpointManifest } from '../checkpoint/checkpoint';
import { encodeSafetensors } from '../checkpoint/safetensors';
import { finalize, init, ulfm, type Communicator } from '../comm';
import { Dataset } from '../data/dataset';
import { DatasetError } from '../data/errors';
import { guardAgainstHangs, hangBounds, killDeclaredDead, peersGone } from '../ft/hangs';
import { Manager } from '../ft/manager';
import { withDeadline } from '../ft/repair';
import { formatRedundancy } from '../ft/placement';
import { ProtocolStop } from '../ft/stop';
import { Optimizer, type OptimizerSettings } from '../solver/optimizer';
import { cpu } from '../nn/cpu';
import { Net } from '../nn/net';
import { loadSpec, type ModelSpec } from '../nn/spec';
import { runFiles } from '../run/files';
import { processStat, rankList, readPid } from '../run/pids';
import type { Summary } from '../run/records';
import { createRunDir, RunLog, writeModel, writeSummary } from '../run/writer';
import { FaultInjector } from '../ft/drills';
import { Trainer, type TrainObserver, type TrainResult } from '../solver/trainer';
import { UsageError } from './command';
import { launcherWorldRank, launcherWorldSize, mpiFaultToleranceOn, underMpirun } from './launcher-env';
import { closeLogger, rankLogger } from './logger';
import { Progress } from './progress';
import { parseTrainOptions, type TrainOptions } from './train-options';

/** Bad input: printed as one line, exit code 2. */
class InputError extends Error {}

/** MPI did not start in time: one line, printed by the lowest rank still running, exit code 1. */
class StartupError extends Error {
  constructor(message: string, readonly runDir: string) {
    super(message);
  }
}

/** Whether a process exists and is not stopped (a SIGSTOPped rank is as good as gone). */
function running(pid: number | null): boolean {
  const state = pid === null ? undefined : processStat(pid)?.state;
  return state !== undefined && !['T', 't', 'Z', 'X'].includes(state);
}

/**
 * MPI did not start: the lowest rank still running prints the line, kills the job's other ranks
 * on this host (a stopped one would keep mpirun alive) and, once they are gone, exits 1 last
 * (mpirun returns at the first non-zero exit); every other rank leaves quietly, exit 0.
 */
async function endStartup(error: StartupError): Promise<never> {
  const pidsDir = path.join(error.runDir, runFiles.pids);
  const ranks = rankList(pidsDir);
  const lowest = ranks.find((rank) => running(readPid(pidsDir, rank)));
  if (lowest !== launcherWorldRank()) process.exit(0);
  fs.writeSync(2, `${error.message}\n`); // console.error would be lost to process.exit
  const others = ranks.filter((rank) => rank !== lowest);
  killDeclaredDead(pidsDir, others);
  await peersGone(pidsDir, others, 5000);
  // MPI_Init may never return: leave without waiting for it
  process.exit(1);
}

interface Resume {
  dir: string;
  manifest: CheckpointManifest;
  /** why newer checkpoints were passed over */
  skipped: string[];
}

/** The optimizer's settings that change the result (a resume may switch between replicated and sharded state: the same bits). */
function optimizerIdentity(o: OptimizerSettings): Record<string, unknown> {
  return o.name === 'sgd'
    ? { name: o.name, momentum: o.momentum, weight_decay: o.weightDecay }
    : { name: o.name, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weightDecay };
}

/** The settings that fix a run's result; a resume must match the checkpoint's. */
function identity(options: TrainOptions, spec: ModelSpec, dataset: Dataset, shards: number): Record<string, unknown> {
  return {
    model: { name: spec.name, input: spec.input, classes: spec.classes, layers: spec.layers },
    data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
    batch: options.batch, lr: options.lr, optimizer: optimizerIdentity(options.optimizer),
    lr_schedule: options.lrSchedule, seed: options.seed, shards, on_failure: options.onFailure,
    lr_rescale: options.lrRescale, steps: options.steps ?? null, epochs: options.epochs ?? null,
    // the CPU kernels' reductions are split by thread: another count gives other bits
    threads: options.threads,
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
    if (theirs === undefined) throw new Error(`${found.dir}: written without ${key}, this run has ${ours.slice(0, 80)}`);
    if (theirs !== ours) throw new Error(`${found.dir}: written with ${key} ${theirs.slice(0, 80)}, this run has ${ours.slice(0, 80)}`);
  }
  return found;
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

async function prepare(): Promise<{ options: TrainOptions; dataset: Dataset; net: Net; resume?: Resume }> {
  let options: TrainOptions;
  try {
    options = parseTrainOptions(hideBin(process.argv));
  } catch (error) {
    throw new InputError((error as Error).message);
  }
  // a spawned rank joins a running job: the job's ranks checked its flags already
  const joining = options.joinId !== undefined;
  const worldSize = launcherWorldSize() - options.spares;
  let dataset: Dataset | undefined;
  try {
    // --respawn's default limit: the initial working size (a spawned rank learns what is left at the join)
    if (options.respawn) options.respawnLimit ??= launcherWorldSize() - options.spares;
    if (!joining) checkLauncher(options, launcherWorldSize());
    const spec = loadSpec(options.model);
    dataset = await Dataset.open(options.data);
    const [shape, input] = [dataset.sampleShape.join('x'), spec.input.join('x')];
    if (shape !== input) throw new Error(`${options.model}: takes ${input} inputs, but ${options.data} holds ${shape} samples`);
    if (spec.classes !== dataset.classes) throw new Error(`${options.model}: has ${spec.classes} classes, but ${options.data} has ${dataset.classes}`);
    const net = new Net(spec, cpu);
    const resume = options.resume !== undefined && !joining ? checkResume(options, spec, dataset) : undefined;
    options.rankBatch = checkShards(options, dataset, worldSize, resume);
    if (!joining) createRunDir(options.runDir);
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
  const bounds = hangBounds(options.hangTimeout);
  // under mpirun the rank is known before MPI starts: the pid file and the start-up drill need it
  const launchRank = (options.joinId ?? 0) + launcherWorldRank();
  const runLog = new RunLog(options.runDir, launchRank);
  const pidsDir = path.join(options.runDir, runFiles.pids);
  const logger = rankLogger(runLog.logFile, launchRank);
  const faults = new FaultInjector(options.drills, launchRank, runLog.logFile, pidsDir);
  // preemption: a checkpoint at the next step boundary, then a clean exit; also when it comes during start-up
  let trainer: Trainer | undefined;
  let stopRequested = false;
  if (options.onFailure !== 'none') {
    process.on('SIGTERM', () => {
      stopRequested = true;
      trainer?.requestStop();
    });
  }
  faults.at(resume?.manifest.step ?? 0, 'startup');
  let world: Communicator;
  let joined: boolean;
  try {
    ({ world, joined } = await withDeadline(init(), bounds.startupMs, 'MPI start-up'));
  } catch (error) {
    await closeLogger(logger);
    throw new StartupError(`ft-train: rank ${launchRank}: ${(error as Error).message} (a rank died or hung while starting)`, runLog.dir);
  }
  const disarm = guardAgainstHangs(bounds, launchRank);
  const worldRank = world.worldRanks[world.rank];
  runLog.setLeader(world.rank === 0 && !joined);
  const shards = resume?.manifest.shards ?? options.shards ?? world.size - options.spares;
  const progress = new Progress(options.steps);
  const observer: TrainObserver = {
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
  };
  const ft = new Manager({
    ...options, shards, identity: identity(options, net.spec, dataset, shards), commTimeoutMs: bounds.commMs, pidsDir,
    sumLength: net.params.data.length + 1, add: (acc, x) => cpu.addInPlace(acc, x),
    sharded: options.optimizerState === 'sharded'
      ? { optimizer: new Optimizer(options.optimizer, cpu), params: net.params.dataWithTail, redundancy: options.redundancy }
      : undefined,
    respawn: options.respawn ? { limit: options.respawnLimit!, ...respawnCommand(shards) } : undefined,
    joined,
  }, world, dataset, dataset.train.layout(shards), observer, faults);
  trainer = new Trainer({ ...options, shards }, ft, dataset, net, cpu, observer);
  if (stopRequested) trainer.requestStop();
  // started_ms: from this process's start to MPI's, what a spawned rank adds to a recovery
  logger.info(joined ? 'joined' : 'start', { world: world.size, shards, started_ms: performance.now(), options });
  if (runLog.isLeader) {
    const spares = options.spares > 0 ? ` (+${options.spares} spare${options.spares > 1 ? 's' : ''})` : '';
    runLog.event({ event: 'start', world: world.size - options.spares, spares: options.spares, shards, on_failure: options.onFailure, batch: options.batch });
    progress.line(`training ${options.model} on ${options.data}: ${world.size - options.spares} ranks${spares}, ${shards} shards, global batch ${options.batch}, on failure: ${options.onFailure}; run dir ${options.runDir}`);
    for (const reason of resume?.skipped ?? []) progress.line(`${reason}; using ${resume!.dir}`);
  }
  let code = 0;
  try {
    const trained = await trainer.run(resume);
    // a failure during the final write changes the world the results report
    const outcome = (): TrainResult => ({ ...trained, worldFinal: ft.size, failures: ft.failures });
    await ft.finish(() => writeResults(options, shards, net, outcome(), ft.bytesReadBack, started));
    const result = outcome();
    if (ft.isLeader) {
      const lost = result.failures.map((f) => `rank${f.lost.length > 1 ? 's' : ''} ${f.lost.join(', ')} at step ${f.step}`).join('; ');
      progress.line(`done: ${result.steps} steps, final loss ${result.finalLoss.toFixed(4)}, test accuracy ${(result.testAccuracy * 100).toFixed(2)}%, ` +
        `${result.worldFinal} of ${result.worldInitial} ranks left${lost ? ` (lost ${lost}; ${ft.bytesReadBack} bytes read back)` : ''}, params_sha256 ${result.paramsSha256.slice(0, 16)}`);
    }
    logger.info('end', { ...result });
  } catch (error) {
    const stop = error instanceof ProtocolStop ? error : await stopForError(error as Error, ft, worldRank, logger);
    code = stop.exitCode;
    logger.warn(`stop: ${stop.reason}: ${stop.message}`);
    if (stop.reason === 'error' && ft.isLeader) observer.event({ event: 'stop', step: ft.step, reason: 'error', ranks: stop.erred });
    if (stop.reason === 'minority') {
      // the other side trains on and owns the run directory: one line from this side's lowest rank, nothing written
      if (worldRank === ft.liveRanks[0]) console.error(`ft-train: rank ${worldRank}: ${stop.message}`);
      await closeLogger(logger);
      disarm();
      return code;
    }
    if (stop.reason === 'unrecoverable') {
      // MPI cannot be trusted to finish: make sure no rank of this job lingers on this host, then leave
      console.error(`ft-train: rank ${worldRank}: ${stop.message}`);
      killDeclaredDead(pidsDir, world.worldRanks.filter((r) => r !== worldRank));
      await closeLogger(logger);
      disarm();
      return code;
    }
    if (ft.isLeader && stop.reason === 'state-lost') progress.line(`${stop.message}; stopping: ${newestCheckpoint(options.checkpointDir)}`);
    else if (ft.isLeader && stop.reason !== 'error') progress.line(`${stop.message}; continue with --resume ${stop.checkpoint ?? options.checkpointDir}`);
  }
  disarm();
  await dataset.close();
  await closeLogger(logger);
  await withDeadline(ft.close(), bounds.commMs, 'MPI_Comm_free').catch(() => undefined);
  const finalized = await withDeadline(finalize(), bounds.commMs, 'MPI_Finalize').then(() => true, () => false);
  // a finalize that never returns would keep the process alive: every rank has agreed on the end already
  if (!finalized) process.exit(code);
  return code === 0 ? 0 : exitLast(code, ft, pidsDir, bounds.commMs);
}

/**
 * What a rank spawned to replace a lost one runs: this program with this rank's flags, minus
 * --resume (it receives the run's state from the ranks instead), with the shard count fixed and
 * its id given (it joins under ids that no rank had).
 */
function respawnCommand(shards: number): { command: string; args(firstId: number): string[] } {
  const flags: string[] = [];
  const argv = hideBin(process.argv);
  for (let i = 0; i < argv.length; ++i) {
    const [flag] = argv[i].split('=');
    if (['--resume', '--shards', '--join-id'].includes(flag)) {
      if (!argv[i].includes('=')) i += 1;
      continue;
    }
    flags.push(argv[i]);
  }
  return { command: process.execPath, args: (firstId) => [...process.execArgv, process.argv[1], ...flags, '--shards', String(shards), '--join-id', String(firstId)] };
}

/**
 * The exit code of a job that stops with `code`. Under --with-ft ulfm, mpirun returns as soon as
 * one rank exits non-zero, leaving the others to finish on their own: so the other ranks exit 0
 * and the leader, last, with `code` once they are gone from this host (mpirun waits for ranks
 * that exit 0, on any host).
 */
async function exitLast(code: number, ft: Manager, pidsDir: string, ms: number): Promise<number> {
  if (!ft.isLeader) return 0;
  await peersGone(pidsDir, ft.liveRanks.filter((rank) => rank !== ft.worldRank), ms);
  return code;
}

/**
 * This rank met an error of its own after MPI started: every survivor must reach the same
 * decision in bounded time, so the Manager makes them all stop; the lowest rank that erred prints
 * its error as the job's one line.
 */
async function stopForError(error: Error, ft: Manager, worldRank: number, logger: winston.Logger): Promise<ProtocolStop> {
  logger.error(error.stack ?? String(error));
  const stop = await ft.reportError().catch((failure: unknown) => new ProtocolStop('unrecoverable', `the job could not stop together: ${(failure as Error).message}`));
  if (stop.erred[0] === worldRank || stop.reason !== 'error') console.error(`ft-train: rank ${worldRank}: ${error.message}`);
  return stop;
}

/** `bytesReadBack`: what every rank read back from disk, summed (the Manager's, once it has finished). */
function writeResults(options: TrainOptions, shards: number, net: Net, result: TrainResult, bytesReadBack: number, started: number): void {
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
    bytes_read_back: bytesReadBack,
    world_initial: result.worldInitial,
    world_final: result.worldFinal,
    params_sha256: result.paramsSha256,
    model: options.model,
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
  };
  writeSummary(options.runDir, summary);
}

export function run(): void {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      const input = error instanceof InputError || error instanceof UsageError;
      process.exitCode = input ? 2 : 1;
      if (error instanceof StartupError) {
        void endStartup(error);
        return;
      }
      // bad input is found before MPI starts, alike on every rank: world rank 0 alone prints it
      if (launcherWorldRank() === 0 || !input) console.error(input ? (error as Error).message : `ft-train: ${(error as Error).stack ?? error}`);
      // mpirun tears the job down at the first non-zero exit: the others give rank 0 time to print
      else setTimeout(() => undefined, 1000);
    },
  );
}
