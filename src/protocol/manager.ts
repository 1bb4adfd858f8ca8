// The fault-tolerance protocol's one owner (torchft's Manager): it holds the communicators, the
// shard map and the shards' data, and runs every collective of the program through one path,
// "collective, then vote", so that no survivor is ever left in a different collective from the
// others. A failed vote sends every survivor into the same recovery (repair, reassignment and
// readback of the lost shards, JIT checkpoint) before the caller retries. The readback reads the
// retried step's rows first: the recovery awaits only the record batches they live in, and the
// rest of the lost shards loads in the background once the retried step has committed. It also
// writes checkpoints (stripes, digest gather, commit, each voted), ends the run (the final write,
// voted like the rest, with the job's readback total), and stops the job when a rank reports an
// error of its own.
// Two communicators: every live rank (votes, repair, growth) and the working ranks (the sum and
// everything else), the same one unless hot spares wait (--spares): they hold no shards, only
// vote and receive each step's outcome, so that any of them can take a lost rank's place, and its
// shards, in the recovery. Lost ranks are also replaced by ranks spawned for them (--respawn):
// once the communicator is repaired, the survivors grow it with MPI_Comm_spawn, send the newcomers
// the parameters and where the run stands (the join), and the newcomers take the lost shards.
import * as fs from 'node:fs';
import { isFailure, type Communicator } from '../comm';
import { checkpointDir, commitManifest, configSha256, newStripeWriter, prepareManifest, pruneCheckpoints, readyCheckpoints, readySpare, removeStaging, stagingDir, stateFileBytes, stripeDigests, writeStripes, type CheckpointMeta, type StripeWriter, type TrainingState } from '../checkpoint/checkpoint';
import type { Dataset } from '../data/dataset';
import { LazyShard, Readback } from '../data/readback';
import type { ShardLayout } from '../data/shard-layout';
import { ShardMap } from '../data/shard-map';
import type { ShardData } from '../data/split';
import { goneFromHere } from '../run/pids';
import type { RunEvent } from '../run/records';
import type { FaultInjector, Phase } from '../liveness/drills';
import { ddpBuckets, oneBucket, ShardSum } from './shard-sum';
import { ShardedState, type JoinMeta, type ShardedStateConfig } from '../sharding/sharded-state';
import { beat, killDeclaredDead, peersGone } from '../liveness/hangs';
import { repair, withDeadline, type Repair } from './repair';
import { ProtocolStop } from './stop';

/**
 * Below this, a replicated state's checkpoint is written by one rank: each more writer's flush and
 * disk contention cost more than its share of a few ms of writing saves (lenet's 3.5 MB at 4 ranks,
 * 3 survivors: 4.3 ms one writer, 5.2 ms three). At 100 MB three writers beat one (41 against 47 ms).
 */
const oneWriterBelowBytes = 8 << 20;

/** What a failure does: exact (bit-identical result), shrink (survivors keep their batch), none (the job ends). */
export type FailurePolicy = 'exact' | 'shrink' | 'none';

export interface ProtocolConfig {
  onFailure: FailurePolicy;
  shards: number;
  minRanks: number;
  /** repair attempts per failure */
  maxRetries: number;
  /** write a checkpoint from the survivors after each failure */
  jitCheckpoint: boolean;
  checkpointDir: string;
  keepCheckpoints: number;
  /** checkpoints are expected (JIT or periodic): the leader keeps a spare state file ready for them (checkpoint.ts) */
  spareCheckpoint: boolean;
  /** the settings that fix the result, recorded in checkpoints */
  identity: Record<string, unknown>;
  /** the longest a shrink may take (see hangs.ts) */
  commTimeoutMs: number;
  /** where the ranks' pid files are (to kill a rank declared dead for hanging) */
  pidsDir: string;
  /** exact mode: the length of what one shard contributes to the sum, and the add in shard order */
  sumLength: number;
  add(acc: Float32Array, x: Float32Array): void;
  /**
   * exact mode: this rank's part of the sum can overlap its backward pass, having a core for the
   * comm thread beside the compute's (comm's canOverlap). The sum goes in DDP's buckets where every
   * rank can, else in one exchange at the end.
   */
  overlap: boolean;
  /** --optimizer-state sharded (exact mode): the optimizer, parameters and redundancy it needs */
  sharded?: Omit<ShardedStateConfig, 'log' | 'initial'>;
  /** --spares: the ranks of the job beyond the working ones (the highest ids) */
  spares: number;
  /** --respawn: how many ranks may be spawned in all, and the command a spawned rank runs given its first id */
  respawn?: { limit: number; command: string; args(firstId: number): string[] };
  /** this process was spawned by the job's ranks: it joins in their recovery */
  joined: boolean;
}

/** What the protocol reports to the run directory and the console. */
export interface ProtocolObserver {
  event(record: RunEvent): void;
  /** the lowest live rank leads (logs, metrics, the final write) */
  leader(isLeader: boolean): void;
  log(message: string): void;
}

