// The instruction-set level a job's CPU kernels run at, agreed by its ranks as MPI starts and before
// any kernel runs: the best level every rank's host runs, or the one asked for (--isa, or a resumed
// checkpoint's). Every rank pins it (oneDNN's ISA, OpenBLAS's core, the vector kernels' build:
// binding/src/cpu/kernel_level.cc), so that hosts with unlike CPUs, and ranks started with other
// environments (as sshd starts them), compute one result. Ranks whose kernel libraries differ are
// refused: at one level they would still compute other bits.
import { createHash } from 'node:crypto';
import type { Communicator } from '../comm';
import { cpuLevels, type CpuLevel, type KernelSettings } from '../nn/backend';
import { cpu } from '../nn/cpu';
import { withDeadline } from '../liveness/deadline';

/** What a job asks for: 'auto' (the best level every rank's host runs), a level, or 'native' (nothing pinned). */
export type LevelRequest = CpuLevel | 'auto';

/** The level a job asks for, and where the request comes from (for the refusal's line). */
export interface LevelAsked {
  level: LevelRequest;
  origin: string;
}

/** The ranks cannot run one level alike: world rank `printer` prints the line, every rank exits with code 2. */
export class KernelLevelRefusal extends Error {
  override name = 'KernelLevelRefusal';
  constructor(
    message: string,
    readonly printer: number,
  ) {
    super(message);
  }
}

/**
 * What a job asks for: `--isa` as given, but 'auto' on a resume is the level the checkpoint records
 * (its bits need it; 'auto' where it records none, which the settings check then refuses).
 * `resume` undefined: a new run.
 */
export function levelAsked(isa: LevelRequest, resume?: { dir: string; level: unknown }): LevelAsked {
  if (isa === 'auto' && resume) {
    const level = typeof resume.level === 'string' ? (resume.level as LevelRequest) : 'auto';
    return { level, origin: `${resume.dir}, computed at ${level},` };
  }
  return { level: isa, origin: `--isa ${isa}` };
}

const rankList = (ranks: number[]): string => `rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}`;

/**
 * The level for `asked`, given each rank's host level (null: that rank could not tell; its own error
 * says why), ranks numbered by `ids`. Throws KernelLevelRefusal where no level fits every rank.
 */
export function chooseLevel(asked: LevelAsked, hosts: Array<CpuLevel | null>, ids: number[]): CpuLevel {
  const unknown = hosts.findIndex((host) => host === null);
  if (unknown >= 0) throw new KernelLevelRefusal('', ids[unknown]);
  if (asked.level === 'native') return 'native';
  const rankOf = (level: CpuLevel): number => cpuLevels.indexOf(level as Exclude<CpuLevel, 'native'>);
  const lowest = hosts.reduce((low, host) => (rankOf(host!) < rankOf(low!) ? host : low))!;
  if (asked.level === 'auto') return lowest;
  const short = ids.filter((_, r) => rankOf(hosts[r]!) < rankOf(asked.level as CpuLevel));
  if (short.length === 0) return asked.level;
  const levels = [...new Set(short.map((id) => hosts[ids.indexOf(id)]))].join(' or ');
  throw new KernelLevelRefusal(
    `${asked.origin} needs ${asked.level}, but the host${short.length > 1 ? 's' : ''} of ${rankList(short)} ` +
      `run${short.length > 1 ? '' : 's'} up to ${levels}: run on hosts that have ${asked.level}` +
      `${asked.origin.startsWith('--isa') ? `, or pass --isa ${lowest} (or auto)` : ''}`,
    Math.min(...ids),
  );
}

/** 32 bits of the libraries' versions at a pinned level: ranks must agree on them to compute the same bits. */
function librariesDigest(settings: KernelSettings): number {
  const text = [settings.level, settings.onednn, settings.onednnIsa, settings.openblas, settings.openblasCore, settings.vectorKernels].join(
    '\n',
  );
  return createHash('sha256').update(text).digest().readInt32LE(0);
}

/**
 * Agrees on the level over `world` and pins it on this rank: two allgathers, each within
 * `deadlineMs` (a failure of either rejects as the collective's error). Throws KernelLevelRefusal
 * alike on every rank where the ranks cannot run one level alike; logs this rank's own error first
 * through `logError`.
 */
export async function agreeKernelLevel(
  world: Communicator,
  asked: LevelAsked,
  deadlineMs: number,
  logError: (error: Error) => void,
): Promise<KernelSettings> {
  const ids = world.worldRanks;
  const gather = async (mine: number[]): Promise<Int32Array> => {
    const all = new Int32Array(world.size * mine.length);
    await withDeadline(world.allgather(Int32Array.from(mine), all), deadlineMs, 'MPI_Allgather');
    return all;
  };
  // what every rank can do, or why it cannot say (a bad FT_CPU_LEVEL_MAX, a CPU below every level)
  let ownError: Error | undefined;
  let host = -1;
  try {
    host = cpuLevels.indexOf(cpu.hostLevel() as Exclude<CpuLevel, 'native'>);
  } catch (error) {
    ownError = error as Error;
  }
  const hosts = Array.from(await gather([host]), (code) => cpuLevels[code] ?? null);
  let level: CpuLevel;
  try {
    level = chooseLevel(asked, hosts, ids);
  } catch (error) {
    throw withOwnError(error as KernelLevelRefusal, ownError, logError);
  }
  let settings: KernelSettings | undefined;
  try {
    cpu.pinLevel(level);
    settings = cpu.kernelSettings();
  } catch (error) {
    ownError = error as Error;
  }
  const pinned = await gather([settings ? 1 : 0, settings ? librariesDigest(settings) : 0]);
  const failed = ids.find((_, r) => pinned[2 * r] === 0);
  if (failed !== undefined) throw withOwnError(new KernelLevelRefusal('', failed), ownError, logError);
  if (level !== 'native') {
    const other = ids.filter((_, r) => pinned[2 * r + 1] !== pinned[1]);
    if (other.length > 0) {
      throw new KernelLevelRefusal(
        `${rankList(other)} run${other.length > 1 ? '' : 's'} other versions of the kernel libraries (oneDNN, OpenBLAS) than ` +
          `rank ${ids[0]}: they would compute other bits at ${level}; install the same versions on every host (its log names this rank's)`,
        Math.min(...ids),
      );
    }
  }
  return settings!;
}

/** A refusal with no message of its own is the printing rank's error: its message, and its log. */
function withOwnError(refusal: KernelLevelRefusal, ownError: Error | undefined, logError: (error: Error) => void): KernelLevelRefusal {
  if (ownError) logError(ownError);
  return refusal.message === '' ? new KernelLevelRefusal(ownError?.message ?? '', refusal.printer) : refusal;
}
