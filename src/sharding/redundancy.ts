// Peers' copies of the sharded optimizer state, placed by placement.ts. Every rank sends its
// fragment (the raw Float32 bytes of its chunk's state, or of the step's state input: no
// serialization) in one alltoallv to the ranks that keep it, the same buffer to each (no copies).
//  - A copy (a replica, or under ec the parity of a group of one chunk, which a repetition code
//    makes the chunk itself) is the owner's state, current: its holder receives the whole state
//    once (seed(), when the layout is made) and from then on only each step's input, which it
//    replays into the copy when the step's vote commits (the same bits the owner's update gives).
//    A step that fails leaves the copy as it was.
//  - A parity of a group of several chunks is encoded with ISA-L from what the members send: their
//    state at the step's start and their step's input. Parities cannot be replayed (GF(2^8)
//    arithmetic is not float arithmetic), so two generations: the parities the last committed step
//    left (committed) and those the current step is sending (pending), promoted only when the
//    step's vote commits, so that a failure mid-send never leaves a parity of a state that no
//    survivor agreed on.
import { receiveBuffer, type Communicator } from '../comm';
import { ecEncode } from '../checkpoint/erasure';
import { heldBy, type RedundancyPlan } from './placement';

/** What a fragment holds: a chunk's state (every slot), or the step's input to it (one slot). */
export type Item = 'state' | 'input';

/** How a holder advances its copy of chunk c's state by one step from that step's input. */
export type Replay = (chunk: number, state: Float32Array, input: Float32Array) => void;

/** Whether chunk c is coded with others' (ec, a group of several chunks) rather than kept as copies. */
export function isCoded(plan: RedundancyPlan, c: number): boolean {
  return plan.kind === 'ec' && plan.groups.find((g) => g.data.includes(c))!.data.length > 1;
}

/** What a store held at a verified step (PeerRedundancy.snapshot). */
export interface RedundancySnapshot {
  store: PeerRedundancy;
  stateArea: Float32Array;
  inputs: Float32Array;
  committed: Record<Item, Float32Array[]>;
}

export interface FragmentLengths {
  /** floats of one state fragment (equal on every rank: padded to the longest chunk) */
  state: number;
  /** floats of chunk c's input fragment: a coded chunk's are padded to the longest (the code needs equal lengths), a copied one's are as they are */
  input: (chunk: number) => number;
}