/** What the protocol asks of the training loop, as it stands at the current step's start. */
export interface StateSource {
  /** the training state a checkpoint holds */
  state(): TrainingState;
  /** the epoch, and shrink mode's data position */
  position(): Pick<CheckpointMeta, 'epoch' | 'shrink'>;
  /** the rows (within each shard) the current step reads of `shards` under `map`; absent: none */
  stepRows(map: ShardMap, shards: readonly number[]): Map<number, Int32Array>;
  /** sharded state: the optimizer state at the run's start, slot k over elements [from, to) */
  initialState(slot: number, from: number, to: number, out: Float32Array): void;
  /** what a joining rank receives, as it stands at the current step's start: buffers of the same length on every rank (sent in place) */
  joinBuffers(): Float32Array[];
  /** a joining rank's training loop takes up `position` at `step` */
  joinAt(step: number, position: Pick<CheckpointMeta, 'epoch' | 'shrink'>): void;
}

/** What the ranks already in the run tell the ones joining it. */
interface JoinMessage {
  step: number;
  owners: number[];
  joiners: number[];
  worldInitial: number;
  nextId: number;
  respawnsLeft: number;
  failures: Failure[];
  worldHistory: CheckpointMeta['world_history'];
  bytesReadBack: number;
  lastCheckpoint: string | null;
  sumInBuckets: boolean;
  position: Pick<CheckpointMeta, 'epoch' | 'shrink'>;
  sharded?: JoinMeta;
}

/** A failure the run recovered from. */
export interface Failure {
  /** the step it interrupted (retried on the repaired world) */
  step: number;
  /** the world ranks lost */
  lost: number[];
  /** working ranks after the recovery */
  world: number;
}

/** What a collective's vote decided, the same on every survivor. */
export interface Outcome {
  /** every survivor's collective succeeded: commit. Otherwise recovery has run: retry. */
  ok: boolean;
  /** some rank asked to stop (SIGTERM) */
  stop: boolean;
}

const OK = 1;
const CARRY_ON = 2;
const now = (): number => performance.now();

export class Manager {
  /** every live rank */
  private comm: Communicator;
  /** the working ranks (null on a spare): `comm` itself when every live rank works */
  private workers: Communicator | null;
  private map: ShardMap;
  private sum?: ShardSum;
  /**
   * Whether the sum goes in DDP's buckets (else one exchange): one choice for the world, since
   * every rank must make the same calls (a rank that chose otherwise hung its peers' exchange).
   * DDP's where every rank can overlap; a spawned rank takes the world's from the join.
   */
  private sumInBuckets: boolean;
  private sharded?: ShardedState;
  private readonly held = new Map<number, ShardData>();
  private readonly readbacks: Readback[] = [];
  /** readbacks whose background pass starts once the retried step has committed */
  private readonly awaitingCommit: Readback[] = [];
  /** of this rank's readback bytes, those already summed into bytesReadBack */
  private readBackReported = 0;
  private failedAt = -1;
  private source?: StateSource;
  /** the step being worked on (drills and events name it) */
  step = 0;
  /** training has ended: a recovery no longer reads back or checkpoints */
  trainingDone = false;
  readonly failures: Failure[] = [];
  /** bytes read back from disk by every rank, as of the last recovery or the final write */
  bytesReadBack = 0;
  /** the working ranks at the start: how many the recovery keeps working while spares and respawns last */
  worldInitial: number;
  readonly worldHistory: CheckpointMeta['world_history'] = [];
  lastCheckpoint: string | null = null;
  /** this rank's checkpoint stripes' writer, made at the start: its staging buffers are touched then, not during the checkpoint */
  private readonly stripeWriter = newStripeWriter();
  /** the leader's, for the spare beside training (readySpare) */
  private spareWriter?: StripeWriter;
  private spare: Promise<void> = Promise.resolve();
  private spareUnderWay = false;
  /** the checkpoint directory was there before this run (else a run that wrote no checkpoint leaves none) */
  private readonly checkpointDirWasThere: boolean;
  /** every checkpoint's config_sha256 (the identity never changes) */
  private readonly configSha256: string;
  /** the id the next spawned rank gets, and how many more may be spawned */
  private nextId: number;
  private respawnsLeft: number;
  /** a spawned rank that has not yet received the run's state: it leaves if the join fails */
  private awaitingJoin: boolean;

  constructor(
    private readonly config: ProtocolConfig,
    world: Communicator,
    private readonly dataset: Dataset,
    private readonly layout: ShardLayout,
    private readonly observer: ProtocolObserver,
    private readonly faults: FaultInjector,
  ) {
    this.comm = world;
    this.checkpointDirWasThere = fs.existsSync(config.checkpointDir);
    // a spawned rank learns the run's sizes and map at the join
    this.worldInitial = config.joined ? world.size : world.size - config.spares;
    const ids = [...world.worldRanks].sort((a, b) => a - b);
    this.map = ShardMap.initial(config.shards, ids.slice(0, this.worldInitial));
    this.workers = config.spares === 0 ? world : null;
    this.nextId = ids[ids.length - 1] + 1;
    this.respawnsLeft = config.respawn?.limit ?? 0;
    this.awaitingJoin = config.joined;
    this.sumInBuckets = config.overlap;
    this.configSha256 = configSha256(config.identity);
  }

  /** The number of working ranks. */
  get size(): number {
    return this.workers?.size ?? this.map.ranks.length;
  }

