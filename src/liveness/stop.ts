// Why the protocol ends a run early, as one typed error the training loop lets through: below
// --min-ranks (after a checkpoint), SIGTERM (after a checkpoint), a rank's own error that every
// survivor agreed to stop for, a repair that cannot finish, sharded optimizer state that no
// survivor's memory can rebuild, survivors that are no majority (the far side of a partition,
// which must leave the run to the other), or silent data corruption that stops the job (nobody can
// be named, or --on-corruption stop). Each has its exit code.
export type StopReason = 'min-ranks' | 'sigterm' | 'error' | 'unrecoverable' | 'state-lost' | 'minority' | 'corruption';

const exitCodes: Record<StopReason, number> = {
  sigterm: 0,
  'min-ranks': 3,
  error: 1,
  unrecoverable: 1,
  'state-lost': 3,
  minority: 4,
  corruption: 1,
};

/** The code the ranks exit with for a `stop` event's reason in events.jsonl (below-min-ranks for min-ranks); undefined for a reason of no stop here. */
export function stopEventExitCode(reason: string): number | undefined {
  if (reason === 'below-min-ranks') return exitCodes['min-ranks'];
  return Object.hasOwn(exitCodes, reason) ? exitCodes[reason as StopReason] : undefined;
}

export class ProtocolStop extends Error {
  override name = 'ProtocolStop';

  /** `erred`: the world ranks that stopped the job for an error of their own (reason 'error') */
  constructor(
    readonly reason: StopReason,
    message: string,
    readonly checkpoint: string | null = null,
    readonly erred: number[] = [],
  ) {
    super(message);
  }

  get exitCode(): number {
    return exitCodes[this.reason];
  }
}
