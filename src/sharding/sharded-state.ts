// Sharded optimizer state (ZeRO-1) kept alive in peers' memory. Comm rank c owns the optimizer
// state of parameter chunk c, the chunk of the shard-ordered sum it adds: right after the
// reduce-scatter it works out c's update (out of place, into the send buffer and a scratch state:
// nothing changes before the vote), and the updated chunks are allgathered into the parameters,
// with the step's loss riding along.
// Redundancy (placement.ts, redundancy.ts) costs each step the step's state input (SGD: g + wd p;
// AdamW: g, the summed gradient itself), sent before the vote:
//  - replicate: the holders replay it into their replicas at the commit, so that a replica is the
//    owner's state as of the last commit, the same bits;
//  - ec: parities cannot be replayed, so the state at the step's start also goes out, while the
//    step computes (queued at its start on the comm thread). At every vote the parity holders hold
//    the state at step b and the input of step b, b = the last committed step: a chunk lost later
//    is rebuilt as replay(decoded state_b, decoded input_b). A group of one chunk (a world too small
//    for K, or the last group) has a repetition code: its parity holders keep the chunk itself and
//    replay its input, as replicas do.
// Either way a rank that dies after the vote takes nothing that exists only with it.
// Recovery: lost chunks are rebuilt (from a replica, or decoded from parities gathered to one
// survivor of the group), the whole state is redistributed to the new world's chunks, and the
// redundancy is rebuilt for the new world before training resumes. Nothing is replaced until the
// recovery's vote: a failure during it starts again from the same old layout. Ranks that join (a
// spare, a respawned rank) hold no chunk of the old layout: they only receive in the redistribution.
import { receiveBuffer, type Communicator } from '../comm';
import { ecDecode } from '../checkpoint/erasure';
import { parameterChunks } from '../base/chunks';
import { planRedundancy, unrecoverableChunks, type RedundancyPlan, type RedundancySpec } from './placement';
import { crc64 } from '../base/checksum';
import { isCoded, PeerRedundancy, type Item, type RedundancySnapshot } from './redundancy';
import type { ShardSum } from './shard-sum';
import { ProtocolStop } from '../liveness/stop';

/** What sharded state needs of an optimizer (solver/optimizer.ts). */
export interface StateOptimizer {
  readonly slots: readonly string[];
  /** whether stateInput() is the gradient itself (nothing to keep of it) */
  readonly inputIsGradient: boolean;
  /** `from`: where params[0] lies in the flat parameters; `out`: where the updated parameters and state go */
  update(
    params: Float32Array,
    grads: Float32Array,
    state: readonly Float32Array[],
    lr: number,
    step: number,
    from: number,
    out: { params: Float32Array; state: readonly Float32Array[] },
  ): void;
  /** into `scratch`, or `grads` itself where the input is the gradient */
  stateInput(params: Float32Array, grads: Float32Array, scratch: Float32Array): Float32Array;
  replay(state: readonly Float32Array[], input: Float32Array): void;
}

export interface ShardedStateConfig {
  optimizer: StateOptimizer;
  /** the parameters (P) and one more float for the loss: ParameterStore.dataWithTail */
  params: Float32Array;
  redundancy: RedundancySpec;
  /** the state at the run's start: slot `slot` of elements [from, to) into `out` (zeros, or a checkpoint's) */
  initial(slot: number, from: number, to: number, out: Float32Array): void;
  log(message: string): void;
}

/** The chunks of one communicator: chunk c is owned by comm rank c, elements [from(c), to(c)) of the P parameters. */
class Layout {
  private readonly bounds: number[];
  readonly longest: number;

  constructor(
    readonly worldRanks: readonly number[],
    readonly P: number,
  ) {
    this.bounds = parameterChunks(P, worldRanks.length);
    this.longest = Math.max(...worldRanks.map((_, c) => this.to(c) - this.from(c)));
  }

  from(c: number): number {
    return this.bounds[c];
  }

  to(c: number): number {
    return this.bounds[c + 1];
  }

  /** The old comm ranks (indices into worldRanks) that `comm` no longer has. */
  lostIn(comm: Communicator): number[] {
    return this.worldRanks.map((_, i) => i).filter((i) => !comm.worldRanks.includes(this.worldRanks[i]));
  }
}

