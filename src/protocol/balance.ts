// Slow ranks and the shard map (--rebalance auto, exact mode). In synchronous data parallelism the
// slowest rank sets the step's pace; in exact mode any rank may compute any shard with the same
// bits, so moving shards off a slow rank changes the speed and never the result.
//
// Every step each working rank's compute time per shard reaches every working rank inside the
// step's sum (the sum's sideband: shard s's vector carries the time s took its owner at the
// previous step in element s, zeros elsewhere, so the sum holds every shard's time exactly; no
// collective is added). Shard 0's also carries, in element S, how long the previous step took on
// its owner, commit to commit: the step time every rank judges changes by. From the same numbers every rank draws the same decisions without
// talking, applied at the step's end:
// - A rank's speed is the median, over the last K steps (--slow-steps), of its mean time per shard.
//   A rank is slow when that is at least (1 + margin) times the others' median (--slow-margin).
// - Rebalance: while a rank is slow, or once the shard counts are uneven (a slow rank that became
//   fast again), the counts are re-planned so that each rank's expected time, its count times its
//   time per shard, is as even as whole shards allow (each rank keeps at least one shard, so its
//   speed stays measured); the map changes when that plan shortens the step by more than 5%, and at
//   most once every K steps.
// - Judge each change: the step time over the K steps after a change (from the second on: the
//   first reads the moved shards) is set against the K before it. A change that made it longer
//   is undone (where ranks share cores a shard's time depends on the load, and a slow rank's part
//   of the sum cannot move, so the plan can be wrong), and the next change waits twice as long as
//   the last did: 2K, 4K, ... steps.
// - Evict: a rank F times slower than the others' median (--evict-slower) at each of 4K steps in a
//   row leaves as failed, when a spare or a respawn can take its place.
// The first K steps after the start or a recovery are not measured (warm-up, a retried step's
// partial work), and a recovery starts the measurements afresh (a rank that joined has none).
import { median } from '../base/median';
import type { ShardMap } from '../data/shard-map';

export interface BalanceSettings {
  /** a rank is slow when its time per shard is at least (1 + slowMargin) times the others' median */
  slowMargin: number;
  /** the steps a rank's speed is the median of, and the fewest steps between two changes of the map */
  slowSteps: number;
  /** a rank this many times slower than the others at each of 4 x slowSteps steps is evicted where it can be replaced (0: never) */
  evictSlower: number;
}

/** What a step's end does about slow ranks. */
export type BalanceDecision =
  | {
      kind: 'rebalance';
      /**
       * the shard map from the next step on: the plan's counts, moving the fewest shards
       * (ShardMap.withCounts); an undoing's, the map before the change as it was (each moved shard
       * back to the rank it came from, which still holds its data)
       */
      map: ShardMap;
      /** each rank's measured time per shard (ms), the medians the plan used */
      msPerShard: Map<number, number>;
      /** an undoing: the step time (ms, median) before the change undone, and since */
      undone?: { beforeMs: number; sinceMs: number };
    }
  | {
      kind: 'evict';
      rank: number;
      /** how many times slower than the others' median it was at the last step */
      slower: number;
      /** the steps in a row it was */
      steps: number;
    };

/** The smallest improvement of the expected step time that is worth a change of the map. */
const worthMoving = 0.05;

export class Balancer {
  /** each rank's mean time per shard at the last K steps it was measured, oldest first */
  private readonly windows = new Map<number, number[]>();
  /** how many steps in a row each rank was evictSlower times slower than the others */
  private readonly slowStreaks = new Map<number, number>();
  private stepsSinceChange = 0;
  /** steps seen since the start or the last reset: the first slowSteps are warm-up */
  private stepsSeen = 0;
  /** the step time (ms) at the last K steps since the last change's first */
  private stepMs: number[] = [];
  /** a change being judged: the map before it and the step time then */
  private trial?: { previous: ShardMap; beforeMs: number };
  /** the fewest steps before the next change: K, doubled by each change undone in a row */
  private holdOff: number;

  constructor(private readonly settings: BalanceSettings) {
    this.holdOff = settings.slowSteps;
  }

  /** A recovery: the measurements start again. */
  reset(): void {
    this.windows.clear();
    this.slowStreaks.clear();
    this.stepsSinceChange = 0;
    this.stepsSeen = 0;
    this.stepMs = [];
    this.trial = undefined;
    this.holdOff = this.settings.slowSteps;
  }

