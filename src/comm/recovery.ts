// The repair half of the recovery protocol: revoke the broken communicator, shrink it to the live
// ranks, and agree on the result (and on the caller's step, so every survivor knows the others
// stand where it stands). A failure during any of this starts the repair again on what is left,
// up to a bounded number of attempts.
import type { Communicator } from './communicator';
import { isFailure } from './errors';

export interface Repair {
  comm: Communicator;
  /** world ranks of the old communicator that are gone */
  lost: number[];
  revokeShrinkMs: number;
  agreeMs: number;
  attempts: number;
}

const now = (): number => performance.now();

/**
 * Repairs `comm` (freed afterwards; use the returned one). `step` must be the same on every
 * survivor: it is checked with two agreements (AND of step and of its complement).
 */
export async function repair(comm: Communicator, step: number, maxAttempts: number): Promise<Repair> {
  const before = [...comm.worldRanks];
  let current = comm;
  let revokeShrinkMs = 0;
  let agreeMs = 0;
  for (let attempt = 1; attempt <= maxAttempts; ++attempt) {
    const start = now();
    await current.revoke();
    let shrunk: Communicator;
    try {
      shrunk = await current.shrink();
    } catch (error) {
      if (!isFailure(error)) throw error;
      revokeShrinkMs += now() - start;
      continue;
    }
    await current.free();
    current = shrunk;
    const shrunkAt = now();
    revokeShrinkMs += shrunkAt - start;
    try {
      const all = await current.agree(step);
      const complement = await current.agree(~step);
      agreeMs += now() - shrunkAt;
      if (all !== step || complement !== ~step) {
        throw new Error(`recovery: the survivors stand at different steps (mine ${step}); this is a bug`);
      }
      const live = new Set(current.worldRanks);
      return { comm: current, lost: before.filter((r) => !live.has(r)), revokeShrinkMs, agreeMs, attempts: attempt };
    } catch (error) {
      if (!isFailure(error)) throw error;
      agreeMs += now() - shrunkAt;
    }
  }
  throw new Error(`recovery: the communicator could not be repaired in ${maxAttempts} attempts`);
}
