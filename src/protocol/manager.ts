// The fault-tolerance protocol's one owner (torchft's Manager): it owns the step counter, runs every
// collective of the program through one path, "collective, then vote", so that no survivor is ever
// left in a different collective from the others, and is the only one to advance the step (commit,
// which also takes the stop a SIGTERM asked for and writes the periodic checkpoints). A failed vote
// sends every survivor into the same recovery before the caller retries: repair (repair.ts), the
// lost ranks' places taken by spares or spawned ranks (membership.ts), their shards handed over and
// read back (shards.ts), the sum and sharded state remade for the new world (sum-and-state.ts), the
// JIT checkpoint (checkpointing.ts). Every --verify-every K steps it checks the step for silent data
// corruption (verification.ts): a rank named corrupt is evicted as failed, and the survivors roll
// back to the last verified state and replay from there. With --rebalance auto it moves shards off
// slow ranks at step ends, and evicts a rank that stays far slower (balance.ts). It also ends the
// run: the final write, voted like the rest, with the job's readback total. See docs/architecture.md.
//
// A client makes few calls: start(source), then per step enter(phase) at its drill points,
// exchange(collective) (false: recovered, compute the step again), at a checked step verify(digests)
// (false: rolled back, compute the step it names), commit(report); finish(write).
import { type Communicator } from '../comm';
import * as fs from 'node:fs';
import { removeCheckpointsAfter, type CheckpointMeta, type TrainingState } from '../checkpoint/checkpoint';
import type { Dataset } from '../data/dataset';
import type { ShardLayout } from '../data/shard-layout';
import type { ShardData } from '../data/split';
import { withDeadline } from '../liveness/deadline';
import type { BitFlip, FaultInjector, FlipTarget, Phase } from '../liveness/drills';
import { beat, killDeclaredDead } from '../liveness/hangs';
import { readPidFile } from '../run/pids';
import type { ShardedState } from '../sharding/sharded-state';
import { Checkpointing } from './checkpointing';
import type { Failure, ProtocolConfig, ProtocolObserver, ResumePoint, StateSource, StepPosition } from './contracts';
import { Join } from './join';
import { Membership, type WorldView } from './membership';
import { WorldRepair } from './repair';
import type { ShardSum } from '../sharding/shard-sum';
import { HeldShards } from './shards';
import { ProtocolStop } from '../liveness/stop';
import { SumAndState } from './sum-and-state';
import { Balancer, ShardTimes, type BalanceDecision } from './balance';
import { CARRY_ON, OK, SPAWN_NOT_UP, SPAWN_SOUND, SPAWN_WAITING, Vote } from './vote';
import {
  chunkCopiesDiffer,
  digestWords,
  encodeChunkCopies,
  encodeRecord,
  firstRound,
  gatheredDigest,
  recordWords,
  secondRound,
  spotAssignments,
  VerifiedState,
  stateDigest,
  type CheckFinding,
  type GradientDigests,
  type SpotAssignment,
} from './verification';

const now = (): number => performance.now();

/** What a step's end does with the ranks spawned beside training: accept them, merge with them, or give them up. */
type SpawnedDue = 'accept' | 'admit' | 'lost';

/** What a step's vote (its agreed flag) says is due for the spawned ranks, if anything. */
function spawnedDue(agreed: number): SpawnedDue | undefined {
  if ((agreed & SPAWN_WAITING) === 0) return (agreed & SPAWN_SOUND) !== 0 ? 'admit' : 'lost';
  return (agreed & SPAWN_NOT_UP) === 0 ? 'accept' : undefined;
}

/** A recovery's readback, reported once the next step's collective, which sums its counts over the working ranks, is voted on. */
interface ReadbackReport {
  /** the step retried, or at whose start ranks joined */
  step: number;
  /** the shards read back */
  shards: number[];
  lost: number[];
  joined: number[];
  /** those of `joined` that wait as spares (they refill them) */
  joinedAsSpares: number[];
  /** this rank's: bytes read before the step, and the time it took */
  readBeforeRetry: number;
  readMs: number;
  /** [bytes read before the step, readback bytes not yet reported]: this rank's, then (summed) every working rank's */
  counts: Float64Array;
  /** this rank's unreported bytes in counts */
  mine: number;
  summed: Promise<void>;
  /** a failure was recovered (false: ranks joined) */
  retried: boolean;
  world: number;
  spares: number;
  /** spawned ranks on their way */
  coming: number[];
  /** how they came: woken reserves or spawned ranks */
  comingHow: 'woken' | 'spawned';
}

export class Manager implements StepPosition {
  private currentStep = 0;
  private done = false;
  readonly failures: Failure[] = [];
  /** silent data corruptions the checks found */
  corruptionsFound = 0;
  readonly worldHistory: CheckpointMeta['world_history'] = [];
  private readonly membership: Membership;
  private readonly vote: Vote;
  private readonly repairs: WorldRepair;
  private readonly shards: HeldShards;
  private readonly checkpoints: Checkpointing;
  private readonly sumState: SumAndState;
  private source?: StateSource;
  private readonly joining: Join;
  /** this rank asks to stop (SIGTERM), and the ranks agreed to stop after the step being committed */
  private stopRequested = false;
  private stopAgreed = false;
  /** when the current try at the step began its computation (a retried step's duration is reported) */
  private tryStarted = now();
  /** the state of the last step that passed a check (--verify-every) */
  private readonly verified: VerifiedState;
  /** --rebalance auto: this rank's compute time per shard, and the decisions every rank draws from everyone's */
  readonly shardTimes?: ShardTimes;
  private readonly balancer?: Balancer;
  /** what the committed step's times call for, done at the step's end */
  private balanceDue?: BalanceDecision;
  /** the step's vote found the ranks spawned beside training ready (admit) or one of them lost: done at the step's end */
  private spawnedDue?: SpawnedDue;
  /** what the last recovery read back: summed with the next step's collective, reported at its vote */
  private readbackReport?: ReadbackReport;

