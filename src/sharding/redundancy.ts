// Peers' copies of the sharded optimizer state, placed by placement.ts. Every rank sends its
// fragment (the raw Float32 bytes of its chunk's state, or of the step's state input: no
// serialization) in one alltoallv to the ranks that keep it, the same buffer to each (no copies).
//  - replicate: a holder keeps the chunk's state itself, current: it receives the whole state once
//    (when the layout is made) and from then on only each step's input, which it replays into its
//    replica when the step's vote commits (the same bits the owner's update gives). A step that
//    fails leaves the replica as it was.
//  - ec: a parity holder encodes what the group's members send with ISA-L. Parities cannot be
//    replayed (GF(2^8) arithmetic is not float arithmetic), so two generations: the parities the
//    last committed step left (committed) and those the current step is sending (pending),
//    promoted only when the step's vote commits, so that a failure mid-send never leaves a parity
//    of a state that no survivor agreed on.
import { receiveBuffer, type Communicator } from '../comm';
import { ecEncode } from '../checkpoint/erasure';
import { heldBy, type RedundancyPlan } from './placement';

/** What a fragment holds: a chunk's state (every slot), or the step's input to it (one slot). */
export type Item = 'state' | 'input';

/** How a replica holder advances chunk c's replica by one step from that step's input. */
export type Replay = (chunk: number, state: Float32Array, input: Float32Array) => void;

export interface FragmentLengths {
  /** floats of one state fragment (equal on every rank: padded to the longest chunk) */
  state: number;
  /** floats of chunk c's input fragment: ec pads them all to the longest (the code needs equal lengths), replicate sends them as they are */
  input: (chunk: number) => number;
}

export class PeerRedundancy {
  /** comm ranks this rank's fragment goes to, ascending */
  private readonly destinations: number[];
  /** comm ranks whose fragments this rank receives, ascending */
  readonly sources: number[];
  readonly parities: { group: number; row: number }[];
  /** replicate: the replicas of `sources`' chunks, current as of the last commit, one state fragment each, packed in `sources`' order */
  private readonly replicas: Float32Array;
  /** replicate: the inputs of the step under way, likewise */
  private readonly inputs: Float32Array;
  /** ec: per item, one fragment per parity row this rank holds (in the order of `parities`), committed and pending */
  private committed: Record<Item, Float32Array[]>;
  private pending: Record<Item, Float32Array[]>;
  /** ec: per item, the fragments of `sources` as received, for the encoder */
  private readonly received: Record<Item, Float32Array>;
  private readonly exchanged = new Set<Item>();

  constructor(
    readonly plan: RedundancyPlan,
    private readonly comm: Communicator,
    private readonly lengths: FragmentLengths,
    private readonly replay: Replay,
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
    const ec = plan.kind === 'ec';
    const replicate = plan.kind === 'replicate';
    this.replicas = receiveBuffer(replicate ? this.sources.length * lengths.state : 0);
    this.inputs = receiveBuffer(replicate ? this.sources.reduce((n, c) => n + lengths.input(c), 0) : 0);
    const generation = (f: number): Float32Array[] => (ec ? this.parities.map(() => new Float32Array(f)) : []);
    const inputLength = lengths.input(0);
    this.committed = { state: generation(lengths.state), input: generation(inputLength) };
    this.pending = { state: generation(lengths.state), input: generation(inputLength) };
    this.received = {
      state: receiveBuffer(ec ? this.sources.length * lengths.state : 0),
      input: receiveBuffer(ec ? this.sources.length * inputLength : 0),
    };
  }

  /** Bytes this rank keeps for others: replicas and inputs, or both generations of parities and the receive buffers. */
  get bytes(): number {
    const total = (list: Float32Array[]) => list.reduce((sum, a) => sum + a.byteLength, 0);
    const items = ['state', 'input'] as const;
    return (
      this.replicas.byteLength +
      this.inputs.byteLength +
      items.reduce((sum, item) => sum + total(this.committed[item]) + total(this.pending[item]) + this.received[item].byteLength, 0)
    );
  }