/** Where a rank that joins picks up: the layout it joins and what the redundancy stands for (ShardedState.meta). */
export interface JoinMeta {
  /** the ids of the old layout's chunk owners, in chunk order */
  owners: number[];
  pristine: boolean;
  baseStep: number;
  baseHasInput: boolean;
}

/**
 * The parts of a step's update(), timed: the reduce-scatter (with the wait for the slowest rank's
 * gradient), this chunk's update (state input, copies, the optimizer), the allgather of the
 * parameters, the input's send to the peers, and the wait for the state's send begun at the step's start.
 */
export const updatePhases = ['reduce', 'update', 'allgather', 'input', 'state_wait'] as const;
export type UpdatePhase = (typeof updatePhases)[number];

/**
 * The state at the last verified step (a check for silent data corruption passed there), for a
 * rollback: this rank's chunk and what it kept for peers, with the layout and what the redundancy
 * stood for; a rank that joined since holds only the layout's meta (it held no chunk then).
 */
interface VerifiedChunks {
  layout: Layout;
  plan: RedundancyPlan;
  pristine: boolean;
  baseStep: number;
  baseHasInput: boolean;
  held?: { comm: Communicator; store: RedundancySnapshot; live: Float32Array; base: Float32Array; baseInput: Float32Array; coded: boolean };
}

/** What a recovery builds, put in place once its vote commits. */
interface Next {
  layout: Layout;
  comm: Communicator;
  plan: RedundancyPlan;
  store: PeerRedundancy;
  live: Float32Array;
}

export class ShardedState {
  private layout: Layout;
  /** undefined on a rank that is joining, until its first rebuild is adopted */
  private comm?: Communicator;
  private plan!: RedundancyPlan;
  private store!: PeerRedundancy;
  /** this rank's chunk: slot k at [k L, (k+1) L), L = its length; padded to `slots × longest` floats, the fragment size */
  private live!: Float32Array;
  /** the state the current step's update goes into, swapped in at the commit */
  private scratch!: Float32Array;
  /** whether this rank's chunk is coded with others' (ec, a group of several chunks), not kept as copies */
  private coded = false;
  /** coded: this rank's chunk at step baseStep, its data fragment for the parities that peers hold (else empty) */
  private base!: Float32Array;
  /** this rank's state input of the current step where it is coded or not the gradient itself (redundancy only), and a coded one's of step baseStep */
  private input!: Float32Array;
  private baseInput!: Float32Array;
  /** no step has committed yet: any rank can refill any chunk from the initial state */
  private pristine = true;
  /** the step whose state at its start the committed redundancy holds */
  private baseStep = -1;
  /** ec: whether the committed redundancy also holds step baseStep's input (it then stands for step baseStep + 1) */
  private baseHasInput = false;
  private stateSending?: Promise<void>;
  /** the updated chunk (and the loss and the sum's sideband, on the last rank): the allgather's contribution */
  private send!: Float32Array;
  /** with a sideband in the sum: what the allgather receives, [parameters | loss | sideband] (the sideband has no place in the parameters' buffer) */
  private gathered?: Float32Array;
  /** the parameters at the step's start, while the allgather overwrites them before the vote */
  private readonly previous: Float32Array;
  private paramsTouched = false;
  private next?: Next;
  /** ms per phase of the current step's update, and summed over the committed steps */
  private readonly stepPhases = Object.fromEntries(updatePhases.map((p) => [p, 0])) as Record<UpdatePhase, number>;
  private readonly phaseTotals = Object.fromEntries(updatePhases.map((p) => [p, 0])) as Record<UpdatePhase, number>;
  private committedSteps = 0;
  private verified?: VerifiedChunks;

