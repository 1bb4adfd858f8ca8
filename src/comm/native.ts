// The addon's surface, typed by hand (it is checked by the addon's own argument checks at run
// time), and the one place the addon is loaded.
import * as path from 'node:path';
import type { Backend } from '../nn/backend';
import { CommTimeoutError, MpiError, NotSupportedError, ProcFailedError, RevokedError } from './errors';

/** Typed arrays the communicator moves; reductions apply element-wise in their own type. */
export type CommBuffer = Float32Array | Float64Array | Int32Array | Uint8Array;
export type ReduceOp = 'sum' | 'max' | 'min';

/**
 * One MPI communicator (a dup of COMM_WORLD with MPI_ERRORS_RETURN, or shrunk from one). Every
 * method queues its call on the comm thread and settles when MPI returns; calls run in the order
 * they were made. Buffers must not be touched until the Promise settles.
 */
export interface Communicator {
  readonly rank: number;
  readonly size: number;
  /** worldRanks[r] is the MPI_COMM_WORLD rank of rank r of this communicator. */
  readonly worldRanks: number[];
  /** In place: buffer becomes the element-wise reduction over all ranks. */
  allreduce(buffer: CommBuffer, op?: ReduceOp): Promise<void>;
  /** In place: every rank's buffer becomes root's. */
  bcast(buffer: CommBuffer, root: number): Promise<void>;
  barrier(): Promise<void>;
  /** recvbuf (size * sendbuf.length elements) holds every rank's sendbuf, in rank order. */
  allgather(sendbuf: CommBuffer, recvbuf: CommBuffer): Promise<void>;
  /** Rank r contributes counts[r] elements; recvbuf holds them packed in rank order. */
  allgatherv(sendbuf: CommBuffer, recvbuf: CommBuffer, counts: ArrayLike<number>): Promise<void>;
  /**
   * sendbuf holds sendCounts[d] elements for each rank d, packed in rank order; recvbuf receives
   * recvCounts[s] elements from each rank s, likewise.
   */
  alltoallv(sendbuf: CommBuffer, sendCounts: ArrayLike<number>, recvbuf: CommBuffer,
    recvCounts: ArrayLike<number>): Promise<void>;
  /** MPIX_Comm_revoke: every pending and future call on it, on every rank, fails. Runs ahead of queued calls and while one waits. */
  revoke(): Promise<void>;
  isRevoked(): Promise<boolean>;
  /** MPIX_Comm_shrink: a new communicator of the live ranks (collective over them). */
  shrink(): Promise<Communicator>;
  /**
   * MPIX_Comm_agree: the bitwise AND of every live rank's flag, the same on each. Rejects with
   * ProcFailedError, alike on every survivor, if a failure is not yet acknowledged (the flag is
   * then undefined).
   */
  agree(flag: number): Promise<number>;
  /** MPIX_Comm_get_failed: MPI_COMM_WORLD ranks of this communicator's known-dead processes, in the order they were detected. */
  getFailed(): Promise<number[]>;
  /** MPI_Comm_free; any later call on it throws. */
  free(): Promise<void>;
}

export interface MpiSession {
  /** A dup of MPI_COMM_WORLD with MPI_ERRORS_RETURN: never COMM_WORLD itself. */
  world: Communicator;
  /** MPI's provided thread level (the comm thread alone calls MPI). */
  threadLevel: number;
  /** MPI_Get_library_version. */
  library: string;
}

interface Addon {
  init(): Promise<MpiSession>;
  finalize(): Promise<void>;
  registerErrorTypes(types: Record<string, unknown>): void;
  ulfm: boolean;
  cpu: Backend;
  /** How long any wait on the comm thread may last before it revokes the communicator (0: no limit). */
  setCommTimeout(ms: number): void;
  /** While idle, the comm thread drives MPI's progress this often, for the failure detector's heartbeats (0: never). */
  setIdleProgress(ms: number): void;
  /** (Re)arms the progress watchdog: no beat() for timeoutMs and the process prints `line` and dies (0: off). */
  watchdog(timeoutMs: number, line: string): void;
  beat(): void;
  /** CRC-64 (ECMA-182, reflected; ISA-L) of the bytes, chained from `previous`; 16 hex digits. */
  crc64(bytes: ArrayBufferView, previous?: string): string;
}

const addonPath = path.resolve(__dirname, '..', '..', '..', 'build', 'Release', 'ft_train_native.node');

function load(): Addon {
  let addon: Addon;
  try {
    addon = require(addonPath) as Addon;
  } catch (error) {
    throw new Error(`cannot load the native addon ${addonPath}: ${(error as Error).message}; ` +
      'run `npm run build` (after launch/setup)');
  }
  addon.registerErrorTypes({ MpiError, ProcFailedError, RevokedError, NotSupportedError, CommTimeoutError });
  return addon;
}

export const addon = load();
