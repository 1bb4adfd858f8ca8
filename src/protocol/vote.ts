// The vote: after every collective, every live rank agrees (MPIX_Comm_agree, an AND over the
// survivors) on whether it succeeded everywhere, so that no survivor ever goes on from a collective
// that failed elsewhere. Bit 0 of the flag is "my collective succeeded", bit 1 "I do not ask to
// stop"; a step's vote also carries what the spawn's root knows of the ranks spawned beside
// training. A failure met inside a collective or the agreement itself is noted once per step (the
// failure event, with how long the call had waited) and decided alike on every survivor. A wait
// that ran past its deadline is first reported to `timedOut` (which kills the stopped ranks it
// can see, so that the agreement that follows meets a failure instead of waiting out its own).
import { CommTimeoutError, isFailure, type Communicator } from '../comm';
import type { Phase } from '../liveness/drills';
import type { FailurePolicy, ProtocolObserver, StepPosition } from './contracts';

/** Bit 0 of a vote's flag: this rank's collective succeeded. */
export const OK = 1;
/** Bit 1 of a vote's flag: this rank does not ask to stop. */
export const CARRY_ON = 2;
/** Bit 2 of a step's vote: the spawned ranks are not all ready to join yet (as far as this rank knows). */
export const SPAWN_WAITING = 4;
/** Bit 3 of a step's vote: none of the spawned ranks is known lost. */
export const SPAWN_SOUND = 8;
/** Bit 4 of a step's vote: the spawned ranks do not all wait to be accepted (as far as this rank knows). */
export const SPAWN_NOT_UP = 16;

const now = (): number => performance.now();

export class Vote {
  private failedAt = -1;

  constructor(
    private readonly policy: FailurePolicy,
    /** the communicator of every live rank, as it stands (a repair or a spawn replaces it) */
    private readonly everyone: () => Communicator,
    private readonly position: StepPosition,
    private readonly observer: ProtocolObserver,
    private readonly timedOut: () => void,
  ) {}

  /** Whether the current step met a failure (it is being retried once the recovery is done). */
  get retrying(): boolean {
    return this.failedAt === this.position.step;
  }

  /** The AND of `flag` over the survivors, or null when the agreement itself met a failure (alike on all). */
  async agree(flag: number): Promise<number | null> {
    const comm = this.everyone();
    // alone, there is nobody to agree with: the AND over one rank is its flag
    if (comm.size === 1) return flag;
    const started = now();
    try {
      return await comm.agree(flag);
    } catch (error) {
      if (!isFailure(error)) throw error;
      if (error instanceof CommTimeoutError) this.timedOut();
      this.noteFailure(error, 'agree', now() - started);
      return null;
    }
  }

  /**
   * Runs `run`, a collective; false when a failure interrupted it (noted as this step's failure).
   * Any other error passes through, and so does a failure with --on-failure none (it ends the job).
   */
  async completes(phase: Phase, run: () => Promise<void>): Promise<boolean> {
    const started = now();
    try {
      await run();
      return true;
    } catch (error) {
      if (!isFailure(error) || this.policy === 'none') throw error;
      if (error instanceof CommTimeoutError) this.timedOut();
      this.noteFailure(error, phase, now() - started);
      return false;
    }
  }

  /** Runs `run` (a collective), then the vote; whether every survivor's succeeded. Nothing recovers here. */
  async succeedsEverywhere(phase: Phase, run: () => Promise<void>): Promise<boolean> {
    const ok = await this.completes(phase, run);
    return (await this.agree(ok ? OK : 0)) === OK;
  }

  /** The first failure seen at this step; `detectMs`: how long the call that met it had waited. */
  noteFailure(error: Error, phase: string, detectMs: number): void {
    if (this.failedAt === this.position.step) return;
    this.failedAt = this.position.step;
    this.observer.event({ event: 'failure', step: this.position.step, phase, error: error.name, detect_ms: detectMs });
    this.observer.log(`step ${this.position.step}: ${error.name} in the ${phase} phase`);
  }

  /** A rollback in a recovery: the steps from the one rolled back to are replayed, none retried (the failure stays on record). */
  replaying(): void {
    this.failedAt = -1;
  }

  /** A rank that joins a recovery takes the step it retries as failed, as its peers do. */
  joinRecoveryAt(step: number): void {
    this.failedAt = step;
  }
}
