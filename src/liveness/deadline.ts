// Every wait is bounded: a promise raced against a deadline, failing like a wait the comm thread
// gave up on (a peer alive but not taking part), so that callers treat both alike.
import { CommTimeoutError } from '../comm';

/** Rejects with CommTimeoutError when `promise` has not settled after `ms`. */
export function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new CommTimeoutError(`${what} did not return within ${ms} ms: a peer is alive but does not take part`, 0)),
      ms,
    );
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