  constructor(
    private readonly config: ProtocolConfig,
    world: Communicator,
    dataset: Dataset,
    layout: ShardLayout,
    private readonly observer: ProtocolObserver,
    private readonly faults: FaultInjector,
  ) {
    this.currentStep = config.joinStep ?? 0;
    this.verified = new VerifiedState(!config.sharded);
    if (config.rebalance && config.onFailure === 'exact') {
      this.shardTimes = new ShardTimes(config.shards);
      this.balancer = new Balancer(config.rebalance);
    }
    this.membership = new Membership(config, world, this, observer, this.enter);
    this.vote = new Vote(
      config.onFailure,
      () => this.membership.comm,
      this,
      observer,
      () => this.repairs.killStopped(),
    );
    this.repairs = new WorldRepair(config, this.membership, this.vote, this, this, observer, this.enter);
    this.shards = new HeldShards(dataset, layout, () => this.membership.worldRank);
    this.checkpoints = new Checkpointing(config, this.membership, this.vote, this, this, observer, this.enter);
    this.sumState = new SumAndState(config, this.membership, observer);
    this.joining = new Join(config.joined, {
      world: this.membership,
      vote: this.vote,
      shards: this.shards,
      checkpoints: this.checkpoints,
      sumState: this.sumState,
      verified: config.verifyEvery > 0 ? this.verified : undefined,
      history: this,
      observer,
      enter: this.enter,
      pidsDir: config.pidsDir,
      diverged: (step) => this.joinDiverged(step),
    });
  }

  /** The step being worked on: the protocol's, which only commit() advances (and a join sets). */
  get step(): number {
    return this.currentStep;
  }

  /** Training has ended (its last step committed): a recovery no longer reads back or checkpoints. */
  get trainingDone(): boolean {
    return this.done;
  }

  /** The world as it stands: working ranks, this rank's place, the leader, spares, the shard map. */
  get world(): WorldView {
    return this.membership;
  }

  /** Whether the current step is being retried after a failure. */
  get retrying(): boolean {
    return this.vote.retrying;
  }

  /** Whether exact mode's sum overlaps the backward pass (the computation reports its progress to it). */
  get overlap(): boolean {
    return this.config.overlap;
  }

  /** The exact mode's shard-ordered sum over the current communicator and map. */
  get shardSum(): ShardSum {
    return this.sumState.shardSum;
  }

  /** The sharded optimizer state (--optimizer-state sharded), on a working rank. */
  get shardedState(): ShardedState | undefined {
    return this.sumState.shardedState;
  }

  /** Bytes read back from disk by every rank, as of the last recovery or the final write. */
  get bytesReadBack(): number {
    return this.shards.bytesReadBack;
  }

  /** The newest checkpoint this run committed. */
  get lastCheckpoint(): string | null {
    return this.checkpoints.lastCheckpoint;
  }

  /**
   * Whether the current step is checked for silent data corruption: every --verify-every K-th step
   * while training, and the last, so that no corruption since the last check reaches the results.
   */
  get checking(): boolean {
    const every = this.config.verifyEvery;
    if (every <= 0 || this.done || this.config.onFailure !== 'exact') return false;
    return this.currentStep % every === 0 || this.source!.lastStep();
  }

  /** The current check's number, which says who recomputes whose shard (the last step's: the next K-th step's). */
  private get checkNumber(): number {
    return Math.ceil(this.currentStep / this.config.verifyEvery);
  }

  /** At a checked step, the shard of another working rank that this rank recomputes (none: undefined). */
  spotShard(): number | undefined {
    return this.spotAssignment()?.shard;
  }

  /** This rank's part of the current check's rotation: whose shard it recomputes, and which. */
  private spotAssignment(): SpotAssignment | undefined {
    return spotAssignments(this.membership.shardMap, this.checkNumber).find((a) => a.checker === this.membership.worldRank);
  }

  /** Resolves to shard s with `rows` in memory, read from disk when another rank holds it (a check recomputes it). */
  checkedShard(s: number, rows: Int32Array): Promise<ShardData> {
    return this.shards.anyShard(s, rows);
  }

  /** Shard s, which this rank holds. */
  shard(s: number): ShardData {
    return this.shards.shard(s);
  }

  /** Resolves once `rows` of shard s are in memory (a shard being read back reads them first); rejects on bad data. */
  ready(s: number, rows: Int32Array): Promise<void> {
    return this.shards.ready(s, rows);
  }

  /** A flip or corrupt drill's bit to flip now in what `phase` holds (`length` floats; `salt`: which of several; `target`: an update's params or state); undefined: none. */
  flipAt(phase: 'compute' | 'collective' | 'update', length: number, salt?: number, target?: FlipTarget): BitFlip | undefined {
    return this.faults.flipAt(this.currentStep, phase, length, salt, target);
  }

