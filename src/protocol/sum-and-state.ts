// What the step's collective works on, kept in step with the world: exact mode's shard-ordered sum
// (sharding/shard-sum.ts) over the working ranks and the shard map, and the sharded optimizer state
// (sharding/sharded-state.ts). Both are made at the start and remade for each world a recovery forms; the sharded
// state rebuilds the lost ranks' chunks from the survivors' memory, voted. The sums' buffers come
// from one SumMemory, which holds, from the first step's end in a world on, what the sum a
// recovery from it builds will take.
import type { Phase } from '../liveness/drills';
import { ShardedState, type JoinMeta } from '../sharding/sharded-state';
import type { ProtocolConfig, ProtocolObserver } from './contracts';
import type { Membership } from './membership';
import { ddpBuckets, oneBucket, ShardSum } from '../sharding/shard-sum';
import { SumMemory } from '../sharding/sum-memory';
import { ShardTimes } from './balance';
import type { Vote } from './vote';

const now = (): number => performance.now();

export class SumAndState {
  private sum?: ShardSum;
  /**
   * Whether the sum goes in DDP's buckets (else one exchange): one choice for the world, since
   * every rank must make the same calls (a rank that chose otherwise hung its peers' exchange).
   * DDP's where every rank can overlap; a spawned rank takes the world's from the join.
   */
  inBuckets: boolean;
  private sharded?: ShardedState;
  private readonly memory = new SumMemory();
  /** the world changed since the memory was last made ready for a recovery from it */
  private reserveDue = true;

  constructor(
    private readonly config: Pick<ProtocolConfig, 'onFailure' | 'sumLength' | 'add' | 'overlap' | 'sharded' | 'rebalance' | 'shards'>,
    private readonly world: Membership,
    private readonly observer: ProtocolObserver,
  ) {
    this.inBuckets = config.overlap;
  }

  /** The exact mode's shard-ordered sum over the current communicator and map. */
  get shardSum(): ShardSum {
    if (!this.sum) throw new Error('the shard-ordered sum exists in exact mode only');
    return this.sum;
  }

  /** The sharded optimizer state (--optimizer-state sharded), on a working rank. */
  get shardedState(): ShardedState | undefined {
    return this.sharded;
  }

  /** The sum for the world as it stands; `step`: the step whose vectors a survivor carries over. */
  rebuildSum(step: number): void {
    const { onFailure, sumLength, add } = this.config;
    const workers = this.world.workerComm;
    const previous = this.sum;
    this.sum =
      onFailure === 'exact' && workers
        ? new ShardSum(
            workers,
            this.world.shardMap,
            sumLength,
            add,
            this.inBuckets ? ddpBuckets : oneBucket,
            this.sideband(),
            this.memory,
            // a survivor's vectors for the step being retried stay valid: the parameters are untouched
            previous && { sum: previous, step },
          )
        : undefined;
    this.reserveDue = true;
  }

  /**
   * Once per world, at a step's end (beside training, not on a recovery's path): the memory gets,
   * its pages mapped, the blocks that the sum after the loss of one rank takes on this rank, given
   * as many shards as a rank holds; on a spare, those of a working rank in a lost one's place. With
   * a spare waiting, a working rank keeps its world size and shards through a loss, and what the
   * replaced sum gives back serves the new one: nothing is kept ready.
   */
  readyForRecovery(): void {
    if (!this.reserveDue || this.config.onFailure !== 'exact') return;
    this.reserveDue = false;
    const map = this.world.shardMap;
    const most = Math.max(...map.counts().values());
    const { working, size, recoveryShare } = this.world;
    const blocks = (worldSize: number): number[] =>
      ShardSum.blocks(this.config.sumLength, this.sideband(), worldSize, map.shardCount, most, !working);
    this.memory.reserve(recoveryShare === 'place' ? blocks(size) : recoveryShare === 'share' ? blocks(size - 1) : []);
  }

  /** With --rebalance auto, each shard's compute time rides in the sum's sideband (balance.ts). */
  private sideband(): number {
    return this.config.rebalance ? ShardTimes.sidebandLength(this.config.shards) : 0;
  }

  /** Sharded state on this rank: at the start over the working ranks, or on a rank that joins, from `joining`. */
  makeShardedState(initial: (slot: number, from: number, to: number, out: Float32Array) => void, joining?: JoinMeta): void {
    if (!this.config.sharded || this.sharded) return;
    if (!joining && !this.world.working) return;
    this.sharded = new ShardedState(
      { ...this.config.sharded, initial, log: (message) => this.observer.log(message) },
      joining ? undefined : this.world.workerComm!,
      joining,
    );
  }

  /** A recovery begins: the sharded state forgets the step's uncommitted update. */
  rollback(): void {
    this.sharded?.rollback();
  }

  /**
   * Sharded state: rebuilds the lost ranks' chunks from the survivors' memory, redistributes the
   * state to the new world (joining ranks included) and rebuilds its redundancy, voted; false when
   * a failure interrupted it. Nothing to do without sharded state.
   */
  async rebuildState(step: number, vote: Vote, enter: (phase: Phase) => void): Promise<boolean> {
    if (!this.config.sharded) return true;
    // a spare holds none of it, and still votes
    const sharded = this.sharded;
    const started = now();
    enter('rebuild');
    if (
      !(await vote.succeedsEverywhere(
        'rebuild',
        this.world.onWorkers(() => sharded!.rebuild(this.world.workerComm!, step)),
      ))
    )
      return false;
    if (!sharded) return true;
    sharded.adopt(step);
    this.observer.event({
      event: 'redundancy-rebuild',
      step,
      world: this.world.size,
      duration_ms: now() - started,
      state_bytes: sharded.bytes.state,
    });
    return true;
  }

  /** What a joining rank learns of the sharded state. */
  joinMeta(): JoinMeta | undefined {
    return this.sharded?.meta();
  }
}