  /** This rank's rank among the working ones (-1 on a spare). */
  get rank(): number {
    return this.workers?.rank ?? -1;
  }

  /** Whether this rank works (holds shards and takes part in the sum), or waits as a spare. */
  get working(): boolean {
    return this.workers !== null;
  }

  /** The job was launched with spares (--spares). */
  get sparesLaunched(): boolean {
    return this.config.spares > 0;
  }

  /** The live ranks waiting as spares, ascending. */
  get spares(): number[] {
    return this.liveRanks.filter((r) => !this.map.owners.includes(r));
  }

  get worldRank(): number {
    return this.comm.worldRanks[this.comm.rank];
  }

  /** World ranks of the live ranks, ascending. */
  get liveRanks(): number[] {
    return [...this.comm.worldRanks].sort((a, b) => a - b);
  }

  /** The lowest live working rank leads (a spare, when no working rank is left). */
  get isLeader(): boolean {
    return this.worldRank === this.leaderId;
  }

  private get leaderId(): number {
    return this.liveWorkers[0] ?? this.liveRanks[0];
  }

  /** The leader's rank in the communicator of every live rank (the root of what it sends them). */
  private get leaderRoot(): number {
    return this.comm.worldRanks.indexOf(this.leaderId);
  }

  /** The shard map's owners still alive, ascending (a repair may just have lost some). */
  private get liveWorkers(): number[] {
    const live = new Set(this.comm.worldRanks);
    return this.map.ranks.filter((r) => live.has(r));
  }

  get shardMap(): ShardMap {
    return this.map;
  }

  /** This rank's shards, ascending. */
  get heldShards(): number[] {
    return this.map.shardsOf(this.worldRank);
  }

  shard(s: number): ShardData {
    const data = this.held.get(s);
    if (!data) throw new Error(`shard ${s} is not held by rank ${this.worldRank}`);
    return data;
  }

  /**
   * Resolves once `rows` of shard s are in memory: a shard being read back reads their record
   * batches ahead of the rest. Rejects when a read failed (bad data: the caller's error path).
   */
  ready(s: number, rows: Int32Array): Promise<void> {
    const data = this.shard(s);
    return data instanceof LazyShard ? data.ready(rows) : Promise.resolve();
  }

  /** The exact mode's shard-ordered sum over the current communicator and map. */
  get shardSum(): ShardSum {
    if (!this.sum) throw new Error('the shard-ordered sum exists in exact mode only');
    return this.sum;
  }

  /** The sharded optimizer state (--optimizer-state sharded). */
  get shardedState(): ShardedState | undefined {
    return this.sharded;
  }

  /** A drill point of the current step; also tells the watchdog that this rank is alive. */
  at(phase: Phase): void {
    beat();
    this.faults.at(this.step, phase);
  }

  /** Allreduce over the working ranks (no vote: use it inside collective()). */
  allreduce(buffer: Float32Array | Float64Array): Promise<void> {
    return this.workers!.allreduce(buffer, 'sum');
  }

  /**
   * Inside the step's collective, on every live rank: the spares receive the step's outcome from
   * the leader (`outcome`: the summed gradient and loss, or the updated parameters and loss), so
   * that any of them can take a working rank's place. Nothing to do without spares.
   */
  async feedSpares(outcome: Float32Array): Promise<void> {
    if (this.workers === this.comm) return;
    await this.comm.bcast(outcome, this.leaderRoot);
  }

  /**
   * Reads this rank's shards and, when resuming, votes that every rank restored the checkpoint. A
   * spawned rank instead joins the recovery the ranks that spawned it are in.
   */
  async start(source: StateSource, resumed: boolean): Promise<void> {
    this.source = source;
    if (this.config.joined) {
      await this.recover();
      readyCheckpoints(this.checkpointMeta('ready'), source.state(), this.working ? this.rank : undefined, this.size);
      return;
    }
    if (this.config.onFailure === 'exact') {
      const canOverlap = Int32Array.of(this.config.overlap ? 1 : 0);
      await withDeadline(this.comm.allreduce(canOverlap, 'min'), this.config.commTimeoutMs, 'MPI_Allreduce');
      this.sumInBuckets = canOverlap[0] === 1;
    }
    if (!this.workers) this.workers = await this.splitWorkers();
    this.observer.leader(this.isLeader);
    await this.load(this.heldShards);
    this.rebuildSum();
    if (this.config.sharded && this.working) this.sharded = this.newShardedState();
    this.worldHistory.push({ step: this.step, world: this.size, lost: [] });
    readyCheckpoints(this.checkpointMeta('ready'), source.state(), this.working ? this.rank : undefined, this.size);
    this.readySpare();
    if (resumed) while (!(await this.collective('resume', async () => undefined)).ok);
  }

  private newShardedState(joining?: JoinMeta): ShardedState {
    const initial = this.source!.initialState.bind(this.source);
    return new ShardedState({ ...this.config.sharded!, initial, log: (message) => this.observer.log(message) }, joining ? undefined : this.workers!, joining);
  }

