// The world as the protocol sees it: the communicator of every live rank, the working ranks' (the
// same one unless hot spares wait), the shard map (who holds which shards), the leader, and the
// spares. It grows the world after a repair: spares first take the lost ranks' places, then ranks
// spawned for the rest (--respawn: launched, accepted once their MPI runs, merged once they are
// ready; a reserve, asleep since the launch, is woken instead while any is left), and it carries
// the join, in which the ranks already in the run tell the newcomers where it stands.
// Spares hold no shards: they only vote and receive each step's outcome, so that any of them can
// take a lost rank's place, and its shards, in the recovery.
import { crc64 } from '../base/checksum';
import { isFailure, wakeReserve, dismissReserves, type Communicator } from '../comm';
import { ShardMap } from '../data/shard-map';
import { withDeadline } from '../liveness/deadline';
import { ProtocolStop } from '../liveness/stop';
import { killDeclaredDead } from '../liveness/hangs';
import { goneFromHere, markGivenUp } from '../run/pids';
import type { Phase } from '../liveness/drills';
import type { ProtocolConfig, ProtocolObserver, StepPosition } from './contracts';
import { CARRY_ON, OK, SPAWN_NOT_UP, SPAWN_SOUND, SPAWN_WAITING, type Vote } from './vote';

const now = (): number => performance.now();

/**
 * A blocking MPI call (`name`) within `ms`: where it has not returned by then, the comm thread is
 * inside MPI for good, and `stuck` (given the deadline's error) decides what becomes of the rank;
 * an error the call returned is thrown as it is.
 */
function blockingCall<T>(call: Promise<T>, ms: number, name: string, stuck: (error: Error) => Promise<never>): Promise<T> {
  let returned = false;
  const tracked = call.finally(() => {
    returned = true;
  });
  return withDeadline(tracked, ms, name).catch((error: Error) => (returned ? Promise.reject(error) : stuck(error)));
}

/** A blocking call of the spawned ranks' admission: stuck, the job stops (ProtocolStop). */
function admissionCall<T>(call: Promise<T>, ms: number, name: string, ids: number[]): Promise<T> {
  return blockingCall(call, ms, name, (error) =>
    Promise.reject(new ProtocolStop('unrecoverable', `the admission of rank(s) ${ids.join(', ')} cannot finish: ${error.message}`)),
  );
}

/** What a joining rank learns of the world. */
export interface WorldJoinFields {
  owners: number[];
  worldInitial: number;
  nextId: number;
  respawnsLeft: number;
  /** the reserves by MPI_COMM_WORLD rank: [first, end), those not yet woken from next on */
  reserves: [number, number, number];
}

/** What the protocol's clients read of the world (the Manager's `world`). */
export type WorldView = Pick<
  Membership,
  | 'size'
  | 'rank'
  | 'working'
  | 'initialSize'
  | 'sparesLaunched'
  | 'spares'
  | 'worldRank'
  | 'liveRanks'
  | 'isLeader'
  | 'shardMap'
  | 'heldShards'
  | 'allreduce'
  | 'feedSpares'
>;

export class Membership {
  /** every live rank */
  private everyone: Communicator;
  /** the working ranks (null on a spare, and between a repair and the next formWorkers) */
  private workers: Communicator | null;
  private map: ShardMap;
  /** the working ranks at the start: how many the recovery keeps working while spares and respawns last */
  private worldInitial: number;
  /** the id the next spawned rank gets, and how many more may be spawned */
  private nextId: number;
  private respawnsLeft: number;
  /** the reserves: MPI_COMM_WORLD ranks [reserveFirst, reserveEnd), woken in order, those from reserveNext on not yet */
  private reserveFirst: number;
  private reserveNext: number;
  private reserveEnd: number;
  /**
   * ranks spawned beside training that have not joined yet: their ids, since when, whether this
   * rank launched them (with the port they connect to), and the link to them once accepted
   */
  private spawned?: { ids: number[]; started: number; root: boolean; port: string; woken: boolean; link?: Communicator };
  /** the rank that launched the last spawn, where a failure interrupted it */
  private failedSpawnRoot?: number;
  /** spawns in a row that lost the rank launching them */
  private spawnRootsLost = 0;

