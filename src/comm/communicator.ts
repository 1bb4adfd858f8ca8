// The communicator as the addon hands it out, typed by hand (the addon's own argument checks
// hold it to this at run time); src/base/addon.ts loads the addon.

/** Typed arrays the communicator moves; reductions apply element-wise in their own type. */
export type CommBuffer = Float32Array | Float64Array | Int32Array | Uint8Array;
export type ReduceOp = 'sum' | 'max' | 'min';

/**
 * One MPI communicator (a dup of COMM_WORLD with MPI_ERRORS_RETURN, or made from one: shrunk,
 * split, grown by spawn and accept). Every
 * method queues its call on the comm thread and settles when MPI returns; calls run in the order
 * they were made. Buffers must not be touched until the Promise settles.
 */
export interface Communicator {
  readonly rank: number;
  readonly size: number;
  /**
   * worldRanks[r] is the id of rank r of this communicator, the same in every communicator it is
   * in: its MPI_COMM_WORLD rank for a process the job started, the id spawn() gave it otherwise.
   */
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
   * recvCounts[s] elements from each rank s, likewise. Given sendDispls and recvDispls (element
   * offsets, both or neither), the blocks lie there instead: send blocks may overlap (one buffer to
   * several ranks, no copy), receive blocks may not.
   */
  alltoallv(
    sendbuf: CommBuffer,
    sendCounts: ArrayLike<number>,
    recvbuf: CommBuffer,
    recvCounts: ArrayLike<number>,
    sendDispls?: ArrayLike<number>,
    recvDispls?: ArrayLike<number>,
  ): Promise<void>;
  /** MPIX_Comm_revoke: every pending and future call on it, on every rank, fails. Runs ahead of queued calls and while one waits. */
  revoke(): Promise<void>;
  isRevoked(): Promise<boolean>;
  /** MPIX_Comm_shrink: a new communicator of the live ranks (collective over them). */
  shrink(): Promise<Communicator>;
  /**
   * MPI_Comm_split (collective; blocking in MPI, so bound it): the ranks passing the same color
   * >= 0 get a communicator of their own, ordered by key; color -1 gets null.
   */
  split(color: number, key: number): Promise<Communicator | null>;
  /**
   * Starts `count` processes running `command ...args` (PMIx_Spawn, the runtime call MPI_Comm_spawn
   * makes; on this rank alone, not collective) and resolves with the port they connect to, as soon
   * as they are launched: the ranks go on meanwhile, while MPI_Comm_spawn would hold them all until
   * the new processes' MPI runs. Their init() publishes that it runs (spawnedUp()), then waits for
   * accept() and resolves with `joined` true. Rejects with MpiError (MPI_ERR_SPAWN) when they
   * cannot be started, NotSupportedError where the addon was built without PMIx.
   */
  spawn(command: string, args: string[], count: number): Promise<string>;
  /** Whether all `count` processes spawn() started for `port` run MPI and wait to connect (MPI_Lookup_name, without waiting). */
  spawnedUp(port: string, count: number): Promise<boolean>;
  /**
   * MPI_Comm_accept of the processes spawn() started for `port` (collective; blocking in MPI, so
   * bound it; call it once spawnedUp() said so): the intercommunicator between them and this one's
   * ranks, to be merged (merge()) once they are ready; theirs will be numbered firstId, firstId + 1, ...
   */
  accept(port: string, count: number, firstId: number): Promise<Communicator>;
  /**
   * On rank 0 of the side that spawned, before merge(): whether every spawned process has said it
   * is ready to merge (it does so in its merge()), without waiting. Rejects with ProcFailedError
   * where one died before saying so.
   */
  spawnedReady(): Promise<boolean>;
  /**
   * MPI_Intercomm_merge of a spawn's intercommunicator (collective over both sides; blocking in
   * MPI, so bound it): one communicator of the spawning ranks, then the spawned ones. A spawned
   * process says it is ready first; the spawning side waits for that (bounded like the collectives).
   */
  merge(): Promise<Communicator>;
  /**
   * MPIX_Comm_agree: the bitwise AND of every live rank's flag, the same on each. Rejects with
   * ProcFailedError, alike on every survivor, if a failure is not yet acknowledged (the flag is
   * then undefined).
   */
  agree(flag: number): Promise<number>;
  /** MPIX_Comm_get_failed: the ids of this communicator's known-dead processes, in the order they were detected. */
  getFailed(): Promise<number[]>;
  /** MPI_Comm_free; any later call on it throws. */
  free(): Promise<void>;
}

export interface MpiSession {
  /**
   * A dup of MPI_COMM_WORLD with MPI_ERRORS_RETURN, never COMM_WORLD itself; in a process that a
   * running job spawned, the intercommunicator with the ranks that spawned it (merge() it to join them).
   */
  world: Communicator;
  /** this process was spawned by a running job's ranks (Communicator.spawn), which accepted it */
  joined: boolean;
  /** MPI's provided thread level (the comm thread alone calls MPI). */
  threadLevel: number;
  /** MPI_Get_library_version. */
  library: string;
}
