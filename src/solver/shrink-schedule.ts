// Which samples each rank takes in shrink mode (the paper's FT-SGD): every live rank takes the same
// per-rank micro-batch each step, from the shards it holds (ascending, each from where it was left),
// so the global batch shrinks with the world while adopted shards still get visited. Every rank
// simulates every rank's take, so all agree on each shard's position without talking. An epoch
// ends when every shard is used up.
import type { MicroBatches } from '../data/micro-batches';
import type { ShardMap } from '../data/shard-map';

export interface Piece {
  shard: number;
  rows: Int32Array;
}

export interface ShrinkStep {
  epoch: number;
  /** world rank -> its pieces this step */
  pieces: Map<number, Piece[]>;
  samples: number;
  /** shard positions once this step commits */
  cursors: number[];
}

export class ShrinkSchedule {
  epoch = 0;
  /** rows of each shard's epoch order already used */
  cursors: number[];

  constructor(
    private readonly plan: MicroBatches,
    readonly perRank: number,
  ) {
    this.cursors = new Array<number>(plan.layout.count).fill(0);
  }

  /** Epochs completed: the current one counts once every shard is used up. */
  get epochsDone(): number {
    return this.epoch + (this.usedUp() ? 1 : 0);
  }

  private usedUp(): boolean {
    return this.cursors.every((c, s) => c >= this.plan.layout.rows(s));
  }

  /** The next step under `map`; nothing changes until commit(). */
  peek(map: ShardMap): ShrinkStep {
    const epoch = this.epochsDone;
    const cursors = this.usedUp() ? this.cursors.map(() => 0) : [...this.cursors];
    const pieces = new Map<number, Piece[]>();
    let samples = 0;
    for (const rank of map.ranks) {
      let wanted = this.perRank;
      const taken: Piece[] = [];
      for (const shard of map.shardsOf(rank)) {
        if (wanted === 0) break;
        const order = this.plan.order(shard, epoch);
        const count = Math.min(wanted, order.length - cursors[shard]);
        if (count <= 0) continue;
        taken.push({ shard, rows: order.subarray(cursors[shard], cursors[shard] + count) });
        cursors[shard] += count;
        wanted -= count;
      }
      samples += this.perRank - wanted;
      pieces.set(rank, taken);
    }
    return { epoch, pieces, samples, cursors };
  }

  commit(step: ShrinkStep): void {
    this.epoch = step.epoch;
    this.cursors = step.cursors;
  }
}
