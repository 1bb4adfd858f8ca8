// Every wait is bounded: a promise raced against a deadline, failing like a wait the comm thread
// gave up on (a peer alive but not taking part), so that callers treat both alike; or, for this
// rank's own disk, failing as an error of this rank (a stuck disk stops the job, as a full one does).
import { CommTimeoutError } from '../comm';

/** Rejects with CommTimeoutError when `promise` has not settled after `ms`. */
export function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return race(promise, ms, () => new CommTimeoutError(`${what} did not return within ${ms} ms: a peer is alive but does not take part`, 0));
}

/**
 * Rejects with an Error (this rank's, not a failure) when `promise`, writes to disk begun at
 * `since` (performance.now()), has not settled `ms` after it.
 */
export function withDiskDeadline<T>(promise: Promise<T>, since: number, ms: number, what: string): Promise<T> {
  return race(promise, since + ms - performance.now(), () => new Error(`${what} did not finish within ${ms / 1000} s: the disk is stuck`));
}

function race<T>(promise: Promise<T>, ms: number, error: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(error()), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
