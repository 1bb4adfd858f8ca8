// The join, part of a recovery that grew the world: on every live rank, the leader (a rank that
// holds the run's state) sends the ranks joining the run where it stands (the step, the world, the
// failures so far, the readback count, the newest checkpoint, the sum's form, the data position,
// the sharded state's layout) and then the state at the step's start, in place, with the last
// verified state where the run checks for corruption (a rollback takes every rank back to it); the
// joining ranks take it all up. A spawned rank starts its life here: if its join fails it leaves, as a failure
// the others recover from without it.
import type { CheckpointMeta } from '../checkpoint/checkpoint';
import type { Phase } from '../liveness/drills';
import { killStopped } from '../liveness/hangs';
import type { JoinMeta } from '../sharding/sharded-state';
import type { Checkpointing } from './checkpointing';
import type { Failure, LoopPosition, ProtocolObserver, RunHistory, StateSource } from './contracts';
import type { Membership, WorldJoinFields } from './membership';
import type { HeldShards } from './shards';
import type { SumAndState } from './sum-and-state';
import type { VerifiedState } from './verification';
import type { Vote } from './vote';

/** What the ranks already in the run tell the ones joining it. */
interface JoinMessage extends WorldJoinFields {
  step: number;
  /** the step is retried after a failure (not a join at a step's end) */
  retrying: boolean;
  joiners: number[];
  failures: Failure[];
  worldHistory: CheckpointMeta['world_history'];
  bytesReadBack: number;
  lastCheckpoint: string | null;
  sumInBuckets: boolean;
  position: LoopPosition;
  sharded?: JoinMeta;
  /** the step of the last verified state (-1: the run does not check), and the sharded state's layout then */
  verifiedStep: number;
  verifiedSharded?: JoinMeta;
}

/** The Manager's parts a join reads and, on a joining rank, fills. */
export interface JoinParts {
  world: Membership;
  vote: Vote;
  shards: HeldShards;
  checkpoints: Checkpointing;
  sumState: SumAndState;
  /** the last verified state, when the run checks for corruption (--verify-every) */
  verified?: VerifiedState;
  history: RunHistory;
  observer: ProtocolObserver;
  enter(phase: Phase): void;
  /** the run's pid files (a joining rank that leaves kills the other joiners it finds stopped) */
  pidsDir: string;
  /** working ranks held a state other than the leader's at the join of `step` (with `verified` only) */
  diverged(step: number): void;
}

const now = (): number => performance.now();

export class Join {
  /** a spawned rank that has not yet received the run's state */
  private waiting: boolean;

  constructor(
    joined: boolean,
    private readonly parts: JoinParts,
  ) {
    this.waiting = joined;
  }

  /** This rank was spawned and has not joined yet. */
  get awaiting(): boolean {
    return this.waiting;
  }

  /**
   * The join of `joiners` at `step`, retried after a failure or not (on a joining rank: whatever it
   * holds; `takeStep` gives it the run's). The joiners as the leader named them, or null when a
   * failure interrupted it.
   */
  async run(
    joiners: number[],
    step: number,
    retrying: boolean,
    source: StateSource,
    takeStep: (step: number) => void,
  ): Promise<number[] | null> {
    const { world, vote, shards, checkpoints, sumState, verified, history, observer } = this.parts;
    const started = now();
    const sent: JoinMessage = {
      step,
      retrying,
      joiners,
      ...world.joinFields(),
      failures: history.failures,
      worldHistory: history.worldHistory,
      bytesReadBack: shards.bytesReadBack,
      lastCheckpoint: checkpoints.lastCheckpoint,
      sumInBuckets: sumState.inBuckets,
      position: this.waiting ? { epoch: 0 } : source.position(),
      sharded: sumState.joinMeta(),
      verifiedStep: verified?.step ?? -1,
      verifiedSharded: sumState.shardedState?.verifiedMeta(),
    };
    const buffers = [...source.joinBuffers(), ...(verified ? verified.joinBuffers(() => source.state()) : [])];
    // a rank that took part in the run holds its state: a working rank, and a spare, fed every step
    // and checked with them (a spawned rank that has not joined holds none)
    const holdsState = !this.waiting;
    // a joining rank's drill point names the step it was spawned at, its own until it joins
    let named: number[] = [];
    const transfer = await world.transferJoin(vote, sent, buffers, holdsState, (message) => {
      named = message.joiners;
      this.parts.enter('join');
    });
    if (!transfer) {
      if (this.waiting) this.leave('the join failed', named);
      return null;
    }
    const { message, bytes, diverged } = transfer;
    source.stateWritten();
    if (this.waiting) {
      this.waiting = false;
      takeStep(message.step);
      if (message.retrying) vote.joinRecoveryAt(message.step);
      world.takeJoinFields(message);
      history.failures.push(...message.failures);
      history.worldHistory.push(...message.worldHistory);
      shards.bytesReadBack = message.bytesReadBack;
      checkpoints.lastCheckpoint = message.lastCheckpoint;
      sumState.inBuckets = message.sumInBuckets;
      source.joinAt(message.position);
      if (verified) verified.step = message.verifiedStep;
    }
    // a spare's map missed the working ranks' rebalances
    else world.takeMap(message.owners);
    // a joiner that waits as a spare holds no sharded state, as the launch's spares
    const working = world.workingJoiners(message.joiners);
    if (working.includes(world.worldRank)) {
      sumState.makeShardedState(source.initialState.bind(source), message.sharded);
      if (message.verifiedSharded) sumState.shardedState?.joinVerified(message.verifiedSharded);
    }
    const spares = message.joiners.filter((r) => !working.includes(r));
    observer.event({
      event: 'join',
      step: message.step,
      ranks: message.joiners,
      ...(spares.length > 0 ? { spares } : {}),
      bytes,
      duration_ms: now() - started,
    });
    if (diverged && verified) this.parts.diverged(message.step);
    return message.joiners;
  }

  /**
   * A spawned rank that could not join: it leaves as a failure (the others recover without it).
   * The other `joiners` it finds stopped (hung) go first: the runtime ends a spawn whose process
   * died by waking the others of it, and one woken after the survivors declared it dead aborts
   * with a stack trace on stderr, before their kill reaches it.
   */
  private leave(why: string, joiners: number[] = []): never {
    const me = this.parts.world.worldRank;
    const killed = killStopped(
      this.parts.pidsDir,
      joiners.filter((r) => r !== me),
    );
    const hung = killed.length > 0 ? `; killed rank(s) ${killed.join(', ')}, found stopped` : '';
    this.parts.observer.log(`rank ${me}: ${why}${hung}; leaving`);
    process.kill(process.pid, 'SIGKILL');
    throw new Error('unreachable');
  }
}
