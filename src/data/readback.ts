// Lost shards read back in the order training needs them. A LazyShard's record batches load on
// demand: ready(rows) reads at once exactly the batches those rows live in (blocking reads: the
// step can only wait for them, and the threadpool's hand-offs cost more than the reads on busy
// cores); once started, a background pass reads the other batches in file order, one read of at
// most 1 MiB at a time, while training goes on; what a step asks for never waits for it, whichever
// of the readback's shards it is in. Each record batch is read once (every read covers exactly the
// batches it loads, each checked against the manifest's checksum), so a readback takes from disk
// at most its shards' bytes, and exactly them once done. A read that fails (a batch that fails its checksum) is kept and thrown by the next
// ready(), so the step that needs the data stops the job through the normal error path. Huge pages
// are asked for a shard only once it is all loaded: asked before, each first write into a 2 MiB
// region waits for the kernel to compact memory for a huge page, on the recovery's path (at 4
// ranks on 2 cores: the retried step's rows took 13 ms to read back, against 3 without). A shard
// goes into memory mapped beforehand where the caller kept some (shards.ts; its huge pages
// asked then, off the recovery's path): the pages of new memory are faulted in as the batches are
// decoded, most of a readback's time on some machines.
import type { ShardLayout } from './shard-layout';
import type { ShardData, Split } from './split';

/** The largest background read, so that the pass keeps little memory in flight. */
const backgroundReadBytes = 1 << 20;

const ABSENT = 0;
const READING = 1;
const LOADED = 2;

/** A shard being read back: its rows may be used once ready(rows) has resolved. */
export class LazyShard implements ShardData {
  readonly rows: number;
  readonly sampleSize: number;
  readonly features: Uint8Array | Float32Array;
  readonly divisor: number;
  readonly labels: Int32Array;

  constructor(
    readonly shard: number,
    data: ShardData,
    private readonly readback: Readback,
  ) {
    ({ rows: this.rows, sampleSize: this.sampleSize, features: this.features, divisor: this.divisor, labels: this.labels } = data);
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

interface Run {
  shard: LazyShard;
  first: number;
  end: number;
}

export class Readback {
  /** bytes this readback has taken from disk (each read's, as the split counted it) */
  bytesRead = 0;
  readonly shards: LazyShard[];
  /** per record batch of the split: ABSENT, READING or LOADED (batches of other shards stay ABSENT) */
  private readonly state: Uint8Array;
  private readonly owners = new Map<number, LazyShard>();
  /** the batches of this readback's shards in file order, and how far the background pass got */
  private readonly order: number[] = [];
  private cursor = 0;
  private readonly waiters: Waiter[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private background = false;
  private passRunning = false;
  private failure?: Error;

  /** Nothing is read until ready() or startBackground() asks. `kept`: memory mapped beforehand for a shard of `bytes`, if any is left. */
  constructor(
    private readonly split: Split,
    private readonly layout: ShardLayout,
    shards: readonly number[],
    kept: (bytes: number) => ArrayBuffer | undefined = () => undefined,
  ) {
    split.checkLayout(layout);
    this.state = new Uint8Array(layout.batchRows.length);
    this.shards = [...shards]
      .sort((a, b) => a - b)
      .map((s) => {
        const rows = layout.rows(s);
        const shard = new LazyShard(s, split.emptyShard(s, rows, 'once-filled', kept(split.featureBytes(rows))), this);
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

  /**
   * Resolves once `rows` of `shard` are in memory. Their batches not yet asked for are read at
   * once (adjacent ones in one read); a batch the background pass is reading is awaited.
   */
  ready(shard: number, rows: Int32Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const batches = [...new Set(Array.from(rows, (row) => this.layout.batchOf(shard, row)))]
      .sort((a, b) => a - b)
      .filter((b) => this.state[b] !== LOADED);
    if (batches.length === 0) return Promise.resolve();
    const waiting = new Promise<void>((resolve, reject) => this.waiters.push({ batches, resolve, reject }));
    const wanted = new Set(batches);
    for (const b of batches)
      if (this.state[b] === ABSENT)
        void this.read(
          this.claim(b, (next) => wanted.has(next)),
          true,
        );
    return waiting;
  }

  /** Reads the batches nobody has asked for yet, in file order, one read at a time, until done or stopped. */
  startBackground(): void {
    this.background = true;
    if (!this.passRunning) void this.backgroundPass();
  }

  /** No more background reads; resolves once no read is in flight (before the file is closed). */
  async stop(): Promise<void> {
    this.background = false;
    while (this.inFlight.size > 0) await Promise.all(this.inFlight);
  }

  private async backgroundPass(): Promise<void> {
    this.passRunning = true;
    for (;;) {
      while (this.cursor < this.order.length && this.state[this.order[this.cursor]] !== ABSENT) ++this.cursor;
      if (!this.background || this.failure || this.cursor === this.order.length) break;
      const first = this.order[this.cursor];
      await this.read(this.claim(first, (next) => this.split.batchBytes(first, next + 1) <= backgroundReadBytes));
    }
    this.passRunning = false;
  }

  /** Marks [first, end) as being read, `end` extended over the shard's next absent batches while `take` allows. */
  private claim(first: number, take: (next: number) => boolean): Run {
    const shard = this.owners.get(first)!;
    const last = this.layout.batches(shard.shard).end;
    let end = first + 1;
    while (end < last && this.state[end] === ABSENT && take(end)) ++end;
    this.state.fill(READING, first, end);
    return { shard, first, end };
  }

  /** Reads a claimed run, blocking if `now`; never rejects (a failure is kept, and every waiter gets it). */
  private read(run: Run, now = false): Promise<void> {
    const done = this.split
      .loadInto(run.first, run.end, run.shard, this.layout.batchRow(run.shard.shard, run.first), now)
      .then(
        (bytes) => {
          this.bytesRead += bytes;
          this.state.fill(LOADED, run.first, run.end);
          const { first, end } = this.layout.batches(run.shard.shard);
          if (this.state.subarray(first, end).every((s) => s === LOADED)) this.split.adviseFilled(run.shard);
          for (let i = this.waiters.length - 1; i >= 0; --i) {
            if (this.waiters[i].batches.every((b) => this.state[b] === LOADED)) this.waiters.splice(i, 1)[0].resolve();
          }
        },
        (error: Error) => {
          this.failure ??= error;
          for (const waiter of this.waiters.splice(0)) waiter.reject(this.failure);
        },
      )
      .finally(() => this.inFlight.delete(done));
    this.inFlight.add(done);
    return done;
  }
}
