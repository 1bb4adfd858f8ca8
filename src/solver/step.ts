// One data-parallel step under the protocol, the same for the trainer (its Net) and the custom loop
// (user code's gradients): each rank computes the gradients of its micro-batches (exact: one per
// held shard, into the shard-ordered sum; shrink/none: this rank's pieces, into its contribution),
// the gradients are summed in the step's collective, which the survivors vote on (the Manager),
// and only then is the update applied. With sharded optimizer state the sum stops at each rank's
// chunk, whose owner works out its update inside the collective (sharding/sharded-state.ts), and
// the update puts it in place. Every --verify-every K steps the step is checked for silent data
// corruption between the vote and the update (its gradients' digests, and one other rank's shard
// recomputed): a corruption found has rolled the state back, and the caller computes the step the
// Manager names. A hot spare computes nothing: it receives each step's outcome from
// the leader and applies it as the working ranks do, so that it can take a place at any step. A
// failed vote has already been recovered from when the Manager returns: the caller computes the
// same step again on the repaired world, with the parameters untouched.
import { gatherBatch } from '../data/micro-batches';
import type { Backend } from '../nn/backend';
import { Stream, streamVector } from '../nn/stream-memory';
import type { FailurePolicy } from '../protocol/contracts';
import type { Manager } from '../protocol/manager';
import { crc64 } from '../base/checksum';
import { applyFlip } from '../liveness/drills';
import type { GradientDigests } from '../protocol/verification';
import type { ShardSum } from '../sharding/shard-sum';
import {
  computeShards,
  recomputeShard,
  slowDrill,
  type BatchBuffers,
  type GradientFn,
  type GradientTarget,
  type ShardWork,
} from './shard-steps';
import type { DataPosition } from './data-position';
import type { ReplicatedState } from './replicated-state';
import type { ShrinkStep } from './shrink-schedule';

export interface StepSettings {
  onFailure: FailurePolicy;
  seed: number;
  /** the global batch at the start (shrink mode's rate scales with the step's share of it) */
  batch: number;
  lrRescale: 'linear' | 'none';
  /** sharded: the optimizer state is the protocol's, in chunks, updated inside the collective */
  optimizerState: 'replicated' | 'sharded';
  /** scale the summed gradient down to this global norm where it is larger (0: off; replicated state) */
  clipNorm: number;
}

/** What a step updates: the parameters, [P | the loss] (sharded state returns the updated parameters with the loss), and the buffers. */
export interface StepParameters {
  /** [P + 1]: the parameters, then one element the sharded update's loss lands in */
  withTail: Float32Array;
  /** the running statistics the summed statistics update (B values; none: empty) */
  buffers: Float32Array;
  /** brings the parameters' newest values into withTail, for a write there (on a GPU the device's may be newer) */
  toHost(): void;
  updateBuffers(statistics: Float32Array): void;
}

/** How the step's update is made: by ft-train's optimizer over replicated slots, or by the caller (the custom loop's sum()). */
export type StepUpdate = Pick<ReplicatedState, 'update' | 'length' | 'onHost' | 'hostWritten'>;

/** A try's epoch, global sample count and learning rate. */
export interface PreparedStep {
  epoch: number;
  samples: number;
  lr: number;
}

export class DataParallelStep {
  /** [gradient (P) | statistics (B) | loss]: what one rank contributes to the sum in shrink and none modes; on a spare, the step's outcome it receives */
  private readonly contribution: Float32Array;
  private readonly P: number;
  private readonly B: number;
  private shrinkStep?: ShrinkStep;
  /** the summed [gradient | statistics | loss] of the last committed step (replicated state) */
  private total?: Float32Array;
  /** the last committed step's loss (mean over its global batch) */
  lastLoss = NaN;
  /** a check's recomputed shard vector (allocated at the first check) */
  private checkVector?: Float32Array;

