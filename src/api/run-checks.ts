// What is checked before MPI starts, alike on every rank, for both front doors: the launcher's
// flags, the dataset, the door's own inputs, a resume (its checkpoint's settings must match), and
// the shard count, where the checkpoint directory goes; then the run directory is made. Bad input is one InputError line, exit code 2.
import * as fs from 'node:fs';
import { nearestExisting } from '../base/make-directory';
import { checkConfig, findCheckpoint, type CheckpointManifest } from '../checkpoint/checkpoint';
import { ulfm } from '../comm';
import { Dataset } from '../data/dataset';
import { DatasetError } from '../data/errors';
import { levelAsked, type LevelAsked } from '../rank/kernel-level';
import { launcherNamespace, launcherWorldSize, mpiFaultToleranceOn, underMpirun } from '../rank/launcher-env';
import { createRunDir } from '../run/writer';
import type { TrainOptions } from './train-settings';

/**
 * Bad input, found before MPI starts, alike on every rank of a host: one line, exit code 2.
 * `everyHost`: found from the flags alone, so alike on every host too; else from files, which
 * another host may lack or hold otherwise.
 */
export class InputError extends Error {
  override name = 'InputError';
  /** The exit code it ends the process with. */
  readonly exitCode = 2;
  constructor(
    message: string,
    readonly everyHost = false,
  ) {
    super(message);
  }
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

/** What a front door checks of its own inputs, and what fixes its result. */
export interface RunInputs {
  /** checks of the door's own inputs (the model), before the dataset opens (throw: one line) */
  checkModel(): void;
  /** checks of the door's own inputs against the dataset, before MPI starts (throw: one line) */
  check(dataset: Dataset): void;
  /** the settings that fix the result, at `shards` and the kernels' level `isa` (a resume must match the checkpoint's) */
  identity(dataset: Dataset, shards: number, isa: string): Record<string, unknown>;
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
  if (options.reserves >= worldSize)
    throw new Error(`--reserves ${options.reserves} leaves no working rank in the world size ${worldSize}`);
  // the reserves sleep outside the world
  worldSize -= options.reserves;
  if (options.spares >= worldSize) throw new Error(`--spares ${options.spares} leaves no working rank in the world size ${worldSize}`);
  const idle = [options.spares > 0 ? `--spares ${options.spares}` : '', options.reserves > 0 ? `--reserves ${options.reserves}` : '']
    .filter(Boolean)
    .join(', ');
  const working = idle ? `working world size ${worldSize - options.spares} (${idle})` : `world size ${worldSize}`;
  if (options.minRanks > worldSize - options.spares) throw new Error(`--min-ranks ${options.minRanks} is above the ${working}`);
  // spawned ranks take the ids after the launch's
  const ids = worldSize + (options.respawnLimit ?? 0);
  const absent = options.drills.find((d) => d.rank >= ids);
  if (absent)
    throw new Error(
      `--drill names rank ${absent.rank}, but the world size is ${worldSize}${ids > worldSize ? ` and ranks up to ${ids - 1} may be spawned` : ''}`,
    );
}

function checkResume(options: TrainOptions, dataset: Dataset, door: RunInputs): Resume {
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
  // a working rank without a shard (it still holds a chunk of sharded state) would pass for one of the spares
  if (options.spares > 0 && shards < worldSize) {
    throw new Error(
      `${resume ? `${resume.dir}: its ${shards} shards are` : `--shards ${shards} is`} fewer than the ${worldSize} working ranks launched: with --spares every working rank holds at least one shard (launch ${shards}, and any more as --spares)`,
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

/** --eval-samples against the test split it takes its first samples from. */
function checkEvalSamples(options: TrainOptions, dataset: Dataset): void {
  const { evalSamples } = options;
  if (evalSamples !== undefined && evalSamples > dataset.test.rows)
    throw new Error(`--eval-samples ${evalSamples} is more than the ${dataset.test.rows} samples of the test split (${dataset.test.path})`);
}

/**
 * The checkpoint directory can be made where it is asked for: the nearest part of its path that
 * exists is a directory this process may write in. Found only at a failure, the JIT checkpoint's
 * write would stop the run instead.
 */
function checkCheckpointDir(dir: string): void {
  const at = nearestExisting(dir);
  if (!fs.statSync(at).isDirectory()) throw new Error(`--checkpoint-dir ${dir}: ${at} is not a directory`);
  try {
    fs.accessSync(at, fs.constants.W_OK);
  } catch (error) {
    throw new Error(`--checkpoint-dir ${dir}: cannot write in ${at} (${(error as NodeJS.ErrnoException).code})`, { cause: error });
  }
}

/**
 * Everything checked before MPI starts, alike on every rank (bad input rejects with one InputError
 * line): the launcher's flags, the dataset, the door's own checks, a resume, the shards; then the
 * run directory is made. A spawned rank skips what its job's ranks checked already.
 */
export async function openRun(options: TrainOptions, door: RunInputs): Promise<{ dataset: Dataset; resume?: Resume }> {
  const joining = options.joinId !== undefined;
  let dataset: Dataset | undefined;
  try {
    // --respawn's default limit: the initial working size (a spawned rank learns what is left at the join)
    if (options.respawn) options.respawnLimit ??= launcherWorldSize() - options.reserves - options.spares;
    if (!joining) {
      try {
        checkLauncher(options, launcherWorldSize());
      } catch (error) {
        throw new InputError(`ft-train: ${(error as Error).message}`, true);
      }
    }
    door.checkModel();
    dataset = await Dataset.open(options.data);
    door.check(dataset);
    checkEvalSamples(options, dataset);
    const resume = options.resume !== undefined && !joining ? checkResume(options, dataset, door) : undefined;
    options.rankBatch = checkShards(options, dataset, launcherWorldSize() - options.reserves - options.spares, resume);
    if (!joining) checkCheckpointDir(options.checkpointDir);
    if (!joining) createRunDir(options.runDir, resume !== undefined, launcherNamespace());
    return { dataset, resume };
  } catch (error) {
    // its file handles would otherwise be closed by the garbage collector, with a warning on stderr
    await dataset?.close();
    if (error instanceof InputError) throw error;
    throw new InputError(`ft-train: ${(error as Error).message}`);
  }
}