  /** The state at the run's start over `comm`; or, given `joining`, an empty one that takes part in the next rebuild. */
  constructor(
    private readonly config: ShardedStateConfig,
    comm: Communicator | undefined,
    joining?: JoinMeta,
  ) {
    const P = config.params.length - 1;
    this.previous = new Float32Array(P + 1);
    if (joining) {
      this.layout = new Layout(joining.owners, P);
      this.plan = planRedundancy(config.redundancy, joining.owners.length).plan;
      [this.pristine, this.baseStep, this.baseHasInput] = [joining.pristine, joining.baseStep, joining.baseHasInput];
      return;
    }
    this.comm = comm!;
    this.layout = new Layout(this.comm.worldRanks, P);
    const live = this.allocate(this.layout);
    this.fillInitial(this.layout, this.comm.rank, live);
    const redundancy = this.redundancyFor(this.comm, this.layout);
    // every rank can make any chunk's initial state: the replicas start from it without a send
    for (const c of redundancy.store.sources)
      if (redundancy.store.keepsCopyOf(c)) this.fillInitial(this.layout, c, redundancy.store.replica(c));
    this.install({ layout: this.layout, comm: this.comm, ...redundancy, live });
  }

  /** What a rank joining at this point needs to take part in the rebuild. */
  meta(): JoinMeta {
    return { owners: [...this.layout.worldRanks], pristine: this.pristine, baseStep: this.baseStep, baseHasInput: this.baseHasInput };
  }

  private get slots(): number {
    return this.config.optimizer.slots.length;
  }

  /** Bytes of optimizer state this rank holds (its chunk), and of what it keeps for redundancy (copies, parities, their buffers). */
  get bytes(): { state: number; redundancy: number } {
    const L = this.length(this.layout, this.comm!.rank);
    return { state: 4 * this.slots * L, redundancy: this.store.bytes + 4 * (this.base.length + this.input.length + this.baseInput.length) };
  }

  /** The checkpoint's view: this rank's slots over elements [from, to); none on a rank that holds no chunk yet (joining). */
  held(): { from: number; to: number; slots: Float32Array[] } {
    if (!this.comm) return { from: 0, to: 0, slots: Array.from({ length: this.slots }, () => new Float32Array(0)) };
    const c = this.comm.rank;
    return { from: this.layout.from(c), to: this.layout.to(c), slots: this.slotViews(this.live, this.length(this.layout, c)) };
  }

  /** The parameters at the current step's start (the update's allgather overwrites them before the vote). */
  stepStartParams(): Float32Array {
    return (this.paramsTouched ? this.previous : this.config.params).subarray(0, this.layout.P);
  }

  /** Runs `run` (a check's recomputation of a gradient) with the step's start parameters in place, then puts the updated ones back. */
  async atStepStart<T>(run: () => Promise<T>): Promise<T> {
    if (!this.paramsTouched) return run();
    const updated = this.config.params.slice();
    this.config.params.set(this.previous);
    try {
      return await run();
    } finally {
      this.config.params.set(updated);
    }
  }

  /**
   * CRC-64 of each chunk's state this rank holds as of the step's start, by chunk (its owner's comm
   * rank): its own (`own`) and the copies it keeps for peers. Parities are not checked.
   */
  chunkDigests(): Map<number, { digest: string; own: boolean }> {
    const c = this.comm!.rank;
    const digests = new Map([[c, { digest: crc64(this.live.subarray(0, this.slots * this.length(this.layout, c))), own: true }]]);
    for (const d of this.store.sources) {
      if (this.store.keepsCopyOf(d))
        digests.set(d, { digest: crc64(this.store.replica(d).subarray(0, this.slots * this.length(this.layout, d))), own: false });
    }
    return digests;
  }

  /** How many chunks the layout has: chunkDigests() names them 0 to this less 1. */
  get chunkCount(): number {
    return this.layout.worldRanks.length;
  }

  /** chunkDigests(), or none on a rank that holds no chunk of the layout (it joined since it was made). */
  heldChunkDigests(): Map<number, { digest: string; own: boolean }> {
    return this.comm ? this.chunkDigests() : new Map();
  }

  /** Whether the state at the run's start may still be needed: before the first commit, or while the last verified state is from then. */
  get needsInitial(): boolean {
    return this.pristine || this.verified?.pristine === true;
  }

  /** A check passed at the current step (its vote held, its update not yet committed): the state at its start is the one to roll back to. */
  keepVerified(): void {
    const { layout, plan, pristine, baseStep, baseHasInput } = this;
    const held = {
      comm: this.comm!,
      store: this.store.snapshot(),
      live: this.live.slice(),
      base: this.base.slice(),
      baseInput: this.baseInput.slice(),
      coded: this.coded,
    };
    this.verified = { layout, plan, pristine, baseStep, baseHasInput, held };
  }