  /**
   * A committed step's times per shard (`times[s]`: ms shard s took its owner at the step before,
   * 0: unknown; `times[S]`: the step before's time) under `map`; `canReplace`: a lost rank's place
   * would be taken. What to do at the step's end, if anything.
   */
  observe(times: ArrayLike<number>, map: ShardMap, canReplace: boolean): BalanceDecision | undefined {
    const ranks = map.ranks;
    if (ranks.length < 2) return undefined;
    const { slowMargin, slowSteps, evictSlower } = this.settings;
    this.stepsSinceChange += 1;
    if (++this.stepsSeen <= slowSteps) return undefined;
    const now = new Map<number, number>();
    for (const r of ranks) {
      const known = map
        .shardsOf(r)
        .map((s) => times[s])
        .filter((ms) => ms > 0);
      if (known.length === 0) continue;
      const mean = known.reduce((a, b) => a + b, 0) / known.length;
      now.set(r, mean);
      const window = [...(this.windows.get(r) ?? []), mean].slice(-slowSteps);
      this.windows.set(r, window);
    }
    // the step before a change, and the first after it (which reads the moved shards), do not show what it did
    if (times[map.shardCount] > 0 && this.stepsSinceChange > 2) this.stepMs = [...this.stepMs, times[map.shardCount]].slice(-slowSteps);
    if (evictSlower > 0) {
      for (const r of ranks) {
        const others = othersMedian(now, r);
        const slower = now.has(r) && others !== undefined ? now.get(r)! / others : 0;
        this.slowStreaks.set(r, slower >= evictSlower ? (this.slowStreaks.get(r) ?? 0) + 1 : 0);
      }
      const steps = 4 * slowSteps;
      const evicted = ranks.find((r) => this.slowStreaks.get(r)! >= steps);
      if (evicted !== undefined && canReplace) {
        this.reset();
        return { kind: 'evict', rank: evicted, slower: now.get(evicted)! / othersMedian(now, evicted)!, steps };
      }
    }
    if (this.trial) return this.judge(map, this.trial);
    if (this.stepsSinceChange < this.holdOff || ranks.some((r) => (this.windows.get(r)?.length ?? 0) < slowSteps)) return undefined;
    const speeds = this.speeds(ranks);
    const current = map.counts();
    const planned = planCounts(speeds, map.shardCount);
    if (ranks.every((r) => planned.get(r) === current.get(r))) return undefined;
    const slow = ranks.some((r) => speeds.get(r)! >= (1 + slowMargin) * othersMedian(speeds, r)!);
    const counts = [...current.values()];
    const uneven = Math.max(...counts) - Math.min(...counts) > 1;
    if (!slow && !uneven) return undefined;
    if (makespan(planned, speeds) > (1 - worthMoving) * makespan(current, speeds)) return undefined;
    if (this.stepMs.length === slowSteps) this.trial = { previous: map, beforeMs: median(this.stepMs) };
    this.changed();
    return { kind: 'rebalance', map: map.withCounts(planned), msPerShard: speeds };
  }

  /** Once K steps since a change are known: undone if the step is longer than before it. */
  private judge(map: ShardMap, trial: { previous: ShardMap; beforeMs: number }): BalanceDecision | undefined {
    const { slowSteps } = this.settings;
    if (this.stepMs.length < slowSteps) return undefined;
    const sinceMs = median(this.stepMs);
    this.trial = undefined;
    // kept unless the step got longer: a measured gain smaller than the plan's is noise as often as not
    if (sinceMs <= trial.beforeMs) {
      this.holdOff = slowSteps;
      return undefined;
    }
    this.holdOff *= 2;
    this.changed();
    return { kind: 'rebalance', map: trial.previous, msPerShard: this.speeds(map.ranks), undone: { beforeMs: trial.beforeMs, sinceMs } };
  }

  private speeds(ranks: number[]): Map<number, number> {
    return new Map(ranks.map((r) => [r, median(this.windows.get(r) ?? [0])]));
  }

  /** The map changes: the next is measured afresh from here. */
  private changed(): void {
    this.stepsSinceChange = 0;
    this.stepMs = [];
  }
}

/**
 * Whole shards over ranks of the given times per shard, so that the longest expected time (count x
 * time) is as short as it can be: one shard each, then each next shard to the rank that would end
 * soonest with it (ties: the lowest rank). Optimal for equal shards.
 */
export function planCounts(msPerShard: ReadonlyMap<number, number>, shards: number): Map<number, number> {
  const ranks = [...msPerShard.keys()].sort((a, b) => a - b);
  if (ranks.length > shards) throw new RangeError(`planCounts: ${ranks.length} ranks cannot each hold one of ${shards} shards`);
  const counts = new Map(ranks.map((r) => [r, 1]));
  for (let given = ranks.length; given < shards; ++given) {
    let best = ranks[0];
    for (const r of ranks) if ((counts.get(r)! + 1) * msPerShard.get(r)! < (counts.get(best)! + 1) * msPerShard.get(best)!) best = r;
    counts.set(best, counts.get(best)! + 1);
  }
  return counts;
}

/** The longest expected compute time of a step: the largest count x time per shard. */
export function makespan(counts: ReadonlyMap<number, number>, msPerShard: ReadonlyMap<number, number>): number {
  return Math.max(...[...counts].map(([r, n]) => n * msPerShard.get(r)!));
}

/** The median of every rank's value but r's (undefined: no other rank has one). */
function othersMedian(values: ReadonlyMap<number, number>, r: number): number | undefined {
  const others = [...values].filter(([rank]) => rank !== r).map(([, v]) => v);
  return others.length === 0 ? undefined : median(others);
}

/** This rank's measured compute time of each shard it computed, and its step time, sent at the next step in the sum's sideband. */
export class ShardTimes {
  private readonly last = new Map<number, number>();
  /** [shard 0's time, ..., shard S-1's, the step's time] */
  private readonly values: Float32Array;
  private stepEndedAt?: number;
  private lastStepMs = 0;

  constructor(private readonly shards: number) {
    this.values = new Float32Array(ShardTimes.sidebandLength(shards));
  }

  /** The sideband's length: a time per shard, and the step's. */
  static sidebandLength(shards: number): number {
    return shards + 1;
  }

  /** A step was committed here at `ms` (performance.now()): the time since the one before is the step's. */
  stepEnded(ms: number): void {
    this.lastStepMs = this.stepEndedAt === undefined ? 0 : ms - this.stepEndedAt;
    this.stepEndedAt = ms;
  }

  /** Shard s took `ms` to compute here. */
  record(shard: number, ms: number): void {
    this.last.set(shard, ms);
  }

  /**
   * Shard s's sideband: the time it took here when last computed in element s (0: never); shard
   * 0's also the last step's time in element S; zeros elsewhere. Valid until the next call.
   */
  sideband(shard: number): Float32Array {
    this.values.fill(0);
    this.values[shard] = this.last.get(shard) ?? 0;
    if (shard === 0) this.values[this.shards] = this.lastStepMs;
    return this.values;
  }
}
