// Lost shards read back in the order training needs them. A LazyShard's record batches load on
// demand: ready(rows) awaits exactly the batches those rows live in, and those go ahead of
// everything else; once started, a background pass reads the other batches in file order while
// training goes on. All the shards of one readback share one queue, so a rank that takes over
// several shards serves the step's needs first, whichever shard they are in. Each record batch is
// read once (every read covers exactly the batches it loads, each checked against the manifest's
// checksum), so a readback takes from disk at most its shards' bytes, and exactly them once done.
// A read that fails (a batch that fails its checksum) is kept and thrown by the next ready(), so
// the step that needs the data stops the job through the normal error path.
import type { ShardLayout } from './shard-layout';
import type { ShardData, Split } from './split';

/** The largest background read: a step that needs a batch waits at most for this much. */
const backgroundReadBytes = 1 << 20;

const ABSENT = 0;
const READING = 1;
const LOADED = 2;

/** A shard being read back: its rows may be used once ready(rows) has resolved. */
export class LazyShard implements ShardData {
  readonly rows: number;
  readonly sampleSize: number;
  readonly images: Uint8Array;
  readonly labels: Int32Array;

  constructor(readonly shard: number, data: ShardData, private readonly readback: Readback) {
    ({ rows: this.rows, sampleSize: this.sampleSize, images: this.images, labels: this.labels } = data);
  }

  /** Resolves once `rows` (within this shard) are in memory; rejects with the readback's read failure. */
  ready(rows: Int32Array): Promise<void> {
    return this.readback.ready(this.shard, rows);
  }
}

interface Waiter {
  batches: number[];
  resolve(): void;
  reject(error: Error): void;
}

export class Readback {
  /** bytes this readback has taken from disk (the split's counter, read by read) */
  bytesRead = 0;
  readonly shards: LazyShard[];
  /** per record batch of the split: ABSENT, READING or LOADED (batches of other shards stay ABSENT) */
  private readonly state: Uint8Array;
  private readonly owners = new Map<number, LazyShard>();
  /** the batches of this readback's shards in file order, and how far the background pass got */
  private readonly order: number[] = [];
  private cursor = 0;
  /** batches a step waits for, in the order asked */
  private readonly demand = new Set<number>();
  private readonly waiters: Waiter[] = [];
  private background = false;
  private reading = false;
  private inFlight: Promise<void> = Promise.resolve();
  private failure?: Error;

  /** Nothing is read until ready() or startBackground() asks. */
  constructor(private readonly split: Split, private readonly layout: ShardLayout, shards: readonly number[]) {
    split.checkLayout(layout);
    this.state = new Uint8Array(layout.batchRows.length);
    this.shards = [...shards].sort((a, b) => a - b).map((s) => {
      const shard = new LazyShard(s, split.emptyShard(s, layout.rows(s)), this);
      const { first, end } = layout.batches(s);
      for (let b = first; b < end; ++b) {
        this.owners.set(b, shard);
        this.order.push(b);
      }
      return shard;
    });
  }

  /** Every batch is in memory. */
  get complete(): boolean {
    return this.order.every((b) => this.state[b] === LOADED);
  }

  /** Resolves once `rows` of `shard` are in memory, reading their batches ahead of the background pass. */
  ready(shard: number, rows: Int32Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const batches = [...new Set(Array.from(rows, (row) => this.layout.batchOf(shard, row)))].filter((b) => this.state[b] !== LOADED);
    if (batches.length === 0) return Promise.resolve();
    for (const b of batches.sort((a, b) => a - b)) if (this.state[b] === ABSENT) this.demand.add(b);
    const waiting = new Promise<void>((resolve, reject) => this.waiters.push({ batches, resolve, reject }));
    this.pump();
    return waiting;
  }

  /** Reads the batches nobody has asked for yet, in file order, behind whatever a step asks for. */
  startBackground(): void {
    this.background = true;
    this.pump();
  }

  /** No more background reads; resolves once no read is in flight (before the file is closed). */
  async stop(): Promise<void> {
    this.background = false;
    await this.inFlight;
  }

  private pump(): void {
    if (this.reading || this.failure) return;
    this.reading = true;
    this.inFlight = this.readRuns();
  }

  /** One read at a time, while there is something to read; never rejects (a failure is kept). */
  private async readRuns(): Promise<void> {
    for (;;) {
      // checked and cleared in the same tick, so a ready() in between always finds a pump to join or starts one
      const run = this.nextRun();
      if (!run) {
        this.reading = false;
        return;
      }
      try {
        this.bytesRead += await this.split.loadInto(run.first, run.end, run.shard, this.layout.batchRow(run.shard.shard, run.first));
      } catch (error) {
        this.failure = error as Error;
        this.reading = false;
        for (const waiter of this.waiters.splice(0)) waiter.reject(this.failure);
        return;
      }
      this.state.fill(LOADED, run.first, run.end);
      for (let i = this.waiters.length - 1; i >= 0; --i) {
        if (this.waiters[i].batches.every((b) => this.state[b] === LOADED)) this.waiters.splice(i, 1)[0].resolve();
      }
    }
  }

  /** The next run of adjacent batches of one shard: what a step asked for first, else the background pass's next piece. */
  private nextRun(): { shard: LazyShard; first: number; end: number } | undefined {
    for (const b of this.demand) {
      this.demand.delete(b);
      if (this.state[b] === ABSENT) return this.claim(b, (next) => this.demand.delete(next));
    }
    if (!this.background) return undefined;
    while (this.cursor < this.order.length && this.state[this.order[this.cursor]] !== ABSENT) ++this.cursor;
    if (this.cursor === this.order.length) return undefined;
    const first = this.order[this.cursor];
    return this.claim(first, (next) => this.split.batchBytes(first, next + 1) <= backgroundReadBytes);
  }

  /** Marks [first, end) as being read, `end` extended over the shard's next absent batches while `take` allows. */
  private claim(first: number, take: (next: number) => boolean): { shard: LazyShard; first: number; end: number } {
    const shard = this.owners.get(first)!;
    const last = this.layout.batches(shard.shard).end;
    let end = first + 1;
    while (end < last && this.state[end] === ABSENT && take(end)) ++end;
    this.state.fill(READING, first, end);
    return { shard, first, end };
  }
}
