// The MPI binding as the rest of ft-train uses it: init/finalize, the Communicator, typed errors.
import * as os from 'node:os';
import { addonPart } from '../base/addon';
import type { Communicator, MpiSession } from './communicator';
import { CommTimeoutError, MpiError, NotSupportedError, ProcFailedError, RevokedError } from './errors';

export type { CommBuffer, Communicator, MpiSession, ReduceOp } from './communicator';
export { CommTimeoutError, MpiError, NotSupportedError, ProcFailedError, RevokedError, isFailure } from './errors';

/** The addon's MPI part. */
interface MpiPart {
  init(reserves: number): Promise<Omit<MpiSession, 'world'> & { world: Communicator | null; reserve: boolean }>;
  awaitWake(): Promise<{ port: string; args: string[] } | 'dismissed' | 'abandoned'>;
  connectWoken(port: string): Promise<Communicator>;
  wakeReserve(worldRank: number, args: string[]): Promise<string>;
  dismissReserves(worldRanks: number[]): Promise<void>;
  finalize(): Promise<void>;
  exitNow(code: number): never;
  /** the classes the addon constructs an MPI error as, keeping its error class */
  registerErrorTypes(types: Record<string, unknown>): void;
  ulfm: boolean;
  /** Whether the main thread computes (pending requests are then polled between naps, leaving it the core) or will wait on the comm thread. */
  setMainComputing(computing: boolean): void;
}

const addon = addonPart<MpiPart>();
addon.registerErrorTypes({ MpiError, ProcFailedError, RevokedError, NotSupportedError, CommTimeoutError });

/** True when the addon was built against an MPI with ULFM (revoke, shrink, agree). */
export const ulfm: boolean = addon.ulfm;

let started: ReturnType<MpiPart['init']> | undefined;
let woken: MpiSession | undefined;

/**
 * Starts the comm thread and initialises MPI, once per process. With `reserves` > 0 the launch's
 * last `reserves` processes are left out of the world: they are reserves (startsAsReserve), whose
 * session, once woken, is the one init() then resolves with.
 */
export async function init(reserves = 0): Promise<MpiSession> {
  if (woken) return woken;
  started = addon.init(reserves);
  const session = await started;
  if (session.reserve) throw new Error('init: this process is a reserve, not woken yet (awaitWake)');
  return session as MpiSession;
}

/** Starts MPI as init() does: whether this process is one of the launch's last `reserves`. */
export async function startsAsReserve(reserves: number): Promise<boolean> {
  started = addon.init(reserves);
  return (await started).reserve;
}

/**
 * On a reserve: sleeps (a receive polled between 10 ms naps) until a rank of the job wakes it: the
 * port to connect to (connectWoken) and the arguments the job's ranks give a rank they spawn;
 * 'dismissed' when the run ended; 'abandoned' when every process before it in the launch failed
 * (none is left to wake it).
 */
export function awaitWake(): Promise<{ port: string; args: string[] } | 'dismissed' | 'abandoned'> {
  return addon.awaitWake();
}

/**
 * On a woken reserve, as a spawned process does: says that its MPI runs, then connects to `port`,
 * which blocks until the waking ranks accept it (bound it). init() then resolves with `joined`
 * true and the link to merge.
 */
export async function connectWoken(port: string): Promise<void> {
  const link = await addon.connectWoken(port);
  woken = { ...(await started!), world: link, joined: true };
}

/**
 * Wakes the reserve at MPI_COMM_WORLD rank `worldRank` (not collective: on a rank of the launch's
 * job): the port it connects to, as from Communicator.spawn, once it runs `args`' part.
 */
export function wakeReserve(worldRank: number, args: string[]): Promise<string> {
  return addon.wakeReserve(worldRank, args);
}

/** Tells the reserves at these MPI_COMM_WORLD ranks that the run ended (one gone or woken is passed over). */
export function dismissReserves(worldRanks: number[]): Promise<void> {
  return addon.dismissReserves(worldRanks);
}

/** Fails queued calls that have not started, then finalizes MPI and ends the comm thread. */
export function finalize(): Promise<void> {
  return addon.finalize();
}

/**
 * Ends the process with `code` at once, without exit()'s teardown, which would wait for a thread
 * blocked for good in a write to a stuck disk (libuv joins its thread pool at exit). For a process
 * that has written, flushed and finalized all it owes.
 */
export function exitNow(code: number): never {
  return addon.exitNow(code);
}

/** The cores this process may run on, as it started (before compute threads are pinned to theirs). */
const coresAtStart = os.availableParallelism();

/**
 * Whether communication can overlap computation on `computeThreads` threads: only where the process
 * has a core beyond theirs for the comm thread. On a core it shares it only time-slices with them:
 * lenet's exact step at 2 ranks of one core each computed 0.2 ms longer with its sum's buckets sent
 * during backward, and its collective took no less.
 */
export function canOverlap(computeThreads: number): boolean {
  return coresAtStart > computeThreads;
}

/**
 * Runs `work` (computation that collectives started earlier overlap) telling the comm thread that
 * the main thread computes meanwhile: it then polls their requests between naps instead of
 * yielding in a loop on the core the two threads share.
 */
export async function whileComputing<T>(work: () => Promise<T>): Promise<T> {
  addon.setMainComputing(true);
  try {
    return await work();
  } finally {
    addon.setMainComputing(false);
  }
}

/**
 * A Float32Array for MPI to receive into, its pages made resident here first. Over shared memory
 * Open MPI copies straight from the sender's process into the receiver's pages (CMA), where the
 * first touch of a fresh allocation faults page by page, slower than a local write does: on a
 * 2-core virtual machine 31 MB received at 3 ranks on 2 cores took 44-65 ms into a fresh buffer
 * and 8-19 ms into a touched one, whose touch cost 26 ms.
 */
export function receiveBuffer(length: number): Float32Array {
  return new Float32Array(length).fill(0);
}