  /** How many times slower a slow drill makes this rank compute at the current step (1: none). */
  slowFactor(): number {
    return this.faults.slowFactor(this.currentStep);
  }

  /** The current step enters `phase`: a drill point, and a sign of life for the watchdog. */
  readonly enter = (phase: Phase): void => {
    // a try at the step begins with its computation (a retried step's event reports the try's time)
    if (phase === 'compute') this.tryStarted = now();
    beat();
    this.faults.at(this.currentStep, phase);
  };

  /** SIGTERM: every rank learns of it at the next step's vote, and the step's commit checkpoints and stops. */
  requestStop(): void {
    this.stopRequested = true;
  }

  /**
   * Reads this rank's shards and, when resuming at `resume`, votes that every rank restored the
   * checkpoint. A spawned rank instead joins the recovery the ranks that spawned it are in.
   */
  async start(source: StateSource, resume?: ResumePoint): Promise<void> {
    this.source = source;
    if (resume) {
      this.currentStep = resume.step;
      this.worldHistory.push(...resume.worldHistory);
    }
    if (this.config.joined) {
      await this.recover();
      this.checkpoints.ready(source, false);
      return;
    }
    if (this.config.onFailure === 'exact') {
      const canOverlap = Int32Array.of(this.config.overlap ? 1 : 0);
      await withDeadline(this.membership.comm.allreduce(canOverlap, 'min'), this.config.commTimeoutMs, 'MPI_Allreduce');
      this.sumState.inBuckets = canOverlap[0] === 1;
    }
    await this.membership.splitWorkers();
    this.observer.leader(this.membership.isLeader);
    await this.shards.load(this.membership.heldShards);
    this.sumState.rebuildSum(this.currentStep);
    this.sumState.makeShardedState(source.initialState.bind(source));
    this.worldHistory.push({ step: this.currentStep, world: this.membership.size, lost: [] });
    // the start is verified by construction: the seed's init, or a checkpoint whose digests were checked
    if (this.config.verifyEvery > 0) {
      this.verified.keep(source.state(), this.currentStep);
      this.sumState.shardedState?.keepVerified();
    }
    this.checkpoints.ready(source, true);
    if (resume) while (!(await this.agreeOn('resume', async () => undefined)));
  }

  /**
   * The step's collective (`run`: the sum, the spares fed) and the vote on it, which also carries
   * this rank's request to stop. True: commit the step. False: the recovery has run; compute the
   * same step again on the repaired world. Errors that are not failures pass through.
   */
  async exchange(run: () => Promise<void>): Promise<boolean> {
    const committed = await this.collectiveThenVote('collective', run, this.stopRequested);
    // every working rank holds the same sum, and with it every shard's time: the same decision on each
    if (committed && this.balancer && this.membership.working)
      this.balanceDue = this.balancer.observe(this.shardSum.sidebandTotal, this.membership.shardMap, this.membership.canReplace);
    return committed;
  }

  /** Any other collective of every live rank (`phase` names it: evaluation, resume) and the vote on it; false: recovered, run it again. */
  agreeOn(phase: Phase, run: () => Promise<void>): Promise<boolean> {
    return this.collectiveThenVote(phase, run, false);
  }

  private async collectiveThenVote(phase: Phase, run: () => Promise<void>, stop: boolean): Promise<boolean> {
    this.enter(phase);
    const report = phase === 'collective' ? this.readbackReport : undefined;
    const ok = await this.vote.completes(
      phase,
      report
        ? async () => {
            await report.summed;
            await run();
          }
        : run,
    );
    if (this.config.onFailure === 'none') return ok;
    if (!ok) await this.membership.interruptPeers();
    if (phase === 'collective') this.enter('agree');
    // a step's vote also says whether the ranks spawned beside training are ready to join
    const spawnWord = phase === 'collective' ? await this.membership.spawnWord() : SPAWN_WAITING | SPAWN_SOUND | SPAWN_NOT_UP;
    const agreed = await this.vote.agree((ok ? OK : 0) | (stop ? 0 : CARRY_ON) | spawnWord);
    if (agreed !== null && (agreed & OK) !== 0) {
      if (report) this.reportReadback(report);
      this.shards.committed();
      if ((agreed & CARRY_ON) === 0) this.stopAgreed = true;
      // (only the step's own vote says it: a later one in the step, a check's or an evaluation's, would wipe it)
      if (phase === 'collective') this.spawnedDue = spawnedDue(agreed);
      return true;
    }
    await this.recover();
    return false;
  }