  /** What a rank joining now needs of the last verified state (the layout's meta: it held no chunk of it). */
  verifiedMeta(): JoinMeta | undefined {
    const v = this.verified;
    return v && { owners: [...v.layout.worldRanks], pristine: v.pristine, baseStep: v.baseStep, baseHasInput: v.baseHasInput };
  }

  /** A joining rank takes the last verified state's meta (verifiedMeta) as its own to roll back to. */
  joinVerified(meta: JoinMeta): void {
    const layout = new Layout(meta.owners, this.layout.P);
    const plan = planRedundancy(this.config.redundancy, meta.owners.length).plan;
    this.verified = { layout, plan, pristine: meta.pristine, baseStep: meta.baseStep, baseHasInput: meta.baseHasInput };
  }

  /**
   * A rollback to the last verified state: its layout, this rank's chunk and its copies and parities
   * as they were (a rank that joined since: none), and the parameters' place untouched; the
   * recovery that follows rebuilds the chunks of the ranks gone since, for the world as it stands.
   */
  restoreVerified(): void {
    const v = this.verified;
    if (!v) throw new Error('ShardedState: no verified state to roll back to');
    [this.layout, this.plan, this.pristine, this.baseStep, this.baseHasInput] = [v.layout, v.plan, v.pristine, v.baseStep, v.baseHasInput];
    if (v.held) {
      v.held.store.store.restore(v.held.store);
      [this.comm, this.store, this.coded] = [v.held.comm, v.held.store.store, v.held.coded];
      [this.live, this.base, this.baseInput] = [v.held.live.slice(), v.held.base.slice(), v.held.baseInput.slice()];
    } else {
      // as a rank joining at the verified step: it holds no chunk of that layout
      [this.comm, this.store, this.coded] = [undefined, undefined as unknown as PeerRedundancy, false];
    }
    this.paramsTouched = false;
    this.stateSending = undefined;
    this.next = undefined;
  }

  /** At a step's start: ec sends the state while the step computes, when its parities are of an older one (copies need no state). */
  beginStep(step: number): void {
    if (!this.store.needsStateEachStep || this.baseStep === step) return;
    const sending = this.store.exchange('state', this.live);
    sending.catch(() => undefined); // awaited in update(); a failure before then fails the step anyway
    this.stateSending = sending;
  }

  /**
   * Inside the step's collective: the reduce-scatter, this chunk's update (into scratch), the
   * allgather of the updated parameters (with the summed loss last), the input's redundancy, and
   * the wait for the state's. `beforeRedundancy` marks the drill point.
   */
  async update(sum: ShardSum, lr: number, step: number, beforeRedundancy: () => void): Promise<void> {
    let last = performance.now();
    const timed = (phase: UpdatePhase): void => {
      const now = performance.now();
      this.stepPhases[phase] = now - last;
      last = now;
    };
    const chunk = await sum.reduce();
    timed('reduce');
    if (this.send.length < chunk.length) this.send = new Float32Array(chunk.length); // once: room for the sum's sideband
    const c = this.comm!.rank;
    const [from, L] = [this.layout.from(c), this.length(this.layout, c)];
    const params = this.config.params;
    const own = params.subarray(from, from + L);
    const grads = chunk.subarray(0, L);
    const scratchInput = this.input.subarray(0, L);
    let input: Float32Array | undefined;
    if (this.plan.kind !== 'none') input = this.config.optimizer.stateInput(own, grads, scratchInput);
    if (this.coded && input) {
      // kept as the data fragment of the input's parities until the next commit, padded to the fragment's length
      if (input !== scratchInput) scratchInput.set(input);
      input = this.input;
    }
    const out = { params: this.send.subarray(0, L), state: this.slotViews(this.scratch, L) };
    this.config.optimizer.update(own, grads, this.slotViews(this.live, L), lr, step, from, out);
    if (chunk.length > L) this.send.set(chunk.subarray(L), L); // the last chunk's loss, and the sum's sideband after it
    this.previous.set(params);
    this.paramsTouched = true;
    timed('update');
    if (sum.sideband === 0) await this.comm!.allgatherv(this.send.subarray(0, chunk.length), params, sum.chunkLengths);
    else {
      this.gathered ??= new Float32Array(params.length + sum.sideband);
      await this.comm!.allgatherv(this.send.subarray(0, chunk.length), this.gathered, sum.chunkLengths);
      params.set(this.gathered.subarray(0, params.length));
      sum.sidebandTotal.set(this.gathered.subarray(params.length));
    }
    timed('allgather');
    if (input) {
      beforeRedundancy();
      await this.store.exchange('input', input);
    }
    timed('input');
    await this.stateSending;
    timed('state_wait');
  }