  /**
   * Runs `run` (a collective over the live ranks), then the vote: bit 0 = my collective
   * succeeded, bit 1 = I do not ask to stop. When the vote fails, the recovery runs before this
   * returns (ok false: retry whatever `run` was for). Errors that are not failures pass through.
   */
  async collective(phase: Phase, run: () => Promise<void>, stop = false): Promise<Outcome> {
    this.at(phase);
    const ok = await this.survives(phase, run);
    if (this.config.onFailure === 'none') return { ok, stop };
    if (phase === 'collective') this.at('agree');
    const agreed = await this.vote((ok ? OK : 0) | (stop ? 0 : CARRY_ON));
    if (agreed !== null && (agreed & OK) !== 0) {
      for (const readback of this.awaitingCommit.splice(0)) readback.startBackground();
      return { ok: true, stop: (agreed & CARRY_ON) === 0 };
    }
    await this.recover();
    return { ok: false, stop: false };
  }

  /** The AND of `flag` over the survivors, or null when the agreement itself met a failure (alike on all). */
  private async vote(flag: number): Promise<number | null> {
    // alone, there is nobody to agree with: the AND over one rank is its flag
    if (this.comm.size === 1) return flag;
    const started = now();
    try {
      return await this.comm.agree(flag);
    } catch (error) {
      if (!isFailure(error)) throw error;
      this.noteFailure(error, 'agree', now() - started);
      return null;
    }
  }

  /** The first failure seen at this step; `detectMs`: how long the call that met it had waited. */
  private noteFailure(error: Error, phase: string, detectMs: number): void {
    if (this.failedAt === this.step) return;
    this.failedAt = this.step;
    this.observer.event({ event: 'failure', step: this.step, phase, error: error.name, detect_ms: detectMs });
    this.observer.log(`step ${this.step}: ${error.name} in the ${phase} phase`);
  }

  /** Whether exact mode's sum overlaps the backward pass (the computation reports its progress to it). */
  get overlap(): boolean {
    return this.config.overlap;
  }

  /** Whether the current step is being retried after a failure. */
  get retrying(): boolean {
    return this.failedAt === this.step;
  }

  /**
   * The recovery protocol, run alike by every survivor: repair, replace the lost ranks (spares,
   * spawned ranks) or give their shards to the least-loaded survivors, read back what the retried
   * step needs of the lost shards, rebuild sharded state, write the JIT checkpoint. A failure
   * during any of it starts it again. Throws ProtocolStop below --min-ranks (after a checkpoint)
   * and when a rank reported an error. A spawned rank starts here, at the join.
   */
  async recover(): Promise<void> {
    this.sharded?.rollback();
    this.at('recovery');
    if (!this.awaitingJoin && this.failedAt !== this.step) this.noteFailure(new Error('agreed failure'), 'agree', 0);
    const lostShards = new Set<number>();
    const lost: number[] = [];
    let readMs = 0;
    let readBeforeRetry = 0;
    for (;;) {
      let joiners: number[] = [];
      if (!this.awaitingJoin) {
        const fixed = await this.repair(false);
        lost.push(...fixed.lost);
        if (this.config.sharded && !this.trainingDone && this.liveWorkers.length === 0) {
          throw new ProtocolStop('state-lost', 'every working rank is lost, and with them the sharded optimizer state (spares hold none of it)');
        }
        const grown = await this.grow();
        if (grown === null) continue;
        joiners = grown;
      }
      if (joiners.length > 0 || this.awaitingJoin) {
        const message = await this.join(joiners);
        if (!message) continue;
        joiners = message.joiners;
      }
      const next = this.map.handOver(this.comm.worldRanks, joiners);
      const moved = this.map.movedTo(next);
      this.map = next;
      if (!(await this.formWorkers())) continue;
      this.rebuildSum();
      if (!this.trainingDone && this.working) {
        // taken over now, before anything below can fail and repair again with a newer map
        this.at('readback');
        const readStart = now();
        readBeforeRetry += await this.readBackFirst(moved.get(this.worldRank) ?? []);
        readMs += now() - readStart;
      }
      for (const shards of moved.values()) for (const s of shards) lostShards.add(s);
      const step = this.step;
      if (this.sharded && !this.trainingDone && !(await this.rebuildState(step))) continue;
      if (this.size < this.config.minRanks) {
        if (!(await this.tryCheckpoint('min-ranks'))) continue;
        this.observer.event({ event: 'stop', step, reason: 'below-min-ranks', world: this.size, min_ranks: this.config.minRanks, checkpoint: this.lastCheckpoint });
        throw new ProtocolStop('min-ranks', `${this.size} rank(s) left, below --min-ranks ${this.config.minRanks}: stopping (checkpoint ${this.lastCheckpoint})`, this.lastCheckpoint);
      }
      if (this.trainingDone) return;
      // every rank reports what the others read too: the leader's events hold the whole job's readback
      const mine = this.readBackUnreported();
      const counts = Float64Array.of(readBeforeRetry, mine);
      if (!(await this.attempt('readback', () => this.workers!.allreduce(counts, 'sum')))) continue;
      this.noteReadBackReported(counts[1], mine);
      this.observer.event({ event: 'readback', step, shards: [...lostShards].sort((a, b) => a - b), bytes_before_retry: counts[0], duration_ms: readMs });
      const spares = this.spares.length > 0 ? ` (+${this.spares.length} spare${this.spares.length > 1 ? 's' : ''})` : '';
      this.observer.log(`step ${step}: lost rank(s) ${lost.join(', ') || 'none'}; ` +
        `read back the retried step's ${counts[0]} bytes in ${readMs.toFixed(1)} ms (the rest of the lost shards in the background); retrying on ${this.size} ranks${spares}`);
      if (this.config.jitCheckpoint && !(await this.tryCheckpoint('jit'))) continue;
      return;
    }
  }

