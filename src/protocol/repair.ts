// The repair half of the recovery protocol: revoke the broken communicator, shrink it to the live
// ranks, and agree, first on whether any survivor is stopping the job for an error of its own
// (reportError's way out), then on the caller's step (every survivor must stand where it stands).
// A failure during any of this starts the repair again on what is left, up to a bounded number of
// attempts; a shrink that does not return in time ends it (its peers are alive but silent). Then
// the world's side of it: ranks declared dead for hanging are killed, the survivors go on only as a
// majority (no split brain), and a rank's own error stops every survivor alike.
import { CommTimeoutError, isFailure, type Communicator } from '../comm';
import { withDeadline } from '../liveness/deadline';
import { killDeclaredDead, killStopped, peersGone } from '../liveness/hangs';
import { goneFromHere } from '../run/pids';
import type { Phase } from '../liveness/drills';
import type { ProtocolConfig, ProtocolObserver, RunHistory, StepPosition } from './contracts';
import type { Membership } from './membership';
import { ProtocolStop } from '../liveness/stop';
import type { Vote } from './vote';

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
  /** called in each attempt once the communicator is shrunk, before its agreements (a drill point) */
  shrunk?: () => void;
}

const now = (): number => performance.now();

/** The agree flag's bit of a world rank: agree ANDs, so a rank that erred clears its bit. */
const errorBit = (worldRank: number): number => 1 << Math.min(worldRank, 30);

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
      if (error instanceof CommTimeoutError)
        throw new ProtocolStop('unrecoverable', `the repair at step ${step} cannot finish: ${error.message}`);
      if (!isFailure(error)) throw error;
      revokeShrinkMs += now() - start;
      continue;
    }
    await current.free();
    current = shrunk;
    const shrunkAt = now();
    revokeShrinkMs += shrunkAt - start;
    options.shrunk?.();
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
  throw new ProtocolStop(
    'unrecoverable',
    `the communicator could not be repaired in ${options.maxAttempts} attempt${options.maxAttempts === 1 ? '' : 's'} at step ${step}`,
  );
}

/**
 * Repairs in a row of one step that lost no rank, after which its next failure stops the job (see
 * WorldRepair.stopWhereRanksDoNotMeet).
 */
export const losslessRepairsLimit = 5;

/** The repair of the world the Membership holds, with what it decides beyond the communicator. */
export class WorldRepair {
  /** The step of the last repair, and the repairs in a row there that lost no rank. */
  private lossless = { step: -1, repairs: 0 };

  constructor(
    private readonly config: Pick<ProtocolConfig, 'maxRetries' | 'commTimeoutMs' | 'pidsDir'>,
    private readonly world: Membership,
    private readonly vote: Vote,
    private readonly position: StepPosition,
    private readonly history: RunHistory,
    private readonly observer: ProtocolObserver,
    private readonly enter: (phase: Phase) => void,
  ) {}

  /** Revoke, shrink, agree; kills what was declared dead; stops the job if a rank erred. The world ranks lost. */
  async run(erred: boolean): Promise<number[]> {
    const step = this.position.step;
    this.stopWhereRanksDoNotMeet(step);
    await this.world.dropWorkers();
    const fixed = await repair(this.world.comm, step, {
      maxAttempts: this.config.maxRetries,
      deadlineMs: this.config.commTimeoutMs,
      erred,
      shrunk: () => this.enter('repair'),
    });
    this.world.replaceComm(fixed.comm);
    const killed = fixed.lost.length > 0 ? killDeclaredDead(this.config.pidsDir, fixed.lost) : [];
    // before this side writes anything: it may be the far side of a partition
    if (fixed.lost.length > 0) await this.holdMajority(fixed.lost, killed);
    this.observer.leader(this.world.isLeader);
    if (fixed.erred.length > 0) {
      throw new ProtocolStop('error', `rank(s) ${fixed.erred.join(', ')} stopped the job for an error`, null, fixed.erred);
    }
    this.observer.event({
      event: 'revoke+shrink',
      step,
      lost: fixed.lost,
      world: fixed.comm.size,
      duration_ms: fixed.revokeShrinkMs,
      attempts: fixed.attempts,
    });
    this.observer.event({ event: 'agree', step, duration_ms: fixed.agreeMs });
    const before = step === this.lossless.step ? this.lossless.repairs : 0;
    this.lossless = { step, repairs: fixed.lost.length > 0 ? 0 : before + 1 };
    if (fixed.lost.length > 0) {
      if (killed.length > 0)
        this.observer.log(`step ${step}: killed rank(s) ${killed.join(', ')}, declared dead while still running (hung)`);
      const working = this.world.liveWorkers.length;
      this.history.failures.push({ step, lost: fixed.lost, world: working });
      this.history.worldHistory.push({ step, world: working, lost: fixed.lost });
    }
    return fixed.lost;
  }