  /**
   * The check of a checked step, after its collective committed and before its update: every live
   * rank's digests (its state's, and `gradients`: its held shards', the one it recomputed) are gathered
   * and compared (verification.ts); a gradient two ranks disagree on is recomputed by a third
   * (`recompute(shard)`: its digest, computed now by this rank). True: the check passed, and the
   * state at this step's start is kept as the last verified one. False: a failure interrupted the
   * check (recovered: compute the step again), or a corruption was found, its suspect evicted as
   * failed and the state rolled back to the last verified step, which is now the step to compute.
   * Throws ProtocolStop ('corruption') where nobody can be named or --on-corruption is stop.
   */
  async verify(gradients: GradientDigests, recompute: (shard: number) => Promise<string>, final = false): Promise<boolean> {
    const world = this.membership;
    const step = this.currentStep;
    const shards = this.config.shards;
    const sharded = this.sumState.shardedState;
    // sharded state: every working rank's chunk, and the copies of it that peers keep (a step's
    // start sends them: after the last update, `final`, they are the step before's)
    const chunks = this.config.sharded && !final ? world.size : 0;
    const words = recordWords(shards, chunks);
    const assigned = this.spotAssignment();
    const spot = gradients.spot !== undefined && assigned !== undefined ? { ...assigned, digest: gradients.spot } : undefined;
    const state = this.stepStartState();
    const mine = encodeRecord(
      {
        shards: gradients.shards,
        spot,
        state: stateDigest(state, !this.config.sharded),
        chunks: final ? undefined : sharded?.chunkDigests(),
      },
      shards,
      chunks,
    );
    let gathered = new Int32Array(0);
    let ranks: number[] = [];
    const first = await this.agreeOn('verify', async () => {
      ranks = [...world.comm.worldRanks];
      gathered = new Int32Array(ranks.length * words);
      await world.comm.allgather(mine, gathered);
    });
    if (!first) return false;
    let finding = firstRound(ranks, gathered, shards, 'state', chunks);
    if (finding.unattributable === undefined && finding.disputes.length > 0) {
      const { disputes } = finding;
      const thirds = new Int32Array(2 * disputes.length);
      for (const [i, dispute] of disputes.entries())
        if (dispute.third === world.worldRank) thirds.set(digestWords(await recompute(dispute.shard)), 2 * i);
      const all = new Int32Array(ranks.length * thirds.length);
      if (!(await this.agreeOn('verify', () => world.comm.allgather(thirds, all)))) return false;
      finding = secondRound(
        finding,
        disputes.map((dispute, i) => gatheredDigest(all, ranks.indexOf(dispute.third!), thirds.length, 2 * i)),
      );
    }
    if (finding.unattributable === undefined && finding.suspects.size === 0) {
      if (final) return true;
      this.verified.keep(state, step);
      sharded?.keepVerified();
      return true;
    }
    await this.corrupted(finding);
    return false;
  }

  /**
   * After the last step, where the run checks: the state the results are made of, which the last
   * step's own check (before its update) did not see. False: a corruption was found, and the state
   * rolled back to the last verified one (that step's start), which is to be computed again; a
   * failure during the check is recovered from and the check made again.
   */
  private async checkFinalState(): Promise<boolean> {
    if (this.config.verifyEvery <= 0 || this.config.onFailure !== 'exact' || !this.source!.done()) return true;
    const noGradient = (): Promise<string> => Promise.reject(new Error('the final check recomputes no gradient'));
    while (this.source!.done()) if (await this.verify({ shards: new Map() }, noGradient, true)) return true;
    return false;
  }

  /** The state at the current step's start: with sharded state the step's update has already put the new parameters in place, before the vote. */
  private stepStartState(): TrainingState {
    const state = this.source!.state();
    const sharded = this.sumState.shardedState;
    return sharded ? { ...state, params: sharded.stepStartParams() } : state;
  }

  /**
   * A check found corruption: one event and line; with --on-corruption evict and a rank named, the
   * suspects leave (each kills itself, as a failed rank would be gone), the others roll back to the
   * last verified state, drop the checkpoints written since, and recover as from any failure.
   */
  private async corrupted(finding: CheckFinding): Promise<void> {
    const world = this.membership;
    const step = this.currentStep;
    const suspects = finding.involved ?? [...finding.suspects.keys()].sort((a, b) => a - b);
    const evict = finding.unattributable === undefined && this.config.onCorruption === 'evict';
    const back = this.verified.step;
    this.corruptionsFound += 1;
    this.observer.event({
      event: 'corruption',
      step,
      ranks: suspects,
      hosts: suspects.map((rank) => readPidFile(this.config.pidsDir, rank)?.host ?? null),
      differed: suspects.map((rank) => finding.suspects.get(rank) ?? null),
      action: evict ? 'evict' : 'stop',
      rolled_back: evict ? step - back : 0,
      ...(finding.unattributable === undefined ? {} : { unattributable: finding.unattributable }),
    });
    const named = suspects.map((rank) => `rank ${rank} (${finding.suspects.get(rank)})`).join(', ');
    if (!evict)
      this.stopForCorruption(
        `silent data corruption found at step ${step}: ${finding.unattributable ?? `${named} corrupt (--on-corruption stop)`}; stopping`,
      );
    const line = `step ${step}: silent data corruption: evicting ${named}; rolling back to step ${back}, the last verified, and replaying ${step - back} step(s)`;
    const error = new Error(`silent data corruption at step ${step}`);
    error.name = 'SilentDataCorruption';
    await this.evict([...finding.suspects.keys()], `for silent data corruption at step ${step}`, line, error, 'verify', () =>
      this.rollBackToVerified(world.liveRanks.find((r) => !finding.suspects.has(r)) === world.worldRank),
    );
  }

  /**
   * A join found ranks (working, or spares) holding a state other than the leader's, which it would
   * have made theirs: corruption that no check has compared yet (a check compares the ranks'
   * states, and after the join they would all agree). See diverged.
   */
  private joinDiverged(step: number): void {
    this.diverged(step, "at the join, ranks held states other than the leader's", []);
  }

