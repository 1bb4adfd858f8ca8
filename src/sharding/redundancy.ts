// Peers' copies of the sharded optimizer state, placed by placement.ts: every rank sends its
// fragment (the raw Float32 bytes of its chunk's state, or of the step's state input: no
// serialization) in one alltoallv to the ranks that keep a replica of it or a Reed-Solomon parity
// over its group; a parity holder encodes what it received with ISA-L. Two generations: the copies
// the last committed step left (committed) and those the current step is sending (pending),
// promoted only when the step's vote commits, so that a failure mid-send never leaves a copy of a
// state that no survivor agreed on.
import type { Communicator } from '../comm';
import { ecEncode } from '../checkpoint/erasure';
import { heldBy, type RedundancyPlan } from './placement';

/** What a fragment holds: a chunk's state (every slot), or the step's input to it (one slot). */
export type Item = 'state' | 'input';

/** One generation of what this rank keeps for others, per item. */
interface Generation {
  /** replicate: the replicas of `sources`' chunks, one fragment each, in the order of `sources` */
  replicas: Float32Array;
  /** ec: one fragment per parity row this rank holds, in the order of heldBy().parities */
  parities: Float32Array[];
}

export class PeerRedundancy {
  /** comm ranks this rank's fragment goes to, ascending */
  private readonly destinations: number[];
  /** alltoallv's counts for one fragment per destination and per source, in fragments */
  private readonly sendsTo: number[];
  private readonly receivesFrom: number[];
  /** comm ranks whose fragments this rank receives, ascending */
  readonly sources: number[];
  readonly parities: { group: number; row: number }[];
  private readonly committed: Record<Item, Generation>;
  private readonly pending: Record<Item, Generation>;
  private readonly received: Record<Item, Float32Array>;
  /** the send buffer when the fragment goes to more than one rank (alltoallv's is packed by destination) */
  private readonly copies: Record<Item, Float32Array>;
  private readonly exchanged = new Set<Item>();

  /** `lengths`: the floats of one fragment of each item (equal on every rank: padded to the longest chunk). */
  constructor(
    readonly plan: RedundancyPlan,
    private readonly comm: Communicator,
    readonly lengths: Record<Item, number>,
  ) {
    const n = comm.size;
    const me = comm.rank;
    const held = plan.kind === 'none' ? { replicas: [], parities: [] } : heldBy(plan, me);
    this.parities = held.parities;
    if (plan.kind === 'replicate') {
      this.destinations = plan.holders[me];
      this.sources = held.replicas;
    } else if (plan.kind === 'ec') {
      this.destinations = plan.groups.find((g) => g.data.includes(me))!.parity.filter((r) => r !== me);
      this.sources = [...new Set(held.parities.flatMap((p) => plan.groups[p.group].data))].sort((a, b) => a - b);
    } else {
      this.destinations = [];
      this.sources = [];
    }
    if (this.destinations.some((d) => d < 0 || d >= n)) throw new Error(`PeerRedundancy: a plan for more than ${n} ranks`);
    this.sendsTo = Array.from({ length: n }, (_, r) => (this.destinations.includes(r) ? 1 : 0));
    this.receivesFrom = Array.from({ length: n }, (_, r) => (this.sources.includes(r) ? 1 : 0));
    const generation = (f: number): Generation => ({
      replicas: new Float32Array(plan.kind === 'replicate' ? this.sources.length * f : 0),
      parities: this.parities.map(() => new Float32Array(f)),
    });
    this.committed = { state: generation(lengths.state), input: generation(lengths.input) };
    this.pending = { state: generation(lengths.state), input: generation(lengths.input) };
    const copies = this.destinations.length > 1 ? this.destinations.length : 0;
    this.copies = { state: new Float32Array(copies * lengths.state), input: new Float32Array(copies * lengths.input) };
    this.received = {
      state: new Float32Array(plan.kind === 'ec' ? this.sources.length * lengths.state : 0),
      input: new Float32Array(plan.kind === 'ec' ? this.sources.length * lengths.input : 0),
    };
  }

  /** Bytes this rank keeps for others (both generations and the receive buffers). */
  get bytes(): number {
    const generation = (g: Generation) => g.replicas.byteLength + g.parities.reduce((sum, p) => sum + p.byteLength, 0);
    return (['state', 'input'] as const).reduce(
      (sum, item) =>
        sum +
        generation(this.committed[item]) +
        generation(this.pending[item]) +
        this.received[item].byteLength +
        this.copies[item].byteLength,
      0,
    );
  }

  /** Sends this rank's fragment of `item` (lengths[item] floats) to its keepers and keeps what it receives, as pending. */
  async exchange(item: Item, fragment: Float32Array): Promise<void> {
    const f = this.lengths[item];
    if (fragment.length !== f)
      throw new RangeError(`PeerRedundancy.exchange: a ${item} fragment of ${fragment.length} floats, expected ${f}`);
    let send = fragment;
    if (this.destinations.length > 1) {
      send = this.copies[item];
      for (let i = 0; i < this.destinations.length; ++i) send.set(fragment, i * f);
    }
    const into = this.plan.kind === 'replicate' ? this.pending[item].replicas : this.received[item];
    await this.comm.alltoallv(
      send,
      this.sendsTo.map((c) => c * f),
      into,
      this.receivesFrom.map((c) => c * f),
    );
    if (this.plan.kind === 'ec') {
      const plan = this.plan;
      this.parities.forEach(({ group, row }, i) => {
        const data = plan.groups[group].data.map((c) => fragmentOf(this.received[item], this.sources.indexOf(c), f));
        ecEncode(data.length, plan.parity, data, [this.pending[item].parities[i]], [row]);
      });
    }
    this.exchanged.add(item);
  }

  /** The step committed: what it sent becomes what survives a failure. */
  commit(): void {
    for (const item of this.exchanged) [this.committed[item], this.pending[item]] = [this.pending[item], this.committed[item]];
    this.exchanged.clear();
  }

  /** The step failed: what it sent is dropped. */
  discard(): void {
    this.exchanged.clear();
  }

  /** replicate: the committed replica of chunk c kept here. */
  replica(item: Item, c: number): Float32Array {
    const i = this.sources.indexOf(c);
    if (this.plan.kind !== 'replicate' || i < 0) throw new Error(`no replica of chunk ${c} is kept on rank ${this.comm.rank}`);
    return fragmentOf(this.committed[item].replicas, i, this.lengths[item]);
  }

  /** ec: the committed parity row `row` of group `group` kept here. */
  parity(item: Item, group: number, row: number): Float32Array {
    const i = this.parities.findIndex((p) => p.group === group && p.row === row);
    if (i < 0) throw new Error(`no parity ${row} of group ${group} is kept on rank ${this.comm.rank}`);
    return this.committed[item].parities[i];
  }
}

function fragmentOf(buffer: Float32Array, i: number, f: number): Float32Array {
  return buffer.subarray(i * f, (i + 1) * f);
}