  /** Mean ms per committed step of each phase of update() on this rank (undefined before any commit). */
  get phaseMs(): Record<UpdatePhase, number> | undefined {
    if (this.committedSteps === 0) return undefined;
    return Object.fromEntries(updatePhases.map((p) => [p, this.phaseTotals[p] / this.committedSteps])) as Record<UpdatePhase, number>;
  }

  /** The step's vote committed: the updated chunk becomes the state, and the copies sent become the ones to recover from. */
  commit(step: number): void {
    for (const phase of updatePhases) this.phaseTotals[phase] += this.stepPhases[phase];
    this.committedSteps += 1;
    if (this.coded && this.stateSending) [this.base, this.live, this.scratch] = [this.live, this.scratch, this.base];
    else [this.live, this.scratch] = [this.scratch, this.live];
    if (this.coded) [this.input, this.baseInput] = [this.baseInput, this.input];
    this.store.commit();
    // the replicas were replayed to the new state; ec's parities hold the step's start and its input
    if (this.plan.kind === 'replicate') [this.baseStep, this.baseHasInput] = [step + 1, false];
    if (this.plan.kind === 'ec') [this.baseStep, this.baseHasInput] = [step, true];
    this.stateSending = undefined;
    this.paramsTouched = false;
    this.pristine = false;
  }

  /** A vote failed: the parameters go back to the step's start (the state never left it). */
  rollback(): void {
    if (this.paramsTouched) this.config.params.set(this.previous);
    this.paramsTouched = false;
    this.stateSending = undefined;
    this.store?.discard();
  }

  /**
   * Recovery on the repaired communicator, for the state at `step`'s start: rebuilds the chunks
   * of the ranks lost since the layout was made, redistributes the state to the new world's
   * chunks and rebuilds the redundancy for it. Nothing changes until adopt(). Throws ProtocolStop
   * ('state-lost') when the survivors' memory cannot rebuild a lost chunk.
   */
  async rebuild(comm: Communicator, step: number): Promise<void> {
    const old = this.layout;
    const lost = old.lostIn(comm);
    const layout = new Layout(comm.worldRanks, old.P);
    const live = this.allocate(layout);
    if (!this.pristine) {
      const unrecoverable = unrecoverableChunks(this.plan, old.worldRanks.length, lost);
      if (unrecoverable.length > 0) throw this.stateLost(unrecoverable);
      if (lost.length > 0 && this.baseStep + (this.baseHasInput ? 1 : 0) !== step) {
        throw new Error(
          `ShardedState: the redundancy stands for step ${this.baseStep + (this.baseHasInput ? 1 : 0)}, recovering step ${step}`,
        );
      }
    }
    // before the first commit a lost chunk is the initial state, which the lowest survivor fills in
    const survivor = old.worldRanks.findIndex((id) => comm.worldRanks.includes(id));
    if (survivor < 0 && lost.length > 0) throw this.stateLost(lost);
    const tasks = this.pristine
      ? lost.map((c) => ({ group: c, chunks: [c], rebuilder: survivor, fragments: [] }))
      : rebuildTasks(this.plan, lost);
    const rebuilt = this.pristine ? this.initialChunks(comm, tasks) : await this.rebuildLost(comm, tasks);
    await this.redistribute(comm, layout, live, tasks, rebuilt);
    const next: Next = { layout, comm, ...this.redundancyFor(comm, layout), live };
    await next.store.seed(live);
    this.next = next;
  }

  /** The recovery's vote committed: the rebuilt state and redundancy take over, standing for `step`. */
  adopt(step: number): void {
    if (!this.next) throw new Error('ShardedState.adopt: no rebuilt state');
    this.install(this.next);
    this.next = undefined;
    this.store.commit();
    if (this.coded) this.base.set(this.live);
    [this.baseStep, this.baseHasInput] = [step, false];
  }