export class PeerRedundancy {
  /** comm ranks this rank's fragment goes to, ascending */
  private readonly destinations: number[];
  /** whether this rank's state goes to its keepers each step (it is coded with others'), not only when seeded */
  private readonly sendsStateEachStep: boolean;
  /** comm ranks whose fragments this rank receives, ascending: those it keeps copies of, and those it encodes */
  readonly sources: number[];
  private readonly copied: number[];
  private readonly coded: number[];
  /** the parity rows of groups of several chunks this rank holds */
  private readonly parities: { group: number; row: number }[];
  /** [the copies of `copied`' chunks, current as of the last commit | the state fragments of `coded` as received, for the encoder], one state fragment each */
  private readonly stateArea: Float32Array;
  /** every source's input of the step under way, packed in `sources`' order */
  private readonly inputs: Float32Array;
  /** per item, one fragment per row of `parities`, committed and pending */
  private committed: Record<Item, Float32Array[]>;
  private pending: Record<Item, Float32Array[]>;
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
    if (plan.kind === 'replicate') {
      this.destinations = plan.holders[me];
      this.sendsStateEachStep = false;
      this.copied = held.replicas;
      this.coded = [];
      this.parities = [];
    } else if (plan.kind === 'ec') {
      const mine = plan.groups.find((g) => g.data.includes(me))!;
      this.destinations = mine.parity.filter((r) => r !== me);
      this.sendsStateEachStep = isCoded(plan, me);
      const single = (p: { group: number }) => plan.groups[p.group].data.length === 1;
      this.copied = held.parities.filter(single).map((p) => plan.groups[p.group].data[0]);
      this.parities = held.parities.filter((p) => !single(p));
      this.coded = [...new Set(this.parities.flatMap((p) => plan.groups[p.group].data))];
    } else {
      [this.destinations, this.sendsStateEachStep, this.copied, this.coded, this.parities] = [[], false, [], [], []];
    }
    this.copied.sort((a, b) => a - b);
    this.coded.sort((a, b) => a - b);
    this.sources = [...this.copied, ...this.coded].sort((a, b) => a - b);
    if (this.destinations.some((d) => d < 0 || d >= n)) throw new Error(`PeerRedundancy: a plan for more than ${n} ranks`);
    this.stateArea = receiveBuffer(this.sources.length * lengths.state);
    this.inputs = receiveBuffer(this.sources.reduce((sum, c) => sum + lengths.input(c), 0));
    const generation = (f: number): Float32Array[] => this.parities.map(() => new Float32Array(f));
    // a code's inputs all have one length (padded to the longest chunk)
    const codedInput = this.coded.length > 0 ? lengths.input(this.coded[0]) : 0;
    this.committed = { state: generation(lengths.state), input: generation(codedInput) };
    this.pending = { state: generation(lengths.state), input: generation(codedInput) };
  }

  /** Whether the parities need each step's state at its start (groups of several chunks exist). */
  get needsStateEachStep(): boolean {
    return this.plan.kind === 'ec' && this.plan.groups.some((g) => g.data.length > 1);
  }

  /** Bytes this rank keeps for others: copies, inputs, both generations of parities and their receive buffers. */
  get bytes(): number {
    const total = (list: Float32Array[]) => list.reduce((sum, a) => sum + a.byteLength, 0);
    const items = ['state', 'input'] as const;
    return (
      this.stateArea.byteLength +
      this.inputs.byteLength +
      items.reduce((sum, item) => sum + total(this.committed[item]) + total(this.pending[item]), 0)
    );
  }

  /** The layout is made: this rank's whole state goes to every keeper of it, copies included. */
  seed(state: Float32Array): Promise<void> {
    return this.send('state', state, this.destinations.length > 0, this.sources);
  }

  /**
   * The step's fragment of `item`: its input goes to every keeper, its state at the step's start
   * only to the parities that code it with others' (copies replay the input instead). What it
   * brings counts once the step commits.
   */
  exchange(item: Item, fragment: Float32Array): Promise<void> {
    if (item === 'input') return this.send('input', fragment, true, this.sources);
    return this.send('state', fragment, this.sendsStateEachStep, this.coded);
  }

  private async send(item: Item, fragment: Float32Array, sends: boolean, from: readonly number[]): Promise<void> {
    const me = this.comm.rank;
    const f = this.fragmentLength(item, me);
    if (fragment.length !== f)
      throw new RangeError(`PeerRedundancy.exchange: a ${item} fragment of ${fragment.length} floats, expected ${f}`);
    const n = this.comm.size;
    const sendCounts = Array.from({ length: n }, (_, r) => (sends && this.destinations.includes(r) ? f : 0));
    const recvCounts = Array.from({ length: n }, (_, r) => (from.includes(r) ? this.fragmentLength(item, r) : 0));
    const into = item === 'state' ? this.stateArea : this.inputs;
    const recvDispls = Array.from({ length: n }, (_, r) => (from.includes(r) ? this.offset(item, r) : 0));
    await this.comm.alltoallv(fragment, sendCounts, into, recvCounts, new Array<number>(n).fill(0), recvDispls);
    const plan = this.plan;
    if (plan.kind === 'ec') {
      this.parities.forEach(({ group, row }, i) => {
        const data = plan.groups[group].data.map((c) => this.fragment(item, c));
        ecEncode(data.length, plan.parity, data, [this.pending[item][i]], [row]);
      });
    }
    this.exchanged.add(item);
  }

  /**
   * The step committed: the copies replay the step's inputs; the parities it sent become what
   * survives a failure.
   */
  commit(): void {
    if (this.exchanged.has('input')) for (const c of this.copied) this.replay(c, this.replica(c), this.fragment('input', c));
    for (const item of this.exchanged) [this.committed[item], this.pending[item]] = [this.pending[item], this.committed[item]];
    this.exchanged.clear();
  }

  /** The step failed: what it sent is dropped. */
  discard(): void {
    this.exchanged.clear();
  }

  /** A copy of what a rollback needs back (the copies of others' state, the committed parities), for restore(). */
  snapshot(): RedundancySnapshot {
    return {
      store: this,
      stateArea: this.stateArea.slice(),
      inputs: this.inputs.slice(),
      committed: { state: this.committed.state.map((p) => p.slice()), input: this.committed.input.map((p) => p.slice()) },
    };
  }

  /** Puts a snapshot() of this store back. */
  restore(snapshot: RedundancySnapshot): void {
    if (snapshot.store !== this) throw new Error('PeerRedundancy.restore: a snapshot of another store');
    this.stateArea.set(snapshot.stateArea);
    this.inputs.set(snapshot.inputs);
    for (const item of ['state', 'input'] as const) snapshot.committed[item].forEach((p, i) => this.committed[item][i].set(p));
    this.exchanged.clear();
  }

  /** Whether this rank keeps a copy of chunk c's state (a replica, or a group of one chunk's parity). */
  keepsCopyOf(c: number): boolean {
    return this.copied.includes(c);
  }

  /** The copy of chunk c's state kept here, as of the last commit. */
  replica(c: number): Float32Array {
    if (!this.copied.includes(c)) throw new Error(`no copy of chunk ${c} is kept on rank ${this.comm.rank}`);
    return this.fragment('state', c);
  }

  /** ec: the committed parity row `row` of group `group` (of several chunks) kept here. */
  parity(item: Item, group: number, row: number): Float32Array {
    const i = this.parities.findIndex((p) => p.group === group && p.row === row);
    if (i < 0) throw new Error(`no parity ${row} of group ${group} is kept on rank ${this.comm.rank}`);
    return this.committed[item][i];
  }

  /** The floats of `item`'s fragment from chunk c. */
  private fragmentLength(item: Item, c: number): number {
    return item === 'state' ? this.lengths.state : this.lengths.input(c);
  }

  /** Where source c's fragment of `item` lies: states with the copies first, inputs in `sources`' order. */
  private offset(item: Item, c: number): number {
    if (item === 'state') {
      const i = this.copied.includes(c) ? this.copied.indexOf(c) : this.copied.length + this.coded.indexOf(c);
      return i * this.lengths.state;
    }
    return this.sources.slice(0, this.sources.indexOf(c)).reduce((sum, s) => sum + this.lengths.input(s), 0);
  }

  private fragment(item: Item, c: number): Float32Array {
    const at = this.offset(item, c);
    return (item === 'state' ? this.stateArea : this.inputs).subarray(at, at + this.fragmentLength(item, c));
  }
}