  constructor(
    private readonly settings: StepSettings,
    private readonly manager: Manager,
    private readonly data: DataPosition,
    private readonly buffers: BatchBuffers,
    private readonly params: StepParameters,
    private readonly backend: Pick<Backend, 'addInPlace' | 'sumOfSquares' | 'scaleInPlace'>,
  ) {
    this.P = params.withTail.length - 1;
    this.B = params.buffers.length;
    this.contribution = streamVector(this.P + this.B + 1, Stream.gradients);
  }

  /** The current step's epoch, global sample count and learning rate (`base`, rescaled in shrink mode when asked). */
  prepare(base: number): PreparedStep {
    const step = this.manager.step;
    const { plan, shrink } = this.data;
    if (!shrink) {
      const t = step % plan.stepsPerEpoch;
      return { epoch: Math.floor(step / plan.stepsPerEpoch), samples: plan.samplesAt(t), lr: base };
    }
    this.shrinkStep = shrink.peek(this.manager.world.shardMap);
    const rescale = this.settings.lrRescale === 'linear' ? this.shrinkStep.samples / this.settings.batch : 1;
    return { epoch: this.shrinkStep.epoch, samples: this.shrinkStep.samples, lr: base * rescale };
  }

  /**
   * One try at the current step, `prepared` for it: compute, the voted sum, then the update
   * (`update`; absent: the caller updates from gradient()). False: a failure was recovered from;
   * prepare and try the same step again.
   */
  async run(prepared: PreparedStep, target: GradientTarget, compute: GradientFn, update?: StepUpdate): Promise<boolean> {
    const manager = this.manager;
    const { world } = manager;
    const step = manager.step;
    const { epoch, samples, lr } = prepared;
    const sharded = manager.shardedState;
    sharded?.beginStep(step);
    const working = world.working;
    const exact = this.settings.onFailure === 'exact';
    const checking = manager.checking;
    manager.enter('compute');
    const work = { manager, plan: this.data.plan, step, seed: this.settings.seed, buffers: this.buffers, target, compute };
    if (working && exact) await computeShards(work);
    else if (working) await this.computePieces(epoch, samples, target, compute);
    // a spare computes nothing but may take lost shards at any step: it draws the epoch's
    // permutations as the working ranks do, at the epoch's first step, not on a recovery's path
    else if (exact) this.data.plan.order(0, epoch);
    const sum = working && exact ? manager.shardSum : undefined;
    // the step's outcome on this rank: [updated parameters | loss] with sharded state, else [summed gradient | loss]; a spare's, received
    const received = !working ? this.contribution : sharded ? this.params.withTail : (sum?.total ?? this.contribution);
    const committed = await manager.exchange(async () => {
      if (sharded) await sharded.update(sum!, lr, step, () => manager.enter('redundancy'));
      else if (sum) await sum.sum();
      else if (working) await world.allreduce(this.contribution);
      await world.feedSpares(received);
    });
    if (!committed) return false;
    if (checking && !(await manager.verify(await this.gradientDigests(work, sum), (shard) => this.recompute(work, shard)))) return false;
    const { P, B } = this;
    const garbled = manager.flipAt('collective', P);
    if (garbled) applyFlip(received, garbled);

    manager.enter('update');
    if (!working && this.settings.optimizerState === 'sharded') {
      this.params.withTail.set(this.contribution);
      this.lastLoss = this.contribution[P];
    } else if (sharded) {
      sharded.commit(step);
      this.lastLoss = this.params.withTail[P];
    } else {
      const total = sum ? sum.total : this.contribution;
      this.total = total;
      if (update) {
        if (this.settings.clipNorm > 0) this.clip(total.subarray(0, P));
        update.update(this.params.withTail.subarray(0, P), total.subarray(0, P), lr, step);
      }
      if (B > 0) this.params.updateBuffers(total.subarray(P, P + B));
      this.lastLoss = total[P + B];
    }
    const flipped = manager.flipAt('update', P);
    if (flipped) {
      this.params.toHost();
      applyFlip(this.params.withTail, flipped);
    }
    this.flipState(sharded?.held().slots, update);
    this.data.shrink?.commit(this.shrinkStep!);
    return true;
  }