  /**
   * The ranks that take the lost ranks' places: spares first, then ranks spawned for the rest
   * (--respawn), the communicator grown by them. Null when a failure interrupted the spawn.
   */
  private async grow(): Promise<number[] | null> {
    if (this.trainingDone) return [];
    const vacant = this.map.ranks.length - this.liveWorkers.length;
    const joiners = this.spares.slice(0, vacant);
    const count = Math.min(vacant - joiners.length, this.respawnsLeft);
    if (count <= 0) return joiners;
    const spawned = await this.spawn(count);
    return spawned === null ? null : [...joiners, ...spawned];
  }

  /**
   * Spawns `count` ranks and merges them into the communicator: their ids, or null when a failure
   * interrupted it. Where spawning is not possible, says so once and turns respawning off.
   */
  private async spawn(count: number): Promise<number[] | null> {
    const respawn = this.config.respawn!;
    const firstId = this.nextId;
    this.nextId += count;
    this.at('spawn');
    const started = now();
    let merged: Communicator | undefined;
    let impossible: string | undefined;
    const ok = await this.survives('spawn', async () => {
      try {
        merged = await withDeadline(this.comm.spawn(respawn.command, respawn.args(firstId), count, firstId), this.config.commTimeoutMs, 'MPI_Comm_spawn');
      } catch (error) {
        if (isFailure(error)) throw error;
        impossible = (error as Error).message;
      }
    });
    const agreed = await this.vote((ok && !impossible ? OK : 0) | (impossible ? 0 : CARRY_ON));
    if (agreed !== null && (agreed & OK) !== 0) {
      const old = this.comm;
      this.comm = merged!;
      await old.free();
      this.respawnsLeft -= count;
      const ids = this.comm.worldRanks.slice(-count);
      this.observer.event({ event: 'spawn', step: this.step, ranks: ids, duration_ms: now() - started });
      return ids;
    }
    if (merged) await merged.revoke().then(() => merged!.free()).catch(() => undefined);
    if (agreed === null || (agreed & CARRY_ON) !== 0) return null;
    this.respawnsLeft = 0;
    this.observer.event({ event: 'spawn', step: this.step, ranks: [], error: impossible ?? 'not possible on another rank', duration_ms: now() - started });
    this.observer.log(`step ${this.step}: cannot spawn a rank to replace the lost: ${impossible ?? 'not possible on another rank'} ` +
      '(no free slot in the allocation, or an MPI without spawn support); going on with the survivors, --respawn off');
    return [];
  }

  /**
   * The join, on every live rank: the leader (a rank that holds the run's state) sends where the
   * run stands and the state at the step's start; the joining ranks take it up. The message, or
   * null when a failure interrupted it (a spawned rank that got nothing then leaves: it is lost).
   */
  private async join(joiners: number[]): Promise<JoinMessage | null> {
    const started = now();
    const root = this.leaderRoot;
    const sent: JoinMessage = {
      step: this.step, owners: this.map.toJSON(), joiners, worldInitial: this.worldInitial, nextId: this.nextId, respawnsLeft: this.respawnsLeft,
      failures: this.failures, worldHistory: this.worldHistory, bytesReadBack: this.bytesReadBack, lastCheckpoint: this.lastCheckpoint, sumInBuckets: this.sumInBuckets,
      position: this.awaitingJoin ? { epoch: 0 } : this.source!.position(), sharded: this.sharded?.meta(),
    };
    let received: JoinMessage | undefined;
    const buffers = this.source!.joinBuffers();
    const ok = await this.attempt('join', async () => {
      const bytes = new TextEncoder().encode(JSON.stringify(sent));
      const length = Int32Array.of(bytes.length);
      await this.comm.bcast(length, root);
      const message = this.comm.rank === root ? bytes : new Uint8Array(length[0]);
      await this.comm.bcast(message, root);
      received = JSON.parse(new TextDecoder().decode(message)) as JoinMessage;
      if (this.awaitingJoin) this.step = received.step; // the drill point below names it
      this.at('join');
      for (const buffer of buffers) await this.comm.bcast(buffer, root);
    }, true);
    if (!ok) {
      if (this.awaitingJoin) this.leave('the join failed');
      return null;
    }
    const message = received!;
    if (this.awaitingJoin) {
      this.awaitingJoin = false;
      this.step = message.step;
      this.failedAt = message.step;
      this.map = ShardMap.fromOwners(message.owners);
      this.worldInitial = message.worldInitial;
      this.failures.push(...message.failures);
      this.worldHistory.push(...message.worldHistory);
      [this.nextId, this.respawnsLeft, this.bytesReadBack, this.lastCheckpoint] = [message.nextId, message.respawnsLeft, message.bytesReadBack, message.lastCheckpoint];
      this.sumInBuckets = message.sumInBuckets;
      this.source!.joinAt(message.step, message.position);
    }
    if (this.config.sharded && !this.sharded && message.joiners.includes(this.worldRank)) this.sharded = this.newShardedState(message.sharded!);
    const bytes = buffers.reduce((n, buffer) => n + buffer.byteLength, 0);
    this.observer.event({ event: 'join', step: this.step, ranks: message.joiners, bytes, duration_ms: now() - started });
    return message;
  }