  /**
   * Before a recovery lays sharded state out afresh, its new copies made from the owners' chunks,
   * the working ranks compare each chunk with the copies peers keep of it, as a check does: a chunk
   * corrupted since the last check would otherwise become every copy's (see diverged). Only where
   * the run checks (--verify-every). False when a failure interrupted the comparison.
   */
  private async chunkCopiesAgree(): Promise<boolean> {
    const sharded = this.sumState.shardedState;
    if (this.config.verifyEvery <= 0 || !this.config.sharded || this.done) return true;
    const world = this.membership;
    // the chunks that differ are known to the working ranks; the verdict, to the spares too
    let differ: number[] = [];
    const verdict = Int32Array.of(0);
    this.enter('copies');
    const ok = await this.vote.succeedsEverywhere('copies', async () => {
      const workers = world.workerComm;
      if (sharded && workers) {
        const chunks = sharded.chunkCount;
        const records = new Int32Array(workers.size * 3 * chunks);
        await workers.allgather(encodeChunkCopies(sharded.heldChunkDigests(), chunks), records);
        differ = chunkCopiesDiffer(records, chunks);
      }
      verdict[0] = differ.length > 0 ? 1 : 0;
      await world.comm.allreduce(verdict, 'max');
    });
    if (!ok) return false;
    if (verdict[0] === 1) {
      const what = differ.length > 0 ? `chunk(s) ${differ.join(', ')} of sharded optimizer state` : 'chunks of sharded optimizer state';
      this.diverged(this.currentStep, `before the recovery's rebuild, copies of ${what} differed`, [`copies of ${what}`]);
    }
    return true;
  }

  /**
   * Corruption found outside a check (`what`): every rank, the joined ones too, rolls back to the
   * last verified state and replays from there; with --on-corruption stop every rank stops. Called
   * only where the run checks (--verify-every).
   */
  private diverged(step: number, what: string, differed: string[]): void {
    this.corruptionsFound += 1;
    if (this.config.onCorruption === 'stop') {
      this.observer.event({ event: 'corruption', step, ranks: [], hosts: [], differed, action: 'stop', rolled_back: 0 });
      this.stopForCorruption(`silent data corruption found at step ${step}: ${what} (--on-corruption stop); stopping`);
    }
    const back = this.rollBackToVerified(this.membership.isLeader);
    this.vote.replaying();
    this.observer.event({ event: 'corruption', step, ranks: [], hosts: [], differed, action: 'rollback', rolled_back: step - back });
    this.observer.log(
      `step ${step}: silent data corruption: ${what}; rolling back to step ${back}, the last verified, and replaying ${step - back} step(s)`,
    );
  }

  /**
   * Every rank stops for a corruption (`line`). The checkpoints written since the last verified
   * step hold state that no check has passed, perhaps the corruption itself: a resume from them
   * would carry it on with nothing to catch it, so the leader removes them first.
   */
  private stopForCorruption(line: string): never {
    if (this.membership.isLeader) removeCheckpointsAfter(this.config.checkpointDir, this.verified.step);
    this.checkpoints.forgetAfter(this.verified.step);
    throw new ProtocolStop('corruption', line);
  }

  /** Every rank takes the last verified state back, its step now the current one; the checkpoints written since are dropped (`remover` removes them). */
  private rollBackToVerified(remover: boolean): number {
    this.currentStep = this.verified.restore(this.source!.state());
    this.source!.stateWritten();
    this.sumState.shardedState?.restoreVerified();
    if (remover) removeCheckpointsAfter(this.config.checkpointDir, this.currentStep);
    this.checkpoints.forgetAfter(this.currentStep);
    return this.currentStep;
  }