  /**
   * A check's digests of the step's gradients, once its sum committed (a rank's own error, such as
   * bad data, has stopped the job by then rather than met a checker reading the same data): the
   * held shards', and that of one shard of another rank's, recomputed here.
   */
  private async gradientDigests(work: ShardWork, sum: ShardSum | undefined): Promise<GradientDigests> {
    const spot = sum ? this.manager.spotShard() : undefined;
    return {
      shards: new Map(sum ? sum.held.map((shard) => [shard, crc64(sum.slot(shard))]) : []),
      spot: spot === undefined ? undefined : await this.recompute(work, spot),
    };
  }

  /** The digest of shard s's vector at the step as this rank recomputes it (a check's), from the step's start parameters. */
  private async recompute(work: ShardWork, shard: number): Promise<string> {
    const vector = (this.checkVector ??= new Float32Array(this.P + this.B + 1));
    const run = () => recomputeShard(work, shard, vector);
    const sharded = this.manager.shardedState;
    await (sharded ? sharded.atStepStart(run) : run());
    return crc64(vector);
  }

  /**
   * An update-phase drill's flip of the optimizer state, for tests: this rank's chunk of sharded
   * state (`held`), or the replicated slots (brought to the host first and told of the write).
   */
  private flipState(held: Float32Array[] | undefined, replicated: StepUpdate | undefined): void {
    const length = held ? held.reduce((n, slot) => n + slot.length, 0) : (replicated?.length ?? 0);
    const flip = this.manager.flipAt('update', length, 0, 'state');
    if (!flip) return;
    let { index } = flip;
    for (const slot of held ?? replicated!.onHost()) {
      if (index < slot.length) {
        applyFlip(slot, { index, bit: flip.bit });
        if (!held) replicated!.hostWritten();
        return;
      }
      index -= slot.length;
    }
  }

  /**
   * PyTorch's clip_grad_norm_ on the summed gradient: scaled by clipNorm / (norm + 1e-6) where that
   * is below 1. The norm is of the exact sum, in double in a fixed order: every rank, at any world
   * size, scales by the same bits.
   */
  private clip(gradient: Float32Array): void {
    const norm = Math.sqrt(this.backend.sumOfSquares(gradient));
    const scale = this.settings.clipNorm / (norm + 1e-6);
    if (scale < 1) this.backend.scaleInPlace(gradient, scale);
  }

  /** The committed step's summed gradient (replicated state; valid until the next run()). */
  gradient(): Float32Array {
    if (!this.total) throw new Error('no summed gradient: the optimizer state is sharded, or no step has been committed');
    return this.total.subarray(0, this.P);
  }

  /**
   * Shrink and none modes: this rank's gradient over its pieces, one piece (a shard's run of rows)
   * at a time so that every draw is keyed by the piece's shard, never by the rank holding it.
   */
  private async computePieces(epoch: number, samples: number, target: GradientTarget, compute: GradientFn): Promise<void> {
    const { P, B } = this;
    const manager = this.manager;
    this.contribution.fill(0);
    for (const piece of this.shrinkStep!.pieces.get(manager.world.worldRank) ?? []) {
      const rows = piece.rows.length;
      const [x, labels] = this.buffers.view(rows);
      await manager.ready(piece.shard, piece.rows);
      gatherBatch(manager.shard(piece.shard), piece.rows, x, labels);
      const started = performance.now();
      const key = { seed: this.settings.seed, epoch, step: manager.step, shard: piece.shard };
      const loss = compute({ x, labels, rows, samples, key });
      await slowDrill(manager, started);
      this.backend.addInPlace(this.contribution.subarray(0, P), target.gradient);
      if (B > 0) this.backend.addInPlace(this.contribution.subarray(P, P + B), target.statistics);
      this.contribution[P + B] += loss * (rows / samples);
    }
  }
}
