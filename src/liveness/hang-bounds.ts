// The bounds every wait of a rank follows, derived from --hang-timeout T (see hangs.ts for how they
// are enforced); kept apart from the addon so that the launcher can size its own waits on them.

export interface HangBounds {
  /** no beat from the event loop for this long: the rank kills itself */
  watchdogMs: number;
  /** the longest any MPI wait may take before the communicator is revoked */
  commMs: number;
  /** the longest a checkpoint's writes may take before the disk counts as stuck (below commMs: the writer stops the job before its peers give up on it) */
  diskMs: number;
  /** the longest MPI's start-up may take (a rank lost before MPI_Init leaves the others in it) */
  startupMs: number;
}

/** The bounds for --hang-timeout `seconds`. */
export function hangBounds(seconds: number): HangBounds {
  const watchdogMs = Math.round(seconds * 1000);
  // a peer's compute is bounded by its watchdog and its death is seen within T by the detector
  return { watchdogMs, commMs: 3 * watchdogMs, diskMs: 2 * watchdogMs, startupMs: Math.max(10_000, 3 * watchdogMs) };
}

/**
 * How long the first rank of a host other than world rank 0's waits before it prints bad input
 * found in files (rank 0 prints it at once): half the shortest start-up bound (the flags may not
 * say T), so that where rank 0 found nothing wrong, the line comes before rank 0 gives up on MPI's
 * start-up.
 */
export const inputErrorWaitMs = hangBounds(0).startupMs / 2;

/**
 * How long a side cut off from the rest may take, after the rest ended the run, to see that it is
 * a minority and stop: its pending collective, then its vote, then its shrink each wait at most
 * one comm deadline for peers it cannot reach.
 */
export function minorityStopMs(bounds: HangBounds): number {
  return 3 * bounds.commMs;
}

/**
 * How long a rank may stay stopped before its launcher kills it (FrozenRanks): longer than the
 * job's own ranks take to find and kill it on their usual paths, so that the launcher acts where
 * none is left to. They find a launch rank within the detector's T, a spawned one when a wait on it
 * runs past the comm deadline, and a joining rank finds the ones it waits for past its start-up
 * deadline. A longer wait of theirs (a merge's 3 comm deadlines; a failure seen only at the next
 * MPI call after a long evaluation) may meet the rank killed by the launcher first: a failure all
 * the same, seen sooner.
 */
export function frozenRankMs(bounds: HangBounds): number {
  return bounds.startupMs + bounds.commMs;
}
