// The repair half of the recovery protocol: revoke the broken communicator, shrink it to the live
// ranks, and agree, first on whether any survivor is stopping the job for an error of its own
// (reportError's way out), then on the caller's step (every survivor must stand where it stands).
// A failure during any of this starts the repair again on what is left, up to a bounded number of
// attempts; a shrink that does not return in time ends it (its peers are alive but silent).
import { CommTimeoutError, isFailure, type Communicator } from '../comm';
import { ProtocolStop } from './stop';

export interface Repair {
  comm: Communicator;
  /** world ranks of the old communicator that are gone */
  lost: number[];
  /** world ranks (up to 30; 30 stands for 30 and above) that stop the job for an error */
  erred: number[];
  revokeShrinkMs: number;
  agreeMs: number;
  attempts: number;
}

export interface RepairOptions {
  maxAttempts: number;
  /** how long one shrink may take (MPI 5.0 has no non-blocking shrink to poll) */
  deadlineMs: number;
  /** this rank stops the job for an error of its own */
  erred?: boolean;
}

const now = (): number => performance.now();

/** The agree flag's bit of a world rank: agree ANDs, so a rank that erred clears its bit. */
const errorBit = (worldRank: number): number => 1 << Math.min(worldRank, 30);

/** Rejects with CommTimeoutError when `promise` has not settled after `ms`. */
export function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new CommTimeoutError(`${what} did not return within ${ms} ms: a peer is alive but does not take part`, 0)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

/**
 * Repairs `comm` (freed once replaced; use the returned one). `step` must be the same on every
 * survivor unless one of them erred: it is checked with two agreements (AND of step and of its
 * complement). Throws ProtocolStop when the repair cannot finish.
 */
export async function repair(comm: Communicator, step: number, options: RepairOptions): Promise<Repair> {
  const before = [...comm.worldRanks];
  const me = comm.worldRanks[comm.rank];
  let current = comm;
  let revokeShrinkMs = 0;
  let agreeMs = 0;
  for (let attempt = 1; attempt <= options.maxAttempts; ++attempt) {
    const start = now();
    await current.revoke();
    let shrunk: Communicator;
    try {
      shrunk = await withDeadline(current.shrink(), options.deadlineMs, 'MPIX_Comm_shrink');
    } catch (error) {
      if (error instanceof CommTimeoutError) throw new ProtocolStop('unrecoverable', `the repair at step ${step} cannot finish: ${error.message}`);
      if (!isFailure(error)) throw error;
      revokeShrinkMs += now() - start;
      continue;
    }
    await current.free();
    current = shrunk;
    const shrunkAt = now();
    revokeShrinkMs += shrunkAt - start;
    try {
      const clean = await current.agree(options.erred ? ~errorBit(me) : ~0);
      const erred = Array.from({ length: 31 }, (_, r) => r).filter((r) => (clean & errorBit(r)) === 0);
      if (erred.length === 0) {
        const all = await current.agree(step);
        const complement = await current.agree(~step);
        if (all !== step || complement !== ~step) {
          throw new Error(`recovery: the survivors stand at different steps (mine ${step}); this is a bug`);
        }
      }
      agreeMs += now() - shrunkAt;
      const live = new Set(current.worldRanks);
      return { comm: current, lost: before.filter((r) => !live.has(r)), erred, revokeShrinkMs, agreeMs, attempts: attempt };
    } catch (error) {
      if (!isFailure(error)) throw error;
      agreeMs += now() - shrunkAt;
    }
  }
  await current.free().catch(() => undefined);
  throw new ProtocolStop('unrecoverable', `the communicator could not be repaired in ${options.maxAttempts} attempts at step ${step}`);
}