  /**
   * A step that fails again and again with every rank alive means that the ranks do not meet in
   * the same collective: each try would end at the comm deadline, repaired, for good. Once a step
   * has had losslessRepairsLimit repairs in a row that lost no rank, its next failure stops every
   * rank (each counted the same repairs), before a repair that one could finish and another not
   * (one that left it would be lost to the others, who would go on): ProtocolStop 'unrecoverable'.
   */
  private stopWhereRanksDoNotMeet(step: number): void {
    const { repairs } = this.lossless;
    if (step !== this.lossless.step || repairs < losslessRepairsLimit) return;
    throw new ProtocolStop(
      'unrecoverable',
      `step ${step} failed again after ${repairs} repairs in a row that lost no rank: the ranks do not meet in the same collective; stopping`,
    );
  }

  /**
   * A wait ran past its deadline: the live ranks found stopped on this host are killed, so that the
   * recovery meets their failure (a spawned rank's stop is seen by no detector).
   */
  killStopped(): void {
    const killed = killStopped(this.config.pidsDir, this.world.comm.worldRanks);
    if (killed.length > 0)
      this.observer.log(
        `step ${this.position.step}: killed rank(s) ${killed.join(', ')}, found stopped when a wait on them ran past its deadline`,
      );
  }

  /**
   * No split brain: the survivors of a repair go on only as a majority of the ranks that may still
   * be running, i.e. of the last agreed world less the lost ranks seen gone. A lost rank is seen gone
   * where a survivor shares its host (its pid file names that host and its process is no more); a
   * rank on a host without survivors may be alive behind a cut link, training on as a job of its
   * own. So losing a whole host is survivable by a majority, and the far side of a partition (or an
   * even split) stops without writing anything: ProtocolStop 'minority'.
   */
  private async holdMajority(lost: number[], killed: number[]): Promise<void> {
    if (killed.length > 0) await peersGone(this.config.pidsDir, killed, this.config.commTimeoutMs);
    // more survivors than ranks lost: a majority even if every lost rank still runs (the same on
    // every survivor, so no agreement is needed to say so)
    if (this.world.comm.size > lost.length) return;
    // agree ANDs: bit i stays set where no survivor saw lost[i] gone (beyond 30 lost ranks: not seen)
    const unseen = lost.slice(0, 30).reduce((flag, rank, i) => (goneFromHere(this.config.pidsDir, rank) ? flag & ~(1 << i) : flag), ~0);
    const comm = this.world.comm;
    const agreed = await comm.agree(unseen).catch((error: Error) => {
      if (!isFailure(error)) throw error;
      return ~0; // alike on every survivor: none seen gone; the next collective meets the new failure
    });
    const maybeRunning = lost.filter((_, i) => i >= 30 || (agreed & (1 << i)) !== 0).length;
    if (comm.size > maybeRunning) return;
    throw new ProtocolStop(
      'minority',
      `${comm.size} rank(s) left of the last agreed world of ${comm.size + lost.length}, ` +
        `and ${maybeRunning} lost on hosts where no survivor can see them gone (a cut link?): no majority, so this side stops and leaves the run to the other`,
    );
  }

  /**
   * This rank met an error of its own (bad data, a full disk): revoke, so that every peer leaves
   * whatever collective it is in, vote as they do, and join their repair saying so. Every survivor
   * then stops with the same decision (the ProtocolStop returned, which names the ranks that erred).
   */
  async reportError(): Promise<ProtocolStop> {
    try {
      await this.world.comm.revoke();
      // the peers vote on whatever collective the revoke interrupted: so does this rank, on the
      // same communicator, before the repair (an agreement left alone would wait for it)
      await this.vote.agree(0);
      await this.run(true);
    } catch (error) {
      if (error instanceof ProtocolStop) return error;
      throw error;
    }
    return new ProtocolStop('unrecoverable', 'the repair after an error did not see the error');
  }
}