  private install(next: Next): void {
    const fragment = next.live.length;
    const longest = next.layout.longest;
    [this.layout, this.comm, this.plan, this.store, this.live] = [next.layout, next.comm, next.plan, next.store, next.live];
    this.scratch = new Float32Array(fragment);
    this.send = new Float32Array(longest + 1);
    this.coded = isCoded(next.plan, next.comm.rank);
    const ownInput = this.coded || (next.plan.kind !== 'none' && !this.config.optimizer.inputIsGradient);
    this.base = new Float32Array(this.coded ? fragment : 0);
    this.input = new Float32Array(ownInput ? longest : 0);
    this.baseInput = new Float32Array(this.coded ? longest : 0);
    this.stateSending = undefined;
  }

  /** The floats of one redundancy fragment of `item` under `layout` (padded to its longest chunk). */
  private fragmentLength(layout: Layout, item: Item): number {
    return item === 'state' ? this.slots * layout.longest : layout.longest;
  }

  private redundancyFor(comm: Communicator, layout: Layout): { plan: RedundancyPlan; store: PeerRedundancy } {
    const { plan, degraded } = planRedundancy(this.config.redundancy, comm.size);
    if (degraded) this.config.log(`redundancy: ${degraded}`);
    const lengths = {
      state: this.fragmentLength(layout, 'state'),
      // a code needs equal lengths; copies take each chunk's input as it is
      input: (c: number) => (isCoded(plan, c) ? layout.longest : this.length(layout, c)),
    };
    const replay = (c: number, state: Float32Array, input: Float32Array) =>
      this.config.optimizer.replay(this.slotViews(state, this.length(layout, c)), input);
    return { plan, store: new PeerRedundancy(plan, comm, lengths, replay) };
  }

  private length(layout: Layout, c: number): number {
    return layout.to(c) - layout.from(c);
  }

  /** A chunk's state for `layout`: the redistribution receives straight into it. */
  private allocate(layout: Layout): Float32Array {
    return receiveBuffer(this.fragmentLength(layout, 'state'));
  }

  private slotViews(fragment: Float32Array, L: number): Float32Array[] {
    return Array.from({ length: this.slots }, (_, k) => fragment.subarray(k * L, (k + 1) * L));
  }

  /** The initial state of the lost chunks this rank rebuilds. */
  private initialChunks(comm: Communicator, tasks: RebuildTask[]): Map<number, Float32Array> {
    const me = this.layout.worldRanks.indexOf(comm.worldRanks[comm.rank]);
    const rebuilt = new Map<number, Float32Array>();
    for (const c of tasks.filter((t) => t.rebuilder === me).flatMap((t) => t.chunks)) {
      const state = this.allocate(this.layout);
      this.fillInitial(this.layout, c, state);
      rebuilt.set(c, state);
    }
    return rebuilt;
  }

  private fillInitial(layout: Layout, c: number, live: Float32Array): void {
    const [from, to] = [layout.from(c), layout.to(c)];
    this.slotViews(live, to - from).forEach((slot, k) => this.config.initial(k, from, to, slot));
  }

  private stateLost(chunks: number[]): ProtocolStop {
    const ranks = chunks.map((c) => this.layout.worldRanks[c]);
    return new ProtocolStop(
      'state-lost',
      `the optimizer state of rank(s) ${ranks.join(', ')} (chunk(s) ${chunks.join(', ')} of ${this.layout.worldRanks.length}) is lost: ` +
        `no copy of it survives in memory under --redundancy ${describe(this.plan)}`,
    );
  }