  /** A spawned rank that could not join: it leaves as a failure (the others recover without it). */
  private leave(why: string): never {
    this.observer.log(`rank ${this.worldRank}: ${why}; leaving`);
    process.kill(process.pid, 'SIGKILL');
    throw new Error('unreachable');
  }

  /**
   * Sharded state: rebuilds the lost ranks' chunks from the survivors' memory, redistributes the
   * state to the new world (joining ranks included) and rebuilds its redundancy, voted; false when
   * a failure interrupted it.
   */
  private async rebuildState(step: number): Promise<boolean> {
    const started = now();
    const sharded = this.sharded!;
    this.at('rebuild');
    if (!(await this.attempt('rebuild', () => sharded.rebuild(this.workers!, step)))) return false;
    sharded.adopt(step);
    this.observer.event({ event: 'redundancy-rebuild', step, world: this.size, duration_ms: now() - started, state_bytes: sharded.bytes.state });
    return true;
  }

  /** The working ranks' communicator for the current map (voted); false when a failure interrupted it. */
  private async formWorkers(): Promise<boolean> {
    if (this.spares.length === 0) this.workers = this.comm;
    else {
      let part: Communicator | null = null;
      const ok = await this.attempt('join', async () => {
        part = await this.splitWorkers();
      }, true);
      if (!ok) {
        await (part as Communicator | null)?.free().catch(() => undefined);
        return false;
      }
      this.workers = part;
    }
    this.observer.leader(this.isLeader);
    return true;
  }

  /** This rank's part of the working ranks' communicator (null on a spare), split from every live rank's. */
  private splitWorkers(): Promise<Communicator | null> {
    const works = this.map.owners.includes(this.worldRank);
    return withDeadline(this.comm.split(works ? 0 : -1, this.comm.rank), this.config.commTimeoutMs, 'MPI_Comm_split');
  }

  /** Revoke, shrink, agree; kills what was declared dead; stops the job if a rank erred. */
  private async repair(erred: boolean): Promise<Repair> {
    if (this.workers !== this.comm) {
      // spares wait: the working ranks' communicator goes too (formWorkers() makes the next)
      await this.workers?.revoke().then(() => this.workers!.free()).catch(() => undefined);
    }
    this.workers = null;
    const fixed = await repair(this.comm, this.step, { maxAttempts: this.config.maxRetries, deadlineMs: this.config.commTimeoutMs, erred });
    this.comm = fixed.comm;
    const killed = fixed.lost.length > 0 ? killDeclaredDead(this.config.pidsDir, fixed.lost) : [];
    // before this side writes anything: it may be the far side of a partition
    if (fixed.lost.length > 0) await this.holdMajority(fixed.lost, killed);
    this.observer.leader(this.isLeader);
    if (fixed.erred.length > 0) {
      throw new ProtocolStop('error', `rank(s) ${fixed.erred.join(', ')} stopped the job for an error`, null, fixed.erred);
    }
    this.observer.event({ event: 'revoke+shrink', step: this.step, lost: fixed.lost, world: this.comm.size, duration_ms: fixed.revokeShrinkMs, attempts: fixed.attempts });
    this.observer.event({ event: 'agree', step: this.step, duration_ms: fixed.agreeMs });
    if (fixed.lost.length > 0) {
      if (killed.length > 0) this.observer.log(`step ${this.step}: killed rank(s) ${killed.join(', ')}, declared dead while still running (hung)`);
      const working = this.liveWorkers.length;
      this.failures.push({ step: this.step, lost: fixed.lost, world: working });
      this.worldHistory.push({ step: this.step, world: working, lost: fixed.lost });
    }
    return fixed;
  }

  /**
   * No split brain: the survivors of a repair go on only as a majority of the ranks that may still
   * be running, i.e. of the last agreed world less the lost ranks seen gone. A lost rank is seen gone
   * where a survivor shares its host (its pid file names that host and its process is no more); a
   * rank on a host without survivors may be alive behind a cut link, training on as a job of its
   * own. So losing a whole host is survivable by a majority, and the far side of a partition (or an
   * even split) stops without writing anything: ProtocolStop 'minority'.
   */
  private async holdMajority(lost: number[], killed: number[]): Promise<void> {
    if (killed.length > 0) await peersGone(this.config.pidsDir, killed, this.config.commTimeoutMs);
    // agree ANDs: bit i stays set where no survivor saw lost[i] gone (beyond 30 lost ranks: not seen)
    const unseen = lost.slice(0, 30).reduce((flag, rank, i) => (goneFromHere(this.config.pidsDir, rank) ? flag & ~(1 << i) : flag), ~0);
    const agreed = await this.comm.agree(unseen).catch((error: Error) => {
      if (!isFailure(error)) throw error;
      return ~0; // alike on every survivor: none seen gone; the next collective meets the new failure
    });
    const maybeRunning = lost.filter((_, i) => i >= 30 || (agreed & (1 << i)) !== 0).length;
    if (this.comm.size > maybeRunning) return;
    throw new ProtocolStop('minority', `${this.comm.size} rank(s) left of the last agreed world of ${this.comm.size + lost.length}, ` +
      `and ${maybeRunning} lost on hosts where no survivor can see them gone (a cut link?): no majority, so this side stops and leaves the run to the other`);
  }