  /** The floats of `item`'s fragment from chunk c. */
  private fragmentLength(item: Item, c: number): number {
    return item === 'state' ? this.lengths.state : this.lengths.input(c);
  }

  /**
   * Sends this rank's fragment of `item` to its keepers and takes in what it receives: a state
   * into the replicas (only while the layout is made, before any step), an input or an ec
   * fragment as pending until commit().
   */
  async exchange(item: Item, fragment: Float32Array): Promise<void> {
    const me = this.comm.rank;
    const f = this.fragmentLength(item, me);
    if (fragment.length !== f)
      throw new RangeError(`PeerRedundancy.exchange: a ${item} fragment of ${fragment.length} floats, expected ${f}`);
    const n = this.comm.size;
    const sendCounts = Array.from({ length: n }, (_, r) => (this.destinations.includes(r) ? f : 0));
    const recvCounts = Array.from({ length: n }, (_, r) => (this.sources.includes(r) ? this.fragmentLength(item, r) : 0));
    // packed in `sources`' order: straight into the replicas or inputs, or ec's receive buffer
    const into = this.plan.kind === 'replicate' ? (item === 'state' ? this.replicas : this.inputs) : this.received[item];
    const sendDispls = new Array<number>(n).fill(0); // one buffer to every keeper
    const recvDispls: number[] = [];
    recvCounts.reduce((at, count) => (recvDispls.push(at), at + count), 0);
    await this.comm.alltoallv(fragment, sendCounts, into, recvCounts, sendDispls, recvDispls);
    if (this.plan.kind === 'ec') {
      const plan = this.plan;
      this.parities.forEach(({ group, row }, i) => {
        const data = plan.groups[group].data.map((c) => fragmentOf(this.received[item], this.sources.indexOf(c), f));
        ecEncode(data.length, plan.parity, data, [this.pending[item][i]], [row]);
      });
    }
    this.exchanged.add(item);
  }

  /**
   * The step committed: replicate replays the step's inputs into the replicas; ec promotes what the
   * step sent to what survives a failure.
   */
  commit(): void {
    if (this.plan.kind === 'replicate' && this.exchanged.has('input')) {
      this.sources.forEach((c, i) => this.replay(c, this.replica(c), this.inputOf(i)));
    }
    if (this.plan.kind === 'ec') {
      for (const item of this.exchanged) [this.committed[item], this.pending[item]] = [this.pending[item], this.committed[item]];
    }
    this.exchanged.clear();
  }

  /** The step failed: what it sent is dropped. */
  discard(): void {
    this.exchanged.clear();
  }

  /** replicate: the replica of chunk c kept here, as of the last commit. */
  replica(c: number): Float32Array {
    const i = this.sources.indexOf(c);
    if (this.plan.kind !== 'replicate' || i < 0) throw new Error(`no replica of chunk ${c} is kept on rank ${this.comm.rank}`);
    return fragmentOf(this.replicas, i, this.lengths.state);
  }

  /** replicate: the pending input of the i-th source. */
  private inputOf(i: number): Float32Array {
    const from = this.sources.slice(0, i).reduce((n, c) => n + this.lengths.input(c), 0);
    return this.inputs.subarray(from, from + this.lengths.input(this.sources[i]));
  }

  /** ec: the committed parity row `row` of group `group` kept here. */
  parity(item: Item, group: number, row: number): Float32Array {
    const i = this.parities.findIndex((p) => p.group === group && p.row === row);
    if (this.plan.kind !== 'ec' || i < 0) throw new Error(`no parity ${row} of group ${group} is kept on rank ${this.comm.rank}`);
    return this.committed[item][i];
  }
}

function fragmentOf(buffer: Float32Array, i: number, f: number): Float32Array {
  return buffer.subarray(i * f, (i + 1) * f);
}
