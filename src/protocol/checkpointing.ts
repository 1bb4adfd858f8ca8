// The checkpoint protocol: the live ranks write the stripes of the state file into the staging
// directory; meanwhile the leader gets every stripe's digest (computed from memory) and writes the
// manifest beside them; a vote once every stripe is durable; the leader renames the directory to
// the step's; a last vote says the commit happened. A failure anywhere leaves the attempt
// uncommitted: the Manager recovers and tries again (stripes rewrite the same bytes). The leader
// keeps a spare state file ready beside training, so that a checkpoint overwrites one already
// allocated instead of growing a new file.
import * as path from 'node:path';
import {
  checkpointDir,
  CommitError,
  commitManifest,
  configSha256,
  newStripeWriter,
  prepareManifest,
  pruneCheckpoints,
  readyCheckpoints,
  readySpare,
  removeStaging,
  stagingDir,
  stateFileBytes,
  stripeDigests,
  writeStripes,
  type CheckpointMeta,
  type StripeWriter,
  type TrainingState,
} from '../checkpoint/checkpoint';
import { withDiskDeadline } from '../liveness/deadline';
import type { Phase } from '../liveness/drills';
import type { LoopPosition, ProtocolConfig, ProtocolObserver, RunHistory, StepPosition } from './contracts';
import type { Membership } from './membership';
import { OK, type Vote } from './vote';

/**
 * Below this, a replicated state's checkpoint is written by one rank: each more writer's flush and
 * disk contention cost more than its share of a few ms of writing saves (lenet's 3.5 MB at 4 ranks,
 * 3 survivors: 4.3 ms one writer, 5.2 ms three). At 100 MB three writers beat one (41 against 47 ms).
 */
const oneWriterBelowBytes = 8 << 20;

const now = (): number => performance.now();

/** What a checkpoint reads of the training loop: its state and position at the current step's start. */
export interface CheckpointSource {
  state(): TrainingState;
  position(): LoopPosition;
}

export class Checkpointing {
  /** the newest checkpoint committed (or resumed from a join) */
  lastCheckpoint: string | null = null;

  /** A rollback to `step` removed the checkpoints written after it: the newest is no longer one of them. */
  forgetAfter(step: number): void {
    if (this.lastCheckpoint !== null && path.basename(this.lastCheckpoint) > path.basename(checkpointDir(this.config.checkpointDir, step)))
      this.lastCheckpoint = null;
  }
  /** this rank's checkpoint stripes' writer, made at the start: its staging buffers are touched then, not during the checkpoint */
  private readonly stripeWriter = newStripeWriter();
  /** the leader's, for the spare beside training (readySpare) */
  private spareWriter?: StripeWriter;
  private spareUnderWay = false;
  /** close() has run: a cancelled spare fill's end is not news */
  private closed = false;
  /** a commit failed after its vote: the staging directory holds that checkpoint, whole, and stays */
  private stagingKept = false;
  /** every checkpoint's config_sha256 (the identity never changes) */
  private readonly configSha256: string;

  constructor(
    private readonly config: Pick<
      ProtocolConfig,
      'checkpointDir' | 'keepCheckpoints' | 'spareCheckpoint' | 'identity' | 'shards' | 'sharded' | 'commTimeoutMs' | 'diskTimeoutMs'
    >,
    private readonly world: Membership,
    private readonly vote: Vote,
    private readonly position: StepPosition,
    private readonly history: RunHistory,
    private readonly observer: ProtocolObserver,
    private readonly enter: (phase: Phase) => void,
  ) {
    this.configSha256 = configSha256(config.identity);
  }

  /** At the start: every rank's stripe buffers and (`spare`) the leader's spare file, made before the first checkpoint needs them. */
  ready(source: CheckpointSource, spare: boolean): void {
    readyCheckpoints(this.meta(source, 'ready'), source.state(), this.world.working ? this.world.rank : undefined, this.world.size);
    if (spare) this.readySpare(source);
  }

  /** One attempt at a checkpoint of the current step's start; false when a failure interrupted it. */
  async write(source: CheckpointSource, reason: string): Promise<boolean> {
    const started = now();
    const step = this.position.step;
    const state = source.state();
    const dir = checkpointDir(this.config.checkpointDir, step);
    const staging = stagingDir(this.config.checkpointDir);
    this.enter('checkpoint-stripe');
    // its failure (a full disk) is held from now on, not left unhandled while the digests are got
    const chunks = this.chunksToWrite(state);
    const written =
      chunks.length > 0
        ? writeStripes(staging, state, chunks, this.world.size, this.stripeWriter).then(
            () => undefined,
            (error: unknown) => ({ error }),
          )
        : undefined;
    this.enter('checkpoint-gather');
    const digests = await this.stripeDigests(state);
    const gathered = digests !== false;
    const prepared = digests ? prepareManifest(staging, this.meta(source, reason), state, digests) : undefined;
    const manifestFailed = prepared?.durable.then(
      () => undefined,
      (error: unknown) => ({ error }),
    );
    // a stuck disk stops the job as a full one does, before the peers' vote gives up on this rank
    const failed = await withDiskDeadline(
      Promise.all([written, manifestFailed]).then(([stripes, manifest]) => stripes ?? manifest),
      started,
      this.config.diskTimeoutMs,
      `the checkpoint's writes into ${staging}`,
    );
    if (failed) throw failed.error;
    if ((await this.vote.agree(gathered ? OK : 0)) !== OK) return false;
    this.enter('checkpoint-commit');
    if (prepared) {
      let manifest;
      try {
        manifest = commitManifest(prepared, dir);
      } catch (error) {
        this.stagingKept ||= error instanceof CommitError;
        throw error;
      }
      this.observer.event({
        event: 'checkpoint',
        step,
        reason,
        dir,
        bytes: manifest.file.bytes,
        stripes: this.world.size,
        duration_ms: now() - started,
      });
    }
    if (!(await this.vote.succeedsEverywhere('checkpoint-commit', async () => undefined))) return false;
    this.lastCheckpoint = dir;
    // once every rank goes on: what the others need not wait for
    if (prepared) {
      pruneCheckpoints(this.config.checkpointDir, this.config.keepCheckpoints);
      this.readySpare(source);
    }
    return true;
  }