  /**
   * This rank met an error of its own (bad data, a full disk): revoke, so that every peer leaves
   * whatever collective it is in, vote as they do, and join their repair saying so. Every survivor then stops
   * with the same decision (the ProtocolStop returned, which names the ranks that erred).
   */
  async reportError(): Promise<ProtocolStop> {
    try {
      await this.comm.revoke();
      // the peers vote on whatever collective the revoke interrupted: so does this rank, on the
      // same communicator, before the repair (an agreement left alone would wait for it)
      await this.vote(0);
      await this.repair(true);
    } catch (error) {
      if (error instanceof ProtocolStop) return error;
      throw error;
    }
    return new ProtocolStop('unrecoverable', 'the repair after an error did not see the error');
  }

  /** A checkpoint of the current step's start that survives failures while it is written. */
  async checkpoint(reason: string): Promise<void> {
    while (!(await this.tryCheckpoint(reason))) await this.recover();
  }

  /**
   * One attempt: the live ranks write the stripes of the state file into the staging directory;
   * meanwhile the leader gets every stripe's digest (computed from memory) and writes the manifest
   * beside them; a vote once every stripe is durable; the leader renames the directory to the
   * step's; a last vote says the commit happened. False when a failure interrupted it (the caller
   * repairs and tries again; stripes rewrite the same bytes).
   */
  private async tryCheckpoint(reason: string): Promise<boolean> {
    const started = now();
    const state = this.source!.state();
    const dir = checkpointDir(this.config.checkpointDir, this.step);
    const staging = stagingDir(this.config.checkpointDir);
    this.at('checkpoint-stripe');
    // its failure (a full disk) is held from now on, not left unhandled while the digests are got
    const chunks = this.chunksToWrite(state);
    const written = chunks.length > 0
      ? writeStripes(staging, state, chunks, this.size, this.stripeWriter).then(() => undefined, (error: unknown) => ({ error }))
      : undefined;
    this.at('checkpoint-gather');
    const digests = await this.stripeDigests(state);
    const gathered = digests !== false;
    const prepared = digests ? prepareManifest(staging, this.checkpointMeta(reason), state, digests) : undefined;
    const manifestFailed = prepared?.durable.then(() => undefined, (error: unknown) => ({ error }));
    const failed = (await written) ?? (await manifestFailed);
    if (failed) throw failed.error;
    if ((await this.vote(gathered ? OK : 0)) !== OK) return false;
    this.at('checkpoint-commit');
    if (prepared) {
      const manifest = commitManifest(prepared, dir);
      this.observer.event({ event: 'checkpoint', step: this.step, reason, dir, bytes: manifest.file.bytes, stripes: this.size, duration_ms: now() - started });
    }
    if (!(await this.attempt('checkpoint-commit', async () => undefined))) return false;
    this.lastCheckpoint = dir;
    // once every rank goes on: what the others need not wait for
    if (prepared) {
      pruneCheckpoints(this.config.checkpointDir, this.config.keepCheckpoints);
      this.readySpare();
    }
    return true;
  }

  /**
   * The chunks of the state file this rank writes: its own when the state is sharded or large;
   * a small replicated state (any rank holds all of it) is written whole by the last working rank,
   * not the leader, which writes the manifest meanwhile. Spares write nothing.
   */
  private chunksToWrite(state: TrainingState): number[] {
    if (!this.working) return [];
    if (this.config.sharded || stateFileBytes(state) >= oneWriterBelowBytes) return [this.rank];
    return this.rank === this.size - 1 ? Array.from({ length: this.size }, (_, c) => c) : [];
  }

  /**
   * Every working rank's stripe digests (stripeDigests), at the leader; undefined elsewhere, false
   * when a failure interrupted their gather. Replicated state is the same on every rank, so the
   * leader computes them all from its own memory; sharded state has them gathered.
   */
  private async stripeDigests(state: TrainingState): Promise<string[][] | undefined | false> {
    const n = this.size;
    if (!this.config.sharded) return this.isLeader ? Array.from({ length: n }, (_, c) => stripeDigests(state, c, n)) : undefined;
    const mine = this.working ? Buffer.from(stripeDigests(state, this.rank, n).join(''), 'hex') : Buffer.alloc(0);
    const all = new Uint8Array(mine.length * n);
    if (!(await this.survives('checkpoint-gather', this.working ? () => this.workers!.allgather(new Uint8Array(mine), all) : async () => undefined))) return false;
    return this.isLeader ? Array.from({ length: n }, (_, c) => Buffer.from(all.subarray(mine.length * c, mine.length * (c + 1))).toString('hex').match(/.{16}/g)!) : undefined;
  }

