// One rank's run, wired once for both front doors (train() and the custom loop's elastic()): the
// checks before MPI starts (the launcher, a resume, the shard count, the run directory), the
// bounded start of the job, the Manager and its settings, the start and done lines, the loop, the
// final write (voted) with one summary writer, and every way the run stops (one line, one exit
// code). A front door only says what its loop is: how it checks its inputs, what fixes its result
// (the identity), and how it trains, restores and writes its state.
import { checkConfig, findCheckpoint, type CheckpointManifest } from '../checkpoint/checkpoint';
import { canOverlap, ulfm, type Communicator } from '../comm';
import { Dataset } from '../data/dataset';
import { DatasetError } from '../data/errors';
import type { CpuLevel, KernelSettings } from '../nn/backend';
import { cpu } from '../nn/cpu';
import type { Failure } from '../protocol/contracts';
import { Manager } from '../protocol/manager';
import { levelAsked, type LevelAsked } from '../rank/kernel-level';
import { lossesText, RankJob, type RankObserver } from '../rank/job';
import { launcherWorldRank, launcherWorldSize, mpiFaultToleranceOn, underMpirun } from '../rank/launcher-env';
import type { Summary } from '../run/records';
import { runSettings } from '../run/settings';
import { createRunDir, writeSummary } from '../run/writer';
import { formatRedundancy } from '../sharding/placement';
import { Optimizer } from '../solver/optimizer';
import type { TrainOptions } from './train-settings';