  /**
   * Rebuilds each lost chunk (old comm rank i) on one survivor: a replica's holder, or for a code
   * the lowest-ranked survivor among the first k surviving fragments of its group, which receives
   * the others. Returns this rank's rebuilt chunks, at the state of the current step.
   */
  private async rebuildLost(comm: Communicator, tasks: RebuildTask[]): Promise<Map<number, Float32Array>> {
    const me = this.layout.worldRanks.indexOf(comm.worldRanks[comm.rank]);
    const plan = this.plan;
    // a replica, or a group of one chunk (its parity holders keep the chunk itself): a current copy on the rebuilder
    const fromCopy = (task: RebuildTask) => !isCoded(plan, task.chunks[0]);
    const items: Item[] = this.baseHasInput ? ['state', 'input'] : ['state'];
    const decoded = tasks.filter((t) => !fromCopy(t));
    const gathered = new Map<Item, Map<string, Float32Array>>();
    if (plan.kind === 'ec') for (const item of items) gathered.set(item, await this.gatherFragments(comm, decoded, item, me));
    const rebuilt = new Map<number, Float32Array>();
    for (const task of tasks.filter((t) => t.rebuilder === me)) {
      // a copy is only read from here, so a retried rebuild finds it as it was
      if (fromCopy(task)) {
        for (const c of task.chunks) rebuilt.set(c, this.store.replica(c));
        continue;
      }
      if (plan.kind !== 'ec') throw new Error('rebuildLost: no redundancy');
      const decode = (item: Item): Float32Array[] => {
        const fragments = task.fragments.map((f) => gathered.get(item)!.get(`${task.group}:${f.index}`)!);
        const outputs = task.chunks.map(() => new Float32Array(this.fragmentLength(this.layout, item)));
        const kg = plan.groups[task.group].data.length;
        ecDecode(
          kg,
          plan.parity,
          task.fragments.map((f) => f.index),
          fragments,
          task.chunks.map((c) => plan.groups[task.group].data.indexOf(c)),
          outputs,
        );
        return outputs;
      };
      // the parities hold the state at step baseStep, and its input where baseHasInput: replayed in place
      const states = decode('state');
      const inputs = this.baseHasInput ? decode('input') : [];
      task.chunks.forEach((c, i) => {
        const L = this.length(this.layout, c);
        if (this.baseHasInput) this.config.optimizer.replay(this.slotViews(states[i], L), inputs[i].subarray(0, L));
        rebuilt.set(c, states[i]);
      });
    }
    return rebuilt;
  }

  /** ec: every holder of a fragment a rebuilder needs sends it there; keyed "group:fragment index" on the rebuilder. */
  private async gatherFragments(comm: Communicator, tasks: RebuildTask[], item: Item, me: number): Promise<Map<string, Float32Array>> {
    const f = this.fragmentLength(this.layout, item);
    const newRank = (old: number) => comm.worldRanks.indexOf(this.layout.worldRanks[old]);
    const mine = new Map<string, Float32Array>();
    const sendTo: Float32Array[][] = Array.from({ length: comm.size }, () => []);
    const receiveFrom: string[][] = Array.from({ length: comm.size }, () => []);
    for (const task of tasks) {
      for (const fragment of task.fragments) {
        const key = `${task.group}:${fragment.index}`;
        if (fragment.holder === me) {
          const bytes = this.ownFragment(item, task.group, fragment.index);
          if (task.rebuilder === me) mine.set(key, bytes);
          else sendTo[newRank(task.rebuilder)].push(bytes);
        } else if (task.rebuilder === me) receiveFrom[newRank(fragment.holder)].push(key);
      }
    }
    const send = new Float32Array(sendTo.flat().length * f);
    sendTo.flat().forEach((bytes, i) => send.set(bytes, i * f));
    const receive = receiveBuffer(receiveFrom.flat().length * f);
    await comm.alltoallv(
      send,
      sendTo.map((list) => list.length * f),
      receive,
      receiveFrom.map((list) => list.length * f),
    );
    receiveFrom.flat().forEach((key, i) => mine.set(key, receive.subarray(i * f, (i + 1) * f)));
    return mine;
  }

  /** This rank's fragment `index` of ec group `group`: its own chunk (data) at step baseStep, or a parity it keeps. */
  private ownFragment(item: Item, group: number, index: number): Float32Array {
    if (this.plan.kind !== 'ec') throw new Error('ownFragment: not an erasure code');
    const kg = this.plan.groups[group].data.length;
    if (index >= kg) return this.store.parity(item, group, index - kg);
    return item === 'state' ? this.base : this.baseInput;
  }