  /** What a checkpoint of the current step records besides the tensors. */
  private checkpointMeta(reason: string): CheckpointMeta {
    return {
      step: this.step,
      ...this.source!.position(),
      reason,
      shards: this.config.shards,
      shard_map: this.map.toJSON(),
      seed: this.config.identity.seed as number,
      config: this.config.identity,
      config_sha256: this.configSha256,
      rng: { seed: this.config.identity.seed as number, kind: 'counter-based' },
      world_history: this.worldHistory,
    };
  }

  /**
   * A collective of the working ranks (of every live rank, `everyone`) and the vote of every live
   * rank, without recovering: the caller decides how to go on.
   */
  private async attempt(phase: Phase, run: () => Promise<void>, everyone = false): Promise<boolean> {
    const ok = await this.survives(phase, everyone || this.working ? run : async () => undefined);
    return (await this.vote(ok ? OK : 0)) === OK;
  }

  /**
   * Runs a collective; false when a failure interrupted it (noted as this step's failure). Any
   * other error passes through, and so does a failure with --on-failure none (it ends the job).
   */
  private async survives(phase: Phase, run: () => Promise<void>): Promise<boolean> {
    const started = now();
    try {
      await run();
      return true;
    } catch (error) {
      if (!isFailure(error) || this.config.onFailure === 'none') throw error;
      this.noteFailure(error, phase, now() - started);
      return false;
    }
  }

  /**
   * The end of the run: background readbacks stop, the ranks sum what they read back (bytesReadBack
   * then holds the job's total), the leader writes the results, and all vote that it did (a new
   * leader writes them otherwise).
   */
  async finish(write: () => void): Promise<void> {
    this.trainingDone = true;
    await Promise.all(this.readbacks.map((readback) => readback.stop()));
    for (;;) {
      this.at('final-write');
      if (this.config.onFailure !== 'none') {
        const mine = this.readBackUnreported();
        const unreported = Float64Array.of(mine);
        if (!(await this.attempt('final-write', () => this.workers!.allreduce(unreported, 'sum')))) {
          await this.recover();
          continue;
        }
        this.noteReadBackReported(unreported[0], mine);
      }
      if (this.isLeader) write();
      if (this.config.onFailure === 'none' || (await this.attempt('final-write', async () => undefined))) return;
      await this.recover();
    }
  }

  /** Frees the communicator (at exit); the leader removes the spare (or an uncommitted attempt). */
  async close(): Promise<void> {
    if (this.isLeader && this.config.spareCheckpoint) {
      await withDeadline(this.spare, this.config.commTimeoutMs, 'the spare checkpoint file\'s write').catch(() => undefined);
      removeStaging(this.config.checkpointDir, !this.checkpointDirWasThere);
    }
    await this.comm.free();
  }

  /**
   * The leader starts writing a spare state file for the next checkpoint (see checkpoint.ts) unless
   * one is in place or under way. Off the critical path: a failure to make one (a full disk) costs
   * only the spare, and the checkpoint then writes a new file.
   */
  private readySpare(): void {
    if (!this.isLeader || !this.config.spareCheckpoint || this.spareUnderWay) return;
    this.spareWriter ??= newStripeWriter();
    this.spareUnderWay = true;
    this.spare = readySpare(this.config.checkpointDir, stateFileBytes(this.source!.state()), this.spareWriter)
      .catch((error: Error) => this.observer.log(`no spare checkpoint file (a checkpoint will write a new one): ${error.message}`))
      .finally(() => { this.spareUnderWay = false; });
  }

  private rebuildSum(): void {
    const { onFailure, sumLength, add } = this.config;
    const previous = this.sum;
    this.sum = onFailure === 'exact' && this.workers ? new ShardSum(this.workers, this.map, sumLength, add, this.sumInBuckets ? ddpBuckets : oneBucket) : undefined;
    // a survivor's vectors for the step being retried stay valid: the parameters are untouched
    if (previous && this.sum) this.sum.carryFrom(previous, this.step);
  }

  /** Reads `shards` into memory, whole. */
  private async load(shards: number[]): Promise<void> {
    for (const [s, data] of await this.dataset.train.readShards(this.layout, shards)) this.held.set(s, data);
  }

  /**
   * Takes over `shards` as shards that load on demand and reads the record batches of the rows the
   * current (retried) step needs of them; the rest follows in the background once a collective
   * has committed. The bytes read from disk before returning.
   */
  private async readBackFirst(shards: number[]): Promise<number> {
    if (shards.length === 0) return 0;
    const readback = new Readback(this.dataset.train, this.layout, shards);
    for (const shard of readback.shards) this.held.set(shard.shard, shard);
    this.readbacks.push(readback);
    const rows = this.source!.stepRows(this.map, shards);
    await Promise.all([...rows].map(([s, r]) => this.ready(s, r)));
    const bytes = readback.bytesRead;
    this.awaitingCommit.push(readback);
    return bytes;
  }

  /** This rank's readback bytes not yet summed into bytesReadBack (background reads go on between sums). */
  private readBackUnreported(): number {
    return this.readbacks.reduce((sum, readback) => sum + readback.bytesRead, 0) - this.readBackReported;
  }

  /** A vote succeeded on the sum of every rank's unreported bytes, `sum`: this rank's `mine` are reported. */
  private noteReadBackReported(sum: number, mine: number): void {
    this.bytesReadBack += sum;
    this.readBackReported += mine;
  }
}