  /**
   * `ranks` leave as failed: each kills itself (a line in its log says `why`), as a failed rank
   * would be gone; the others do `before` (a rollback), then recover as from any failure (the
   * failure `error`, met in `phase`). The leader says `line`, or, where it is the one evicted, its
   * successor once the recovery names it.
   */
  private async evict(ranks: number[], why: string, line: string, error: Error, phase: Phase, before?: () => void): Promise<void> {
    const world = this.membership;
    if (ranks.includes(world.worldRank)) {
      fs.appendFileSync(this.config.logFile, `${new Date().toISOString()} rank ${world.worldRank}: evicted ${why}\n`);
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => undefined);
    }
    const toldNow = world.isLeader;
    if (toldNow) this.observer.log(line);
    before?.();
    killDeclaredDead(this.config.pidsDir, ranks);
    this.vote.noteFailure(error, phase, 0);
    await this.recover();
    if (!toldNow) this.observer.log(line);
  }

  /**
   * Ends the step every survivor committed: the step advances; `report` records it (the client's
   * evaluation and metrics); then a stop that a rank asked for checkpoints and throws ProtocolStop
   * ('sigterm'), a periodic checkpoint is written when due (not after the last step), and last the
   * ranks spawned beside training are accepted or join, or more are spawned.
   */
  async commit(report?: () => Promise<void> | void): Promise<void> {
    const step = this.currentStep;
    if (this.vote.retrying) this.observer.event({ event: 'retry', step, duration_ms: now() - this.tryStarted });
    this.currentStep += 1;
    this.shardTimes?.stepEnded(now());
    await report?.();
    if (!(await this.checkFinalState())) return;
    const balance = this.balanceDue;
    this.balanceDue = undefined;
    if (balance?.kind === 'rebalance' && !this.source!.done()) await this.rebalance(balance);
    if (balance?.kind === 'evict' && !this.source!.done()) await this.evictSlow(balance);
    this.readyForRecovery();
    if (this.stopAgreed) {
      this.observer.log(`stopping after step ${step} on request (SIGTERM): checkpoint first`);
      await this.checkpoint('sigterm');
      // ranks spawned and not yet joined are given up (killed) here, and the stop says so: mpirun
      // counts their deaths against the job, and ft-run tells that from a job that did not stop cleanly
      const givenUp = await this.membership.giveUpSpawn();
      this.observer.event({
        event: 'stop',
        step: this.currentStep,
        reason: 'sigterm',
        checkpoint: this.lastCheckpoint,
        ...(givenUp.length > 0 ? { spawned_given_up: givenUp } : {}),
      });
      throw new ProtocolStop('sigterm', `stopped (SIGTERM) at step ${this.currentStep}`, this.lastCheckpoint);
    }
    const every = this.config.checkpointEvery;
    if (every > 0 && this.currentStep % every === 0 && !this.source!.done()) await this.checkpoint('periodic');
    // last: a rank that joins here goes on at the next step's computation, so nothing of this
    // step's end may come after its join
    const spawned = this.spawnedDue;
    this.spawnedDue = undefined;
    // (a recovery since the vote gave the spawned ranks up)
    if (spawned && this.membership.spawnedWaiting.length > 0 && !this.source!.done()) await this.growBySpawned(spawned);
    else if (this.membership.placesToFill > 0 && !this.source!.done() && !(await this.membership.fillPlaces(this.vote)))
      await this.recover();
    this.readyForRecovery();
  }

  /**
   * What a recovery from the world as it now stands would take, made at a step's end, not on its
   * path: the new sum's memory, and room for the shards this rank would take over (a spare: those of
   * the working rank it replaces, as many as a rank holds at most; a working rank: one of a lost
   * rank's, none where a spare waits to take them all, or where nothing recovers).
   */
  private readyForRecovery(): void {
    this.sumState.readyForRecovery();
    const world = this.membership;
    const share = this.config.onFailure === 'none' ? 'none' : world.recoveryShare;
    this.shards.keepRoom(share === 'place' ? Math.max(...world.shardMap.counts().values()) : share === 'share' ? 1 : 0);
  }

  /**
   * A step's end where the shard map changes for slow ranks (every working rank alike, from the
   * same times): the sum is remade for the new map, and a rank given shards it does not have reads
   * the next step's record batches of them now and the rest in the background, as a readback does.
   */
  private async rebalance(decision: Extract<BalanceDecision, { kind: 'rebalance' }>): Promise<void> {
    const world = this.membership;
    const step = this.currentStep;
    const started = now();
    this.enter('rebalance');
    const before = world.shardMap.counts();
    const moved = world.rebalance(decision.map);
    const after = decision.map.counts();
    this.sumState.rebuildSum(step);
    const mine = (moved.get(world.worldRank) ?? []).filter((s) => !this.shards.has(s));
    if (mine.length > 0) await this.shards.readBackFirst(mine, this.source!.stepRows(world.shardMap, mine));
    const ranks = [...before.keys()];
    const shards = [...moved.values()].flat().sort((a, b) => a - b);
    const round = (x: number): number => Math.round(x * 1000) / 1000;
    const ms = ranks.map((r) => round(decision.msPerShard.get(r)!));
    const { undone } = decision;
    this.observer.event({
      event: 'rebalance',
      step,
      ranks,
      before: ranks.map((r) => before.get(r)!),
      after: ranks.map((r) => after.get(r)!),
      ms_per_shard: ms,
      shards,
      duration_ms: now() - started,
      ...(undone ? { undone: true, step_ms_before: round(undone.beforeMs), step_ms_since: round(undone.sinceMs) } : {}),
    });
    const fastest = Math.min(...ms);
    const speeds = ranks.map((r, i) => `${r}: ${before.get(r)}->${after.get(r)} (${(ms[i] / fastest).toFixed(1)}x)`).join(', ');
    this.observer.log(
      undone
        ? `step ${step}: the last rebalance made the step longer (${undone.sinceMs.toFixed(1)} ms since, ${undone.beforeMs.toFixed(1)} ms before): moving ${shards.length} shard(s) back; rank: shards ${speeds}`
        : `step ${step}: moving ${shards.length} shard(s) off slow ranks; rank: shards (time per shard vs the fastest) ${speeds}`,
    );
  }

  /** A step's end where a rank that stayed far slower than the others leaves as failed, for a spare or a respawned rank to take its place. */
  private async evictSlow(decision: Extract<BalanceDecision, { kind: 'evict' }>): Promise<void> {
    const { rank, slower, steps } = decision;
    const step = this.currentStep;
    const line = `step ${step}: rank ${rank} computed ${slower.toFixed(1)}x slower than the others at ${steps} steps in a row: evicting it for a rank to take its place`;
    const error = new Error(`rank ${rank} too slow`);
    error.name = 'SlowRank';
    await this.evict([rank], `as too slow at step ${step}`, line, error, 'rebalance');
  }

  /**
   * A step's end where the ranks spawned beside training run MPI: they are accepted (and with
   * --respawn-join wait, the ranks wait for them to be ready and merge at once, as a spawn that
   * held them did). Where they are ready: they join (a recovery without a failure: the join, their
   * shards, the sharded state). Where one of them was lost before joining (it died, or was not
   * ready within the comm deadline), they are given up and others spawned.
   */
  private async growBySpawned(due: SpawnedDue): Promise<void> {
    const world = this.membership;
    if (due === 'accept') {
      this.enter('accept');
      if (!(await world.acceptSpawned(this.vote))) return this.recover();
      if (this.config.respawn?.join !== 'wait') return;
      const agreed = await this.vote.agree(OK | CARRY_ON | (await world.spawnWord()));
      if (agreed === null) return this.recover();
      due = spawnedDue(agreed)!;
    }
    this.enter('admit');
    if (due === 'admit') return this.recover(true);
    const how = world.spawnedHow;
    const ids = await world.giveUpSpawn();
    const line = `step ${this.currentStep}: ${how} rank(s) ${ids.join(', ')} lost before joining (died, or not ready within ${this.config.respawn!.giveUpMs / 1000} s); ${how === 'woken' ? 'waking or spawning another' : 'spawning again'}`;
    this.observer.log(line);
    this.observer.event({ event: 'spawn-lost', step: this.currentStep, ranks: ids });
    if ((await world.grow(this.vote)) === null) await this.recover();
  }

  /** The trainer's last step is committed: a recovery during what follows (the final evaluation) no longer reads back or checkpoints. */
  endTraining(): void {
    this.done = true;
  }

  /**
   * The recovery protocol, run alike by every survivor: repair, replace the lost ranks (spares now;
   * spawned ranks join later, once ready) or give their shards to the least-loaded survivors, read
   * back what the retried step needs of the lost shards, rebuild sharded state, write the JIT
   * checkpoint. A failure during any of it starts it again. Throws ProtocolStop below --min-ranks
   * (after a checkpoint) and when a rank reported an error. A spawned rank starts here, at the
   * join. `admitting`: no failure; at a step's end, the spawned ranks ready to join are merged in
   * and take their shards the same way.
   */
  private async recover(admitting = false): Promise<void> {
    const world = this.membership;
    if (!admitting) {
      this.sumState.rollback();
      this.enter('recovery');
      if (!this.joining.awaiting && !this.vote.retrying) this.vote.noteFailure(new Error('agreed failure'), 'agree', 0);
    }
    // the world changes: slow ranks are measured afresh, and nothing decided before is done (the
    // spawned ranks that the vote found ready may be given up, others spawned in their place)
    this.balancer?.reset();
    this.balanceDue = undefined;
    this.spawnedDue = undefined;
    // a recovery before the last one's report was voted on reports both
    const carried = this.readbackReport;
    this.readbackReport = undefined;
    const lostShards = new Set<number>(carried?.shards);
    const lost: number[] = [...(carried?.lost ?? [])];
    const joined: number[] = [...(carried?.joined ?? [])];
    const joinedAsSpares: number[] = [...(carried?.joinedAsSpares ?? [])];
    let readMs = carried?.readMs ?? 0;
    let readBeforeRetry = carried?.readBeforeRetry ?? 0;
    for (;;) {
      let joiners: number[] = [];
      if (admitting) {
        admitting = false;
        const admitted = await world.admitSpawned(this.vote);
        if (admitted === null) continue;
        joiners = admitted;
      } else if (!this.joining.awaiting) {
        lost.push(...(await this.repairs.run(false)));
        if (this.config.sharded && !this.done && world.liveWorkers.length === 0) {
          throw new ProtocolStop(
            'state-lost',
            'every working rank is lost, and with them the sharded optimizer state (spares hold none of it)',
          );
        }
        const grown = await world.grow(this.vote);
        if (grown === null) continue;
        joiners = grown;
      }
      if (joiners.length > 0 || this.joining.awaiting) {
        const sent = await this.joining.run(joiners, this.currentStep, this.vote.retrying, this.source!, (step) => {
          this.currentStep = step;
        });
        if (!sent) continue;
        joiners = sent;
        joined.push(...joiners);
      }
      const working = world.workingJoiners(joiners);
      joinedAsSpares.push(...joiners.filter((r) => !working.includes(r)));
      // counted now: an attempt that a failure cuts short below has already moved them in the map
      for (const shards of world.handOver(joiners).values()) for (const s of shards) lostShards.add(s);
      if (!(await world.formWorkers(this.vote))) continue;
      if (!(await this.chunkCopiesAgree())) continue;
      this.sumState.rebuildSum(this.currentStep);
      if (!this.done && world.working) {
        // taken over now, before anything below can fail and repair again with a newer map: the
        // shards this rank was given and has no data of, in this attempt or one cut short
        const mine = world.shardMap.shardsOf(world.worldRank).filter((s) => !this.shards.has(s));
        this.enter('readback');
        const readStart = now();
        if (mine.length > 0) readBeforeRetry += await this.shards.readBackFirst(mine, this.source!.stepRows(world.shardMap, mine));
        readMs += now() - readStart;
      }
      const step = this.currentStep;
      if (!this.done && !(await this.sumState.rebuildState(step, this.vote, this.enter))) continue;
      // ranks spawned and not yet joined count: they are on their way
      if (world.size + world.workersComing < this.config.minRanks) {
        if (!(await this.checkpoints.write(this.source!, 'min-ranks'))) continue;
        this.observer.event({
          event: 'stop',
          step,
          reason: 'below-min-ranks',
          world: world.size,
          min_ranks: this.config.minRanks,
          checkpoint: this.lastCheckpoint,
        });
        throw new ProtocolStop(
          'min-ranks',
          `${world.size} rank(s) left, below --min-ranks ${this.config.minRanks}: stopping (checkpoint ${this.lastCheckpoint})`,
          this.lastCheckpoint,
        );
      }
      if (this.done) return;
      // every rank reports what the others read too (the leader's events hold the whole job's
      // readback): summed over the working ranks, started now so that it is first in every working
      // rank's queue, and voted on with the next step's collective rather than in a round of its own
      const unreported = this.shards.unreported();
      const counts = Float64Array.of(readBeforeRetry, unreported);
      const summed = world.onWorkers(() => world.allreduce(counts))();
      summed.catch(() => undefined); // a failure meets the step's collective, which awaits it (or a recovery before it, which forgets it)
      const waiting = world.spawnedWaiting;
      this.readbackReport = {
        step,
        shards: [...lostShards].sort((a, b) => a - b),
        lost,
        joined,
        joinedAsSpares,
        readBeforeRetry,
        readMs,
        counts,
        mine: unreported,
        summed,
        retried: this.vote.retrying,
        world: world.size,
        spares: world.spares.length,
        coming: waiting,
        comingHow: world.spawnedHow,
      };
      // a join without a failure (the step is not retried): no checkpoint on the way
      if (this.vote.retrying && this.config.jitCheckpoint && !(await this.checkpoints.write(this.source!, 'jit'))) continue;
      return;
    }
  }

  /** The step's collective, which summed the last recovery's readback counts, was voted on: they are reported. */
  private reportReadback(report: ReadbackReport): void {
    this.readbackReport = undefined;
    const { step, counts, readMs, world } = report;
    this.shards.reported(counts[1], report.mine);
    this.observer.event({ event: 'readback', step, shards: report.shards, bytes_before_retry: counts[0], duration_ms: readMs });
    const spares = report.spares > 0 ? ` (+${report.spares} spare${report.spares > 1 ? 's' : ''})` : '';
    const coming = report.coming.length > 0 ? `; rank(s) ${report.coming.join(', ')} ${report.comingHow}, to join once ready` : '';
    if (!report.retried && report.lost.length === 0) {
      const working = report.joined.filter((r) => !report.joinedAsSpares.includes(r));
      const joins = [
        ...(working.length > 0
          ? [`rank(s) ${working.join(', ')} joined; read back their shards' first ${counts[0]} bytes in ${readMs.toFixed(1)} ms`]
          : []),
        ...(report.joinedAsSpares.length > 0 ? [`rank(s) ${report.joinedAsSpares.join(', ')} joined as spare(s)`] : []),
      ];
      this.observer.log(`step ${step}: ${joins.join('; ')}; ${world} ranks work${spares}`);
      return;
    }
    // the step that failed is retried; a loss at a step's end, or before a rollback, has the next
    // step to compute (the rollback's own line says where it went back to)
    const which = report.retried ? 'retried' : 'next';
    // spares alone lost: they held no shard
    const readback =
      report.shards.length > 0
        ? `read back the ${which} step's ${counts[0]} bytes in ${readMs.toFixed(1)} ms (the rest of the lost shards in the background)`
        : 'no shard to read back';
    const carriedOn = report.retried ? `retried on ${world} ranks` : `${world} ranks work`;
    this.observer.log(`step ${step}: lost rank(s) ${report.lost.join(', ') || 'none'}; ${readback}; ${carriedOn}${spares}${coming}`);
  }

  /** A checkpoint of the current step's start that survives failures while it is written. */
  async checkpoint(reason: string): Promise<void> {
    while (!(await this.checkpoints.write(this.source!, reason))) await this.recover();
  }

  /**
   * This rank met an error of its own (bad data, a full disk): every survivor stops with the same
   * decision, the ProtocolStop returned (it names the ranks that erred). See WorldRepair.reportError.
   */
  reportError(): Promise<ProtocolStop> {
    return this.repairs.reportError();
  }

  /**
   * The end of the run: background readbacks stop, the ranks sum what they read back (bytesReadBack
   * then holds the job's total), the leader writes the results, and all vote that it did (a new
   * leader writes them otherwise).
   */
  async finish(write: () => void): Promise<void> {
    const world = this.membership;
    this.done = true;
    await this.shards.stop();
    // ranks spawned and not yet joined come too late: they are given up
    await world.giveUpSpawn();
    for (;;) {
      this.enter('final-write');
      if (this.config.onFailure !== 'none') {
        const mine = this.shards.unreported();
        const unreported = Float64Array.of(mine);
        if (
          !(await this.vote.succeedsEverywhere(
            'final-write',
            world.onWorkers(() => world.allreduce(unreported)),
          ))
        ) {
          await this.recover();
          continue;
        }
        this.shards.reported(unreported[0], mine);
      }
      if (world.isLeader) write();
      if (this.config.onFailure === 'none' || (await this.vote.succeedsEverywhere('final-write', async () => undefined))) return;
      await this.recover();
    }
  }

  /** Frees the communicator (at exit); the leader removes the spare checkpoint file (or an uncommitted attempt). */
  async close(): Promise<void> {
    await this.membership.giveUpSpawn();
    await this.membership.dismissReserves();
    await this.checkpoints.close();
    await this.membership.free();
  }
}