  /**
   * Every survivor sends the pieces of the chunks it has (its own and those it rebuilt) that fall
   * in each new rank's chunk, into their place there.
   */
  private async redistribute(
    comm: Communicator,
    layout: Layout,
    live: Float32Array,
    tasks: RebuildTask[],
    rebuilt: Map<number, Float32Array>,
  ): Promise<void> {
    const old = this.layout;
    const oldIndex = (newRank: number) => old.worldRanks.indexOf(comm.worldRanks[newRank]);
    /** the old chunks new rank r has after the rebuild, ascending (none for a rank that joins) */
    const holdings = (r: number): number[] => {
      const own = oldIndex(r);
      if (own < 0) return [];
      return [own, ...tasks.filter((t) => t.rebuilder === own).flatMap((t) => t.chunks)].sort((a, b) => a - b);
    };
    const me = comm.rank;
    const chunkState = (c: number) => (c === oldIndex(me) ? this.live : rebuilt.get(c)!);
    // one alltoallv per slot and per held chunk (a survivor holds its own and those it rebuilt),
    // straight from the held states into the new chunk: no send or receive buffer, no copy
    const mine = this.length(layout, me);
    const held = Array.from({ length: comm.size }, (_, r) => holdings(r));
    const rounds = Math.max(...held.map((chunks) => chunks.length));
    const overlap = (c: number, d: number) => [Math.max(old.from(c), layout.from(d)), Math.min(old.to(c), layout.to(d))];
    for (let k = 0; k < this.slots; ++k) {
      for (let j = 0; j < rounds; ++j) {
        const c = held[me][j];
        const sendCounts = new Array<number>(comm.size).fill(0);
        const sendDispls = new Array<number>(comm.size).fill(0);
        if (c !== undefined) {
          for (let d = 0; d < comm.size; ++d) {
            const [from, to] = overlap(c, d);
            if (from >= to) continue;
            sendCounts[d] = to - from;
            sendDispls[d] = k * this.length(old, c) + from - old.from(c);
          }
        }
        const recvCounts = new Array<number>(comm.size).fill(0);
        const recvDispls = new Array<number>(comm.size).fill(0);
        for (let s = 0; s < comm.size; ++s) {
          const theirs = held[s][j];
          if (theirs === undefined) continue;
          const [from, to] = overlap(theirs, me);
          if (from >= to) continue;
          recvCounts[s] = to - from;
          recvDispls[s] = k * mine + from - layout.from(me);
        }
        const send = c === undefined ? new Float32Array(0) : chunkState(c);
        await comm.alltoallv(send, sendCounts, live, recvCounts, sendDispls, recvDispls);
      }
    }
  }
}

interface RebuildTask {
  /** ec group (replicate: the lost chunk itself) */
  group: number;
  /** the lost chunks this task rebuilds, ascending */
  chunks: number[];
  /** the old comm rank that rebuilds them */
  rebuilder: number;
  /** ec: the fragments decoded from (index in the group's code, old comm rank holding it) */
  fragments: { index: number; holder: number }[];
}

/** Who rebuilds which lost chunks from which fragments: the same answer on every survivor. */
function rebuildTasks(plan: RedundancyPlan, lost: readonly number[]): RebuildTask[] {
  const alive = (r: number) => !lost.includes(r);
  if (plan.kind === 'replicate') {
    return lost.map((c) => ({ group: c, chunks: [c], rebuilder: Math.min(...plan.holders[c].filter(alive)), fragments: [] }));
  }
  if (plan.kind !== 'ec') return [];
  const tasks: RebuildTask[] = [];
  plan.groups.forEach((group, g) => {
    const chunks = group.data.filter((c) => lost.includes(c));
    if (chunks.length === 0) return;
    const candidates = [
      ...group.data.map((holder, index) => ({ index, holder })),
      ...group.parity.map((holder, j) => ({ index: group.data.length + j, holder })),
    ];
    const fragments = candidates.filter((f) => alive(f.holder)).slice(0, group.data.length);
    tasks.push({ group: g, chunks, rebuilder: Math.min(...fragments.map((f) => f.holder)), fragments });
  });
  return tasks;
}

function describe(plan: RedundancyPlan): string {
  if (plan.kind === 'none') return 'none';
  if (plan.kind === 'replicate') return `replicate:${plan.copies} (${plan.placement} placement)`;
  return `ec:${plan.data}+${plan.parity}`;
}
