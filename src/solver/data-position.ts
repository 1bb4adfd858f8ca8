// Where a loop stands in its data, the same for the trainer and the custom loop: exact mode's
// micro-batch plan (every step's rows of every shard, fixed by the seed) or, in shrink and none
// modes, the shrink schedule's per-shard cursors, which move with what the survivors took. It
// answers what the protocol asks (the rows a retried step reads, the position a checkpoint or a
// joining rank takes) and when the run is done.
import type { LoopPosition } from '../protocol/contracts';
import type { ShardMap } from '../data/shard-map';
import type { MicroBatches } from '../data/micro-batches';
import { ShrinkSchedule } from './shrink-schedule';

export class DataPosition {
  /** shrink and none modes: the schedule of each rank's pieces */
  readonly shrink?: ShrinkSchedule;

  constructor(
    readonly plan: MicroBatches,
    private readonly length: { steps?: number; epochs?: number },
    /** shrink and none modes: the samples each rank takes per step (exact mode: undefined) */
    rankBatch: number | undefined,
  ) {
    if (rankBatch !== undefined) this.shrink = new ShrinkSchedule(plan, rankBatch);
  }

  /** The run's length in steps (with epochs and a shrinking world, the plan's estimate). */
  get totalSteps(): number {
    return this.length.steps ?? (this.length.epochs ?? 1) * this.plan.stepsPerEpoch;
  }

  /** Whether the run is done once `step` steps are committed. */
  done(step: number): boolean {
    if (this.length.steps !== undefined) return step >= this.length.steps;
    if (this.shrink) return this.shrink.epochsDone >= (this.length.epochs ?? 1);
    return step >= this.totalSteps;
  }

  /** The epoch of `step`. */
  epoch(step: number): number {
    return this.shrink ? this.shrink.epoch : Math.floor(step / this.plan.stepsPerEpoch);
  }

  /** The rows (within each shard) that `step` reads of `shards` under `map`: shrink mode's pieces depend on the map. */
  stepRows(step: number, map: ShardMap, shards: readonly number[]): Map<number, Int32Array> {
    const rows = new Map<number, Int32Array>();
    if (this.shrink) {
      const wanted = new Set(shards);
      for (const piece of [...this.shrink.peek(map).pieces.values()].flat()) if (wanted.has(piece.shard)) rows.set(piece.shard, piece.rows);
    } else {
      const t = step % this.plan.stepsPerEpoch;
      for (const shard of shards) rows.set(shard, this.plan.rows(shard, Math.floor(step / this.plan.stepsPerEpoch), t));
    }
    return rows;
  }

  /** The position a checkpoint records and a joining rank receives, at `step`. */
  position(step: number): LoopPosition {
    return {
      epoch: this.epoch(step),
      shrink: this.shrink ? { epoch: this.shrink.epoch, cursors: this.shrink.cursors } : undefined,
    };
  }

  /** Takes up a checkpoint's or a join's position (shrink mode's epoch and cursors). */
  takeUp(position: LoopPosition): void {
    if (this.shrink && position.shrink) {
      this.shrink.commit({ epoch: position.shrink.epoch, cursors: position.shrink.cursors, pieces: new Map(), samples: 0 });
    }
  }
}