  constructor(
    private readonly config: Pick<
      ProtocolConfig,
      'shards' | 'spares' | 'respawn' | 'reserves' | 'launchJob' | 'joined' | 'commTimeoutMs' | 'pidsDir'
    >,
    world: Communicator,
    private readonly position: StepPosition,
    private readonly observer: ProtocolObserver,
    /** a drill point of the current step */
    private readonly enter: (phase: Phase) => void,
  ) {
    this.everyone = world;
    // a spawned rank learns the run's sizes and map at the join
    this.worldInitial = config.joined ? world.size : world.size - config.spares;
    const ids = [...world.worldRanks].sort((a, b) => a - b);
    this.map = ShardMap.initial(config.shards, ids.slice(0, this.worldInitial));
    this.workers = config.spares === 0 ? world : null;
    this.nextId = ids[ids.length - 1] + 1;
    this.respawnsLeft = config.respawn?.limit ?? 0;
    this.reserveFirst = this.reserveNext = config.reserves?.first ?? 0;
    this.reserveEnd = config.reserves?.end ?? 0;
  }

  /** The communicator of every live rank. */
  get comm(): Communicator {
    return this.everyone;
  }

  /** The working ranks' communicator (null on a spare). */
  get workerComm(): Communicator | null {
    return this.workers;
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

  /**
   * What a recovery from the world as it stands would hand this rank on the loss of one working
   * rank: on a spare, that rank's place (its shards whole); on a working rank, a share of its
   * shards, unless a spare waits to take them all or no other rank works beside it (none).
   */
  get recoveryShare(): 'place' | 'share' | 'none' {
    if (!this.working) return 'place';
    return this.spares.length > 0 || this.size === 1 ? 'none' : 'share';
  }

  /** The working ranks at the run's start. */
  get initialSize(): number {
    return this.worldInitial;
  }

  /** The job was launched with spares (--spares). */
  get sparesLaunched(): boolean {
    return this.config.spares > 0;
  }

  /** The live ranks waiting as spares, ascending. */
  get spares(): number[] {
    return this.liveRanks.filter((r) => !this.map.owners.includes(r));
  }

  /** This rank's id in the job. */
  get worldRank(): number {
    return this.everyone.worldRanks[this.everyone.rank];
  }

  /** World ranks of the live ranks, ascending. */
  get liveRanks(): number[] {
    return [...this.everyone.worldRanks].sort((a, b) => a - b);
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
    return this.everyone.worldRanks.indexOf(this.leaderId);
  }

  /** The shard map's owners still alive, ascending (a repair may just have lost some). */
  get liveWorkers(): number[] {
    const live = new Set(this.everyone.worldRanks);
    return this.map.ranks.filter((r) => live.has(r));
  }

  get shardMap(): ShardMap {
    return this.map;
  }

  /** This rank's shards, ascending. */
  get heldShards(): number[] {
    return this.map.shardsOf(this.worldRank);
  }

  /** `run` on a working rank; nothing on a spare (which still votes on it). */
  onWorkers(run: () => Promise<void>): () => Promise<void> {
    return this.working ? run : async () => undefined;
  }

  /** Allreduce over the working ranks (no vote: use it inside a collective the Manager votes on). */
  allreduce(buffer: Float32Array | Float64Array): Promise<void> {
    return this.workers!.allreduce(buffer, 'sum');
  }

  /**
   * Inside the step's collective, on every live rank: the spares receive the step's outcome from
   * the leader (`outcome`: the summed gradient and loss, or the updated parameters and loss), so
   * that any of them can take a working rank's place. Nothing to do without spares.
   */
  async feedSpares(outcome: Float32Array): Promise<void> {
    if (this.workers === this.everyone) return;
    await this.everyone.bcast(outcome, this.leaderRoot);
  }

  /** This rank's part of the working ranks' communicator (null on a spare), split from every live rank's. */
  async splitWorkers(): Promise<void> {
    if (this.workers) return;
    this.workers = await this.split();
  }

  private split(): Promise<Communicator | null> {
    const works = this.map.owners.includes(this.worldRank);
    return withDeadline(this.everyone.split(works ? 0 : -1, this.everyone.rank), this.config.commTimeoutMs, 'MPI_Comm_split');
  }

  /** The working ranks' communicator for the current map (voted); false when a failure interrupted it. */
  async formWorkers(vote: Vote): Promise<boolean> {
    if (this.spares.length === 0) this.workers = this.everyone;
    else {
      let part: Communicator | null = null;
      const ok = await vote.succeedsEverywhere('join', async () => {
        part = await this.split();
      });
      if (!ok) {
        await (part as Communicator | null)?.free().catch(() => undefined);
        return false;
      }
      this.workers = part;
    }
    this.observer.leader(this.isLeader);
    return true;
  }

  /**
   * This rank's collective failed: every live rank is to leave whatever call it waits in, on the
   * working ranks' communicator or on every rank's, now. A peer waiting on a rank that is alive
   * learns of a death only when a call of its own meets it, or at its deadline. The vote's
   * agreement and the repair's shrink still run on a revoked communicator.
   */
  async interruptPeers(): Promise<void> {
    const comms = new Set([this.workers, this.everyone].filter((comm): comm is Communicator => comm !== null));
    // a revoke that fails (synchronously too) changes nothing: the vote and the repair follow anyway
    await Promise.all(
      [...comms].map((comm) =>
        Promise.resolve()
          .then(() => comm.revoke())
          .catch(() => undefined),
      ),
    );
  }

  /** Before a repair: with spares, the working ranks' communicator goes too (formWorkers() makes the next). */
  async dropWorkers(): Promise<void> {
    if (this.workers !== this.everyone)
      await this.workers
        ?.revoke()
        .then(() => this.workers!.free())
        .catch(() => undefined);
    this.workers = null;
  }

  /** After a repair: the communicator of the survivors. */
  replaceComm(comm: Communicator): void {
    this.everyone = comm;
  }

  /** A rebalance: the shard map is `next` from now on; what moved to whom. */
  rebalance(next: ShardMap): Map<number, number[]> {
    const moved = this.map.movedTo(next);
    this.map = next;
    return moved;
  }

  /** Whether a rank lost now would have its place taken (a spare waits, or a respawn is left). */
  get canReplace(): boolean {
    return this.spares.length > 0 || (this.config.respawn !== undefined && this.respawnsLeft > 0);
  }

  /** Working places left open: the working ranks at the start less those alive that hold shards. */
  private get vacantPlaces(): number {
    return Math.max(0, this.worldInitial - this.liveWorkers.length);
  }

  /** Those of `joiners` that take working places (the first, as many as are open); the rest wait as spares. */
  workingJoiners(joiners: readonly number[]): number[] {
    return joiners.slice(0, this.vacantPlaces);
  }

  /** Spawned or woken ranks on their way, or reserves to wake, that will work when they join (the rest refill the spares). */
  get workersComing(): number {
    const reserves = Math.min(this.reserveEnd - this.reserveNext, this.respawnsLeft);
    return Math.min(this.spawnedWaiting.length + reserves, this.vacantPlaces);
  }

  /**
   * The lost ranks' shards go to `joiners` taking working places or to the survivors; the other
   * joiners wait as spares. What moved to whom.
   */
  handOver(joiners: number[]): Map<number, number[]> {
    const next = this.map.handOver(this.everyone.worldRanks, this.workingJoiners(joiners));
    const moved = this.map.movedTo(next);
    this.map = next;
    return moved;
  }

  /**
   * After a repair: the spares that take the lost working ranks' places now (a spawn under way is
   * given up: its link names ranks that may be gone); for the places left, while respawns last,
   * ranks are spawned to join once ready (see admitSpawned). Null when a failure interrupted the spawn.
   */
  async grow(vote: Vote): Promise<number[] | null> {
    const how = this.spawnedHow;
    const givenUp = await this.giveUpSpawn();
    if (givenUp.length > 0)
      this.observer.log(
        `step ${this.position.step}: ${how} rank(s) ${givenUp.join(', ')} given up before joining: the world changed first`,
      );
    if (this.position.trainingDone) return [];
    const joiners = this.spares.slice(0, this.vacantPlaces);
    const count = Math.min(this.vacantPlaces - joiners.length, this.respawnsLeft);
    if (count > 0 && !(await this.spawn(count, vote))) return null;
    return joiners;
  }

  /**
   * The spares used up or lost, and working places left open (reserves are woken one at a time),
   * while respawns last and no spawn is under way: ranks to spawn or wake at a step's end, which
   * join once ready. Not in the recovery, which a spare makes fast.
   */
  get placesToFill(): number {
    if (this.spawned || this.position.trainingDone) return 0;
    return Math.min(this.vacantPlaces + Math.max(0, this.config.spares - this.spares.length), this.respawnsLeft);
  }

  /** At a step's end: spawns or wakes the ranks that fill the places left (placesToFill); false when a failure interrupted it. */
  fillPlaces(vote: Vote): Promise<boolean> {
    return this.spawn(this.placesToFill, vote);
  }

  /** The ranks spawned and not yet joined (their ids). */
  get spawnedWaiting(): number[] {
    return this.spawned?.ids ?? [];
  }

  /** How the ranks on their way came: 'woken' (a reserve) or 'spawned'. */
  get spawnedHow(): 'woken' | 'spawned' {
    return this.spawned?.woken ? 'woken' : 'spawned';
  }

  /**
   * Spawns `count` ranks, which start beside training, or wakes one reserve while any is left:
   * false when a failure interrupted it. Where spawning is not possible, says so once and turns
   * respawning off. The leader launches them (PMIx_Spawn: a few ms; a wake: one message; the others
   * wait for it in the vote); the ranks accept them at a later step's end, once their MPI runs
   * (acceptSpawned), and merge with them once they are ready. A reserve that died asleep never
   * comes up, and is given up as a spawned rank lost before joining is.
   */
  private async spawn(count: number, vote: Vote): Promise<boolean> {
    const respawn = this.config.respawn!;
    const step = this.position.step;
    // a launch that takes its launcher with it (its spawn never returns: mpirun's host cut off?)
    // would cost a rank at each try: after two in a row, every rank alike goes on without
    if (this.failedSpawnRoot !== undefined)
      this.spawnRootsLost = this.everyone.worldRanks.includes(this.failedSpawnRoot) ? 0 : this.spawnRootsLost + 1;
    this.failedSpawnRoot = undefined;
    if (this.spawnRootsLost >= 2) {
      this.respawnOff(step, now(), 'the last 2 spawns each lost the rank that launched them (the runtime unreachable?)');
      return true;
    }
    // every rank alike: a reserve is woken in launch order, whatever comes of it
    const reserve = this.reserveNext < this.reserveEnd ? this.reserveNext++ : undefined;
    if (reserve !== undefined) count = 1;
    const firstId = this.nextId;
    const ids = Array.from({ length: count }, (_, i) => firstId + i);
    this.nextId += count;
    this.enter('spawn');
    const started = now();
    const root = this.everyone.rank === 0;
    let port = '';
    let impossible: string | undefined;
    const ok = await vote.completes('spawn', async () => {
      this.enter('spawning'); // the drill point while the leader launches them
      if (!root) return;
      const name = reserve !== undefined ? 'the wake of a reserve' : 'PMIx_Spawn';
      const ms = this.config.commTimeoutMs;
      try {
        // stuck, this rank leaves as failed: the launch is its own, not the others'
        port = await blockingCall(
          reserve !== undefined
            ? wakeReserve(reserve, respawn.args(firstId, step))
            : this.everyone.spawn(respawn.command, respawn.args(firstId, step), count),
          ms,
          name,
          () => this.leaveStuck(ids, `step ${step}: ${name} did not return within ${ms} ms`),
        );
      } catch (error) {
        if (isFailure(error)) throw error;
        impossible = (error as Error).message;
      }
    });
    const agreed = await vote.agree((ok && !impossible ? OK : 0) | (impossible ? 0 : CARRY_ON));
    if (agreed !== null && (agreed & OK) !== 0) {
      this.spawnRootsLost = 0;
      this.respawnsLeft -= count;
      this.spawned = { ids, started: now(), root, port, woken: reserve !== undefined };
      this.observer.event({
        event: 'spawn',
        step,
        ranks: ids,
        duration_ms: now() - started,
        ...(reserve !== undefined ? { reserve } : {}),
      });
      return true;
    }
    // its processes may be starting even where the leader failed after launching them
    await this.leaveSpawned({ ids });
    if (agreed === null || (agreed & CARRY_ON) !== 0) {
      this.failedSpawnRoot = this.everyone.worldRanks[0];
      return false;
    }
    this.respawnOff(
      step,
      started,
      `${impossible ?? 'not possible on another rank'} (no host can take it, or an MPI without spawn support)`,
    );
    return true;
  }

  /** No rank can be spawned (`why`): one event and line, and the survivors go on without. */
  private respawnOff(step: number, started: number, why: string): void {
    this.respawnsLeft = 0;
    this.observer.event({ event: 'spawn', step, ranks: [], error: why, duration_ms: now() - started });
    this.observer.log(`step ${step}: cannot spawn a rank to replace the lost: ${why}; going on with the survivors, --respawn off`);
  }

  /**
   * The launch of `ids` did not return (`what`): the comm thread is inside that blocking call for
   * good (the runtime unreachable: its host cut off?), so no later MPI call of this rank can run, and
   * none of its deadlines would be kept. It leaves as a failed rank (a line in its log), which its
   * peers recover from as from a kill; the ranks it was launching are given up.
   */
  private async leaveStuck(ids: number[], what: string): Promise<never> {
    await this.leaveSpawned({ ids });
    this.observer.log(`${what} (the runtime unreachable?): this rank's MPI is stuck in it; leaving as failed`);
    process.kill(process.pid, 'SIGKILL');
    return new Promise<never>(() => undefined);
  }

  /**
   * Before a step's vote, this rank's word on the spawned ranks (bits of the vote's flag):
   * SPAWN_NOT_UP stays set unless this rank (the spawn's root) finds them all running MPI and
   * waiting to be accepted; SPAWN_WAITING stays set unless it finds them all ready to join, or one
   * of them lost (dead, or not ready within the respawn's give-up time: stopped?); SPAWN_SOUND stays
   * set unless one is lost. With --respawn-join wait the root waits until one of these is so.
   */
  async spawnWord(): Promise<number> {
    const spawned = this.spawned;
    const none = SPAWN_WAITING | SPAWN_SOUND | SPAWN_NOT_UP;
    if (!spawned?.root) return none;
    // --respawn-join wait: the root holds the vote (and with it every rank) until they are ready
    const wait = this.config.respawn!.join === 'wait';
    for (;;) {
      try {
        if (!spawned.link && (await this.everyone.spawnedUp(spawned.port, spawned.ids.length))) return SPAWN_WAITING | SPAWN_SOUND;
        if (spawned.link && (await spawned.link.spawnedReady())) return SPAWN_SOUND | SPAWN_NOT_UP;
      } catch (error) {
        if (!isFailure(error)) throw error;
        return 0;
      }
      // MPI does not see one die before it has talked to it: its pid file does, on this host
      if (spawned.ids.some((id) => goneFromHere(this.config.pidsDir, id))) return 0;
      if (now() - spawned.started > this.config.respawn!.giveUpMs) return 0;
      if (!wait) return none;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  }

  /**
   * At a step's end, once the vote said the spawned ranks run MPI: the link to them
   * (MPI_Comm_accept, voted), through which they say they are ready; false when a failure
   * interrupted it (they are given up).
   */
  async acceptSpawned(vote: Vote): Promise<boolean> {
    const spawned = this.spawned!;
    const started = now();
    let link: Communicator | undefined;
    // every rank alive first: MPI_Comm_accept waits for good for a rank lost before it, which
    // PMIx_Connect counts on (one lost inside it, in its few ms, still leaves the others there)
    const alive = (await vote.agree(OK)) !== null;
    const ok =
      alive &&
      (await vote.succeedsEverywhere('accept', async () => {
        // a process lost inside MPI_Comm_connect (or whose connect failed: across hosts, Open MPI
        // 5.0's connect/accept is not supported) leaves MPI_Comm_accept, and with it the comm
        // thread, waiting for it for good: the job stops after the comm deadline
        const accepting = this.everyone.accept(spawned.port, spawned.ids.length, spawned.ids[0]);
        link = await admissionCall(accepting, this.config.commTimeoutMs, 'MPI_Comm_accept', spawned.ids);
      }));
    if (!ok) {
      this.spawned = undefined;
      await this.leaveSpawned({ ids: spawned.ids, link });
      return false;
    }
    spawned.link = link;
    this.observer.event({ event: 'accept', step: this.position.step, ranks: spawned.ids, duration_ms: now() - started });
    return true;
  }

  /**
   * At a step's end, once the vote said the spawned ranks are ready: the communicator grown by
   * them (voted), their ids; null when a failure interrupted the merge.
   */
  async admitSpawned(vote: Vote): Promise<number[] | null> {
    const spawned = this.spawned!;
    this.spawned = undefined;
    let merged: Communicator | undefined;
    const ok = await vote.succeedsEverywhere('admit', async () => {
      // the addon bounds its waits for "ready" and the agreement before the merge; a failure after
      // the agreement leaves MPI_Intercomm_merge, and with it the comm thread, blocked for good
      merged = await admissionCall(spawned.link!.merge(), 3 * this.config.commTimeoutMs, 'MPI_Intercomm_merge', spawned.ids);
    });
    if (!ok) {
      await this.leaveSpawned(spawned);
      await merged
        ?.revoke()
        .then(() => merged!.free())
        .catch(() => undefined);
      return null;
    }
    await spawned.link!.free().catch(() => undefined);
    // the working ranks' communicator is made anew for the grown world (formWorkers)
    const old = this.everyone;
    if (this.workers !== old) await this.workers?.free();
    this.workers = null;
    this.everyone = merged!;
    await old.free();
    this.observer.event({ event: 'admit', step: this.position.step, ranks: spawned.ids, waited_ms: now() - spawned.started });
    return spawned.ids;
  }

  /**
   * The spawned ranks are given up (a failure changed the world, training ended, or one of them
   * was lost): see leaveSpawned. Their ids; [] when none waited.
   */
  async giveUpSpawn(): Promise<number[]> {
    const spawned = this.spawned;
    if (!spawned) return [];
    this.spawned = undefined;
    await this.leaveSpawned(spawned);
    return spawned.ids;
  }

  /**
   * The spawned ranks are marked as given up and those found on this host killed (one still
   * loading, with no pid file yet, finds the mark once it writes one, and leaves), then the link to
   * them (if any) is freed; one elsewhere leaves once its merge runs past its deadline. Not
   * revoked: a revoke reaches out to every process of the link, and MPI waits without end for the
   * address of one that died before it ever talked to this side.
   */
  private async leaveSpawned(spawned: { link?: Communicator; ids: number[] }): Promise<void> {
    markGivenUp(this.config.pidsDir, spawned.ids);
    killDeclaredDead(this.config.pidsDir, spawned.ids);
    await spawned.link?.free().catch(() => undefined);
  }

  /**
   * At the end, on every rank of the launch's own job (its MPI_COMM_WORLD holds the reserves; a
   * spawned rank's does not): every reserve is dismissed (mpirun waits for them). One woken is
   * passed over (a reserve takes the message only asleep), and so is one gone, but one whose wake a
   * failure interrupted may still sleep, and any live rank of the job may be left to tell it. A
   * reserve with no live process before it in the launch leaves by itself.
   */
  async dismissReserves(): Promise<void> {
    if (!this.config.launchJob || this.reserveFirst === this.reserveEnd) return;
    const all = Array.from({ length: this.reserveEnd - this.reserveFirst }, (_, i) => this.reserveFirst + i);
    this.reserveFirst = this.reserveNext = this.reserveEnd;
    await dismissReserves(all);
  }

  /**
   * The join's transfer, on every live rank, voted: the leader sends `sent` (where the run stands)
   * and then `buffers` (the state at the step's start) in place, unless every rank holds the
   * leader's already: a hot spare fed every step does, a spawned newcomer does not, and a digest of
   * each rank's buffers against the leader's decides (one small allreduce instead of the state's
   * bytes). `received` runs on every rank between the two. The message, the bytes of state sent,
   * and whether a rank that held the run's state (`holdsState`: a working rank or a spare) held another (the
   * transfer made it the leader's); null when a failure interrupted it.
   */
  async transferJoin<Message>(
    vote: Vote,
    sent: Message,
    buffers: Float32Array[],
    holdsState: boolean,
    received: (message: Message) => void,
  ): Promise<{ message: Message; bytes: number; diverged: boolean } | null> {
    const root = this.leaderRoot;
    let message: Message | undefined;
    let bytes = 0;
    let diverged = false;
    const ok = await vote.succeedsEverywhere('join', async () => {
      const isRoot = this.everyone.rank === root;
      const encoded = isRoot ? new TextEncoder().encode(JSON.stringify({ sent, digest: crc64(...buffers) })) : new Uint8Array(0);
      const length = Int32Array.of(encoded.length);
      await this.everyone.bcast(length, root);
      const text = isRoot ? encoded : new Uint8Array(length[0]);
      await this.everyone.bcast(text, root);
      const { sent: delivered, digest } = JSON.parse(new TextDecoder().decode(text)) as { sent: Message; digest: string };
      message = delivered;
      received(message);
      // a rank that holds no state lacks it: its buffers, never written, need no digest
      const differs = !isRoot && (!holdsState || crc64(...buffers) !== digest);
      // [some rank lacks the state, some rank that held it holds another]
      const lacking = Int32Array.of(differs ? 1 : 0, differs && holdsState ? 1 : 0);
      await this.everyone.allreduce(lacking, 'max');
      diverged = lacking[1] === 1;
      if (lacking[0] === 0) return;
      // sent to the ranks that lack it alone: a broadcast through every rank costs hops through
      // ranks that hold it already, on shared cores a wait for each to run (4 ranks, a spare and a
      // joiner on 2 cores, lenet's 6.9 MB: a join took 44-61 ms so, against 32-36 sent alone)
      const part = await withDeadline(
        this.everyone.split(isRoot || differs ? 0 : -1, isRoot ? 0 : 1 + this.everyone.rank),
        this.config.commTimeoutMs,
        'MPI_Comm_split',
      );
      try {
        if (part) for (const buffer of buffers) await part.bcast(buffer, 0);
      } finally {
        await part?.free().catch(() => undefined);
      }
      bytes = buffers.reduce((n, buffer) => n + buffer.byteLength, 0);
    });
    return ok ? { message: message!, bytes, diverged } : null;
  }

  /** What a joining rank learns of the world. */
  joinFields(): WorldJoinFields {
    return {
      owners: this.map.toJSON(),
      worldInitial: this.worldInitial,
      nextId: this.nextId,
      respawnsLeft: this.respawnsLeft,
      reserves: [this.reserveFirst, this.reserveNext, this.reserveEnd],
    };
  }

  /** A spare about to join takes the map the working ranks hold (a rebalance changed theirs, not its). */
  takeMap(owners: number[]): void {
    this.map = ShardMap.fromOwners(owners);
  }

  /** A joining rank takes up the world it was told of. */
  takeJoinFields(fields: WorldJoinFields): void {
    this.map = ShardMap.fromOwners(fields.owners);
    [this.worldInitial, this.nextId, this.respawnsLeft] = [fields.worldInitial, fields.nextId, fields.respawnsLeft];
    [this.reserveFirst, this.reserveNext, this.reserveEnd] = fields.reserves;
  }

  /** Frees the communicator (at exit). */
  free(): Promise<void> {
    return this.everyone.free();
  }
}