  /**
   * The chunks of the state file this rank writes: its own when the state is sharded or large;
   * a small replicated state (any rank holds all of it) is written whole by the last working rank,
   * not the leader, which writes the manifest meanwhile. Spares write nothing.
   */
  private chunksToWrite(state: TrainingState): number[] {
    const { working, rank, size } = this.world;
    if (!working) return [];
    if (this.config.sharded || stateFileBytes(state) >= oneWriterBelowBytes) return [rank];
    return rank === size - 1 ? Array.from({ length: size }, (_, c) => c) : [];
  }

  /**
   * Every working rank's stripe digests (stripeDigests), at the leader; undefined elsewhere, false
   * when a failure interrupted their gather. Replicated state is the same on every rank, so the
   * leader computes them all from its own memory; sharded state has them gathered.
   */
  private async stripeDigests(state: TrainingState): Promise<string[][] | undefined | false> {
    const { working, rank, isLeader, size: n } = this.world;
    if (!this.config.sharded) return isLeader ? Array.from({ length: n }, (_, c) => stripeDigests(state, c, n)) : undefined;
    const mine = working ? Buffer.from(stripeDigests(state, rank, n).join(''), 'hex') : Buffer.alloc(0);
    const all = new Uint8Array(mine.length * n);
    const gather = this.world.onWorkers(() => this.world.workerComm!.allgather(new Uint8Array(mine), all));
    if (!(await this.vote.completes('checkpoint-gather', gather))) return false;
    return isLeader
      ? Array.from({ length: n }, (_, c) =>
          Buffer.from(all.subarray(mine.length * c, mine.length * (c + 1)))
            .toString('hex')
            .match(/.{16}/g)!,
        )
      : undefined;
  }

  /** What a checkpoint of the current step records besides the tensors. */
  private meta(source: CheckpointSource, reason: string): CheckpointMeta {
    return {
      step: this.position.step,
      ...source.position(),
      reason,
      shards: this.config.shards,
      shard_map: this.world.shardMap.toJSON(),
      seed: this.config.identity.seed as number,
      config: this.config.identity,
      config_sha256: this.configSha256,
      rng: { seed: this.config.identity.seed as number, kind: 'counter-based' },
      world_history: this.history.worldHistory,
    };
  }

  /**
   * The leader starts writing a spare state file for the next checkpoint (see checkpoint.ts) unless
   * one is in place or under way. Off the critical path: a failure to make one (a full disk) costs
   * only the spare, and the checkpoint then writes a new file.
   */
  private readySpare(source: CheckpointSource): void {
    if (!this.world.isLeader || !this.config.spareCheckpoint || this.spareUnderWay) return;
    this.spareWriter ??= newStripeWriter();
    this.spareUnderWay = true;
    void readySpare(this.config.checkpointDir, stateFileBytes(source.state()), this.spareWriter)
      .catch((error: NodeJS.ErrnoException) => {
        // after close() the fill was cancelled and its file removed under it (the log may be closed too)
        if (error.code !== 'ECANCELED' && !this.closed)
          this.observer.log(`no spare checkpoint file (a checkpoint will write a new one): ${error.message}`);
      })
      .finally(() => {
        this.spareUnderWay = false;
      });
  }

  /** At exit, on the leader: the spare (or an uncommitted attempt) is removed; a voted one that could not be put in place stays. */
  async close(): Promise<void> {
    this.closed = true;
    if (!this.world.isLeader || !this.config.spareCheckpoint || this.stagingKept) return;
    // no checkpoint will use a spare still being filled: it stops after the piece being written,
    // which is not waited for (on a stuck disk it never ends, and a rank out of MPI that long is
    // taken for hung); removed under it, the file goes once the write ends or the process does
    if (this.spareUnderWay) this.spareWriter!.cancel();
    await withDiskDeadline(
      removeStaging(this.config.checkpointDir),
      now(),
      this.config.diskTimeoutMs,
      'removing the spare checkpoint file',
    ).catch((error: Error) => this.observer.log(`${error.message}; left in ${this.config.checkpointDir}`));
  }
}