/** How a rank's run ended. */
export interface TrainOutcome<Result> {
  /** the process's exit code (0 done; see api/train.ts for the others) */
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

/** The checkpoint a run resumes from. */
export interface Resume {
  dir: string;
  manifest: CheckpointManifest;
  /** the kernels' level the resumed run asks for */
  isa: LevelAsked;
  /** why newer checkpoints were passed over */
  skipped: string[];
}

/** What every run reports, whichever loop trained it (summary.json and the done line). */
export interface RunResult {
  steps: number;
  /** the last step's loss (mean over its global batch) */
  finalLoss: number;
  /** on the test split at the end; null where nothing was evaluated */
  testAccuracy: number | null;
  testLoss: number | null;
  failures: Failure[];
  /** working ranks at the start and at the end */
  worldInitial: number;
  worldFinal: number;
  /** sha256 of the state's bytes (the parameters, then the buffers) */
  paramsSha256: string;
  /** bytes of optimizer state this rank holds, and of what it keeps for peers' redundancy */
  optimizerBytes: { state: number; redundancy: number };
}

/** What a front door's loop is, for the wiring. */
export interface RankDoor<Result extends RunResult> {
  /** the model's name in the summary */
  label: string;
  /** what the start line says is trained (the label, and how) */
  title: string;
  /** checks of the door's own inputs (the model), before the dataset opens (throw: one line) */
  checkModel(): void;
  /** checks of the door's own inputs against the dataset, before MPI starts (throw: one line) */
  check(dataset: Dataset): void;
  /** the settings that fix the result, at `shards` and the kernels' level `isa` (a resume must match the checkpoint's) */
  identity(dataset: Dataset, shards: number, isa: string): Record<string, unknown>;
  /** the loop, once the job has started (the kernels are pinned) */
  loop(options: TrainOptions, dataset: Dataset, shards: number): RankLoop<Result>;
}

/** A front door's loop: its state's shape for the protocol, its training, its result and files. */
export interface RankLoop<Result extends RunResult> {
  /** exact mode: the length of one shard's contribution to the sum ([gradient | statistics | loss]) */
  sumLength: number;
  /** sharded state: the parameters with one element after them (see solver/step.ts) */
  paramsWithTail: Float32Array;
  /** exact mode: the sum can overlap the backward pass, where the computation reports its progress */
  overlaps: boolean;
  /** the loop under `manager`, reporting to `observer` (before anything else is asked of it) */
  attach(manager: Manager, observer: RankObserver): void;
  /** the run's steps, for the progress bar */
  totalSteps: number;
  /** trains to the end, from `resume` or the start */
  train(resume: Resume | undefined): Promise<void>;
  /** the result as it stands (the world may change during the final write) */
  result(manager: Manager): Result;
  /** the model file(s), by the leader in the final write */
  writeModel(result: Result): void;
  /** what the done line calls the result's hash: params_sha256 (a model's parameters) or state_sha256 (a custom loop's state) */
  hashName: string;
}

/** The flags that need the world size: fault tolerance on in MPI, --spares, --min-ranks, --drill. */
function checkLauncher(options: TrainOptions, worldSize: number): void {
  if (options.onFailure !== 'none' && underMpirun()) {
    if (!ulfm)
      throw new Error(
        `--on-failure ${options.onFailure} needs MPI fault tolerance, but the addon was built against an MPI without ULFM: run launch/setup and npm run build, or use --on-failure none`,
      );
    if (!mpiFaultToleranceOn())
      throw new Error(
        `--on-failure ${options.onFailure} needs MPI fault tolerance: launch with launch/ft-run (or mpirun --with-ft ulfm), or use --on-failure none`,
      );
  }
  if (options.spares >= worldSize) throw new Error(`--spares ${options.spares} leaves no working rank in the world size ${worldSize}`);
  const working =
    options.spares > 0 ? `working world size ${worldSize - options.spares} (--spares ${options.spares})` : `world size ${worldSize}`;
  if (options.minRanks > worldSize - options.spares) throw new Error(`--min-ranks ${options.minRanks} is above the ${working}`);
  // spawned ranks take the ids after the launch's
  const ids = worldSize + (options.respawnLimit ?? 0);
  const absent = options.drills.find((d) => d.rank >= ids);
  if (absent)
    throw new Error(
      `--drill names rank ${absent.rank}, but the world size is ${worldSize}${ids > worldSize ? ` and ranks up to ${ids - 1} may be spawned` : ''}`,
    );
}

function checkResume(options: TrainOptions, dataset: Dataset, door: RankDoor<RunResult>): Resume {
  const found = findCheckpoint(options.resume!);
  const { manifest } = found;
  if (options.shards !== undefined && options.shards !== manifest.shards) {
    throw new Error(`${found.dir}: written with --shards ${manifest.shards}, this run asks for ${options.shards}`);
  }
  // --isa auto resumes at the level the checkpoint was computed at
  const isa = levelAsked(options.isa, { dir: found.dir, level: manifest.config.isa });
  checkConfig(found.dir, manifest, door.identity(dataset, manifest.shards, isa.level));
  return { ...found, isa };
}

/**
 * Checks the shard count S (as the run will take it) against the batch and the dataset; returns
 * the per-rank batch of shrink and none modes (undefined in exact mode).
 */
function checkShards(options: TrainOptions, dataset: Dataset, worldSize: number, resume?: Resume): number | undefined {
  const shards = resume?.manifest.shards ?? options.shards ?? worldSize;
  const origin = resume
    ? `the checkpoint's, ${resume.dir}`
    : options.shards !== undefined
      ? '--shards'
      : 'the world size by default; see --shards';
  if (options.batch < shards) {
    throw new Error(
      `--batch ${options.batch} is smaller than the ${shards} shards (${origin}): every shard takes at least one sample per step`,
    );
  }
  try {
    dataset.train.layout(shards);
  } catch (error) {
    if (!(error instanceof DatasetError)) throw error;
    throw new Error(`${error.message} (${shards} shards: ${origin})`, { cause: error });
  }
  if (options.onFailure === 'exact') return undefined;
  // the per-rank batch is the initial world's share, so a resume at any world size keeps it
  const initialWorld = resume ? resume.manifest.world_history[0]?.world : worldSize;
  if (!Number.isSafeInteger(initialWorld) || initialWorld < 1)
    throw new Error(`${resume!.dir}: its manifest has no initial world size (world_history)`);
  if (options.batch % initialWorld !== 0) {
    const world = resume ? `${initialWorld}, the initial world size of ${resume.dir}` : `the world size ${initialWorld}`;
    throw new Error(
      `--batch ${options.batch} is not a multiple of ${world}: with --on-failure ${options.onFailure} every rank takes --batch / initial world size samples per step`,
    );
  }
  return options.batch / initialWorld;
}

/**
 * Everything checked before MPI starts, alike on every rank (bad input rejects with one InputError
 * line): the launcher's flags, the dataset, the door's own checks, a resume, the shards; then the
 * run directory is made. A spawned rank skips what its job's ranks checked already.
 */
async function openRun<Result extends RunResult>(
  options: TrainOptions,
  door: RankDoor<Result>,
): Promise<{ dataset: Dataset; resume?: Resume }> {
  const joining = options.joinId !== undefined;
  let dataset: Dataset | undefined;
  try {
    // --respawn's default limit: the initial working size (a spawned rank learns what is left at the join)
    if (options.respawn) options.respawnLimit ??= launcherWorldSize() - options.spares;
    if (!joining) checkLauncher(options, launcherWorldSize());
    door.checkModel();
    dataset = await Dataset.open(options.data);
    door.check(dataset);
    const resume = options.resume !== undefined && !joining ? checkResume(options, dataset, door) : undefined;
    options.rankBatch = checkShards(options, dataset, launcherWorldSize() - options.spares, resume);
    if (!joining) createRunDir(options.runDir, resume !== undefined);
    return { dataset, resume };
  } catch (error) {
    // its file handles would otherwise be closed by the garbage collector, with a warning on stderr
    await dataset?.close();
    if (error instanceof InputError) throw error;
    throw new InputError(`ft-train: ${(error as Error).message}`);
  }
}

/** One rank's whole run with resolved options, through `door`'s loop. */
export async function runRank<Result extends RunResult>(options: TrainOptions, door: RankDoor<Result>): Promise<TrainOutcome<Result>> {
  const started = Date.now();
  const spawned = spawnedAs(process.argv);
  if (spawned) Object.assign(options, spawned);
  const { dataset, resume } = await openRun(options, door);
  cpu.setThreads(options.threads);
  const job = new RankJob({
    runDir: options.runDir,
    hangTimeout: options.hangTimeout,
    drills: options.drills,
    joinId: options.joinId,
    steps: options.steps,
    stopOnSigterm: options.onFailure !== 'none',
    startStep: resume?.manifest.step ?? 0,
    isa: resume?.isa ?? levelAsked(options.isa),
  });
  const world = await job.start();
  const { level } = job.kernels;
  const shards = resume?.manifest.shards ?? options.shards ?? world.size - options.spares;
  const identity = door.identity(dataset, shards, level);
  const loop = door.loop(options, dataset, shards);
  const manager = newManager(options, world, job, dataset, shards, identity, loop, level);
  loop.attach(manager, job.observer);
  job.progress.setTotal(loop.totalSteps);
  job.stopWith(() => manager.requestStop());
  // started_ms: from this process's start to MPI's, what a spawned rank adds to a recovery
  job.logger.info(job.joined ? 'joined' : 'start', { world: world.size, shards, started_ms: performance.now(), options });
  if (job.runLog.isLeader) {
    const working = world.size - options.spares;
    const spares = options.spares > 0 ? ` (+${options.spares} spare${options.spares > 1 ? 's' : ''})` : '';
    job.runLog.event({
      event: 'start',
      world: working,
      spares: options.spares,
      shards,
      on_failure: options.onFailure,
      batch: options.batch,
      isa: level,
    });
    job.progress.line(
      `training ${door.title} on ${options.data}: ${working} ranks${spares}, ${shards} shards, global batch ${options.batch}, ` +
        `on failure: ${options.onFailure}, kernels at ${level}; run dir ${options.runDir}`,
    );
    for (const reason of resume?.skipped ?? []) job.progress.line(`${reason}; using ${resume!.dir}`);
  }
  let code = 0;
  let result: Result | undefined;
  try {
    await loop.train(resume);
    await manager.finish(() => {
      const final = loop.result(manager);
      loop.writeModel(final);
      writeSummary(options.runDir, summaryOf(options, door.label, shards, final, manager.bytesReadBack, started, identity, job.kernels));
    });
    result = loop.result(manager);
    if (manager.world.isLeader) {
      const lost = lossesText(result.failures);
      const accuracy = result.testAccuracy === null ? '' : `test accuracy ${(result.testAccuracy * 100).toFixed(2)}%, `;
      job.progress.line(
        `done: ${result.steps} steps, final loss ${result.finalLoss.toFixed(4)}, ${accuracy}${result.worldFinal} of ${result.worldInitial} ranks left` +
          `${lost ? ` (lost ${lost}; ${manager.bytesReadBack} bytes read back)` : ''}, ${loop.hashName} ${result.paramsSha256.slice(0, 16)}`,
      );
    }
    job.logger.info('end', { ...result });
  } catch (error) {
    const stop = await job.stopped(error, manager, options.checkpointDir);
    if (stop.leave) return { exitCode: stop.code };
    code = stop.code;
  }
  return { exitCode: await job.end(code, manager, dataset), result };
}

function newManager(
  options: TrainOptions,
  world: Communicator,
  job: RankJob,
  dataset: Dataset,
  shards: number,
  identity: Record<string, unknown>,
  loop: RankLoop<RunResult>,
  level: CpuLevel,
): Manager {
  return new Manager(
    {
      ...options,
      shards,
      identity,
      commTimeoutMs: job.bounds.commMs,
      pidsDir: job.pidsDir,
      spareCheckpoint: (options.onFailure !== 'none' && options.jitCheckpoint) || options.checkpointEvery > 0,
      sumLength: loop.sumLength,
      add: (acc, x) => cpu.addInPlace(acc, x),
      overlap: loop.overlaps && canOverlap(options.threads),
      sharded:
        options.optimizerState === 'sharded'
          ? { optimizer: new Optimizer(options.optimizer, cpu), params: loop.paramsWithTail, redundancy: options.redundancy }
          : undefined,
      respawn: options.respawn ? { limit: options.respawnLimit!, ...respawnCommand(shards, level) } : undefined,
      joined: job.joined,
    },
    world,
    dataset,
    dataset.train.layout(shards),
    job.observer,
    job.faults,
  );
}

/** summary.json of a run that reached its end; `bytesReadBack`: what every rank read back, summed. */
function summaryOf(
  options: TrainOptions,
  model: string,
  shards: number,
  result: RunResult,
  bytesReadBack: number,
  started: number,
  identity: Record<string, unknown>,
  kernels: KernelSettings,
): Summary {
  return {
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
    settings: runSettings(identity),
    kernels,
  };
}

/**
 * What a rank spawned to replace a lost one runs: this program with this rank's arguments, minus
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
    args: (firstId) => [
      ...process.execArgv,
      process.argv[1],
      ...flags,
      '--shards',
      String(shards),
      '--isa',
      level,
      '--join-id',
      String(firstId),
    ],
  };
}

/** `--shards S --isa L --join-id J` as respawnCommand appends them, if present: this rank was spawned. */
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
      if (launcherWorldRank() === 0 || !input)
        console.error(input ? (error as Error).message : `ft-train: ${(error as Error).stack ?? error}`);
      // mpirun tears the job down at the first non-zero exit: the others give rank 0 time to print
      else setTimeout(() => undefined, 1000);
    },
  );
}
