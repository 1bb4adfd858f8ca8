// The training loop, read top to bottom: each rank computes the gradients of its shards'
// micro-batches, the gradients are summed (exact: over all S shards in shard order; shrink/none: a
// plain allreduce), the survivors vote on the outcome (the fault-tolerance Manager), and only then
// is the update applied and the step recorded. With sharded optimizer state the sum stops at each
// rank's chunk, whose owner works out its update inside the collective (ft/sharded-state.ts), and
// the commit puts it in place. A hot spare computes nothing: it receives each step's outcome from
// the leader and applies it as the working ranks do, so that it can take a place at any step. A
// failed vote has already been recovered from when
// the Manager returns: the same step is computed again on the repaired world, with the parameters
// untouched.
import { createHash } from 'node:crypto';
import { loadCheckpoint, type CheckpointManifest, type TrainingState } from '../checkpoint/checkpoint';
import type { Dataset } from '../data/dataset';
import { gatherBatch, MicroBatches } from '../data/micro-batches';
import type { ShardMap } from '../data/shard-map';
import type { ShardData } from '../data/split';
import type { Failure, FailurePolicy, Manager, ProtocolObserver, StateSource } from '../protocol/manager';
import { ProtocolStop } from '../protocol/stop';
import type { Backend } from '../nn/backend';
import type { Net } from '../nn/net';
import { Stream, streamVector } from '../nn/stream-memory';
import type { StepRecord } from '../run/records';
import { learningRate, type LrSchedule } from './lr-schedule';
import { Optimizer, type OptimizerSettings } from './optimizer';
import { BatchBuffers, computeShards, evaluateSplit, type Evaluation, type GradientTarget } from './shard-steps';
import { ShrinkSchedule, type ShrinkStep } from './shrink-schedule';

export type { Failure, FailurePolicy } from '../protocol/manager';
export type { StepRecord } from '../run/records';

export interface TrainConfig {
  /** global batch at the start */
  batch: number;
  /** shrink and none modes: each rank's batch, fixed when the run first started */
  rankBatch?: number;
  steps?: number;
  epochs?: number;
  lr: number;
  optimizer: OptimizerSettings;
  /** replicated: every rank holds the whole optimizer state; sharded: one chunk each (the Manager's) */
  optimizerState: 'replicated' | 'sharded';
  lrSchedule: LrSchedule;
  seed: number;
  shards: number;
  onFailure: FailurePolicy;
  lrRescale: 'linear' | 'none';
  /** evaluate on the test split every K steps (0: only at the end) */
  evalEvery: number;
  /** a checkpoint every K steps (0: none) */
  checkpointEvery: number;
}

/** What the trainer reports to the run directory and the console. */
export interface TrainObserver extends ProtocolObserver {
  step(record: StepRecord): void;
}

/** A training run's outcome, as summary.json records it. */
export interface TrainResult {
  /** steps trained */
  steps: number;
  /** the last step's loss (mean over its global batch) */
  finalLoss: number;
  /** on the test split, at the end */
  testAccuracy: number;
  testLoss: number;
  /** each failure: the step it interrupted, the world ranks lost, the world size after it */
  failures: Failure[];
  /** working ranks at the start and at the end */
  worldInitial: number;
  worldFinal: number;
  /** sha256 of the parameters' bytes (then the buffers', for a net with batchnorm) */
  paramsSha256: string;
  /** bytes of optimizer state this rank holds, and of what it keeps for peers' redundancy */
  optimizerBytes: { state: number; redundancy: number };
}

const now = (): number => performance.now();

export class Trainer implements StateSource {
  private readonly plan: MicroBatches;
  private readonly shrink?: ShrinkSchedule;
  private test?: ShardData;
  private readonly optimizer: Optimizer;
  /** replicated optimizer state: each slot over all P parameters (sharded: none, the Manager holds it) */
  private readonly slots: Float32Array[];
  /** sharded state resumed from a checkpoint: its slots, whole, until the first step commits (ShardedState's initial state) */
  private initialSlots?: Float32Array[];
  /** [gradient (P) | loss]: what one rank contributes to the sum in shrink and none modes; on a spare, the step's outcome it receives */
  private readonly contribution: Float32Array;
  private readonly buffers: BatchBuffers;
  /** exact mode: the net's gradient and statistics, placed straight in the sum's slots */
  private readonly gradientTarget: GradientTarget;
  private step = 0;
  private lastLoss = NaN;
  private shrinkStep?: ShrinkStep;
  private stopRequested = false;

  constructor(
    private readonly config: TrainConfig,
    private readonly ft: Manager,
    private readonly dataset: Dataset,
    private readonly net: Net,
    private readonly backend: Backend,
    private readonly observer: TrainObserver,
  ) {
    this.plan = new MicroBatches(dataset.train.layout(config.shards), config.batch, config.seed);
    if (config.onFailure !== 'exact') this.shrink = new ShrinkSchedule(this.plan, config.rankBatch ?? config.batch / ft.size);
    const P = net.params.data.length;
    this.optimizer = new Optimizer(config.optimizer, backend);
    this.slots = config.optimizerState === 'sharded' ? [] : this.optimizer.slots.map((_, k) => streamVector(P, Stream.state + k));
    this.contribution = streamVector(P + net.buffers.length + 1, Stream.gradients);
    const largest = Math.max(config.batch, ...Array.from({ length: config.shards }, (_, s) => this.plan.size(s)));
    this.buffers = new BatchBuffers(largest, net.inputSize);
    this.gradientTarget = {
      get gradient() { return net.params.gradients; },
      get statistics() { return net.statistics; },
      place: (vector) => net.placeGradients(vector),
    };
  }

  /** The run's length in steps (with --epochs and a shrinking world, the plan's estimate). */
  get totalSteps(): number {
    return this.config.steps ?? (this.config.epochs ?? 1) * this.plan.stepsPerEpoch;
  }

  private done(): boolean {
    if (this.config.steps !== undefined) return this.step >= this.config.steps;
    if (this.shrink) return this.shrink.epochsDone >= (this.config.epochs ?? 1);
    return this.step >= this.totalSteps;
  }

  /** Asks for a checkpoint and a clean stop at the next step boundary (SIGTERM); any rank may ask. */
  requestStop(): void {
    this.stopRequested = true;
  }

  /** Trains to the end; throws ProtocolStop when the run stops early (SIGTERM, --min-ranks, an error). */
  async run(resume?: { dir: string; manifest: CheckpointManifest }): Promise<TrainResult> {
    if (resume) this.restore(resume.dir, resume.manifest);
    else this.net.init(this.config.seed);
    this.ft.step = this.step;
    await this.ft.start(this, resume !== undefined);
    this.step = this.ft.step; // a spawned rank joins where the run stands
    this.test = await this.dataset.test.readAll();
    while (!this.done()) {
      const committed = await this.trainStep();
      if (!committed) continue; // recovered: the same step again
      const { record, stop } = committed;
      if (this.config.evalEvery > 0 && this.step % this.config.evalEvery === 0 && !this.done()) {
        const evaluation = await this.evaluate();
        Object.assign(record, { test_accuracy: evaluation.accuracy, test_loss: evaluation.loss });
      }
      this.observer.step(record);
      if (stop) await this.stopOnRequest();
      if (this.config.checkpointEvery > 0 && this.step % this.config.checkpointEvery === 0 && !this.done()) await this.ft.checkpoint('periodic');
    }
    this.ft.trainingDone = true;
    return this.result(await this.evaluate());
  }

  /**
   * One try at the current step: its record once committed, with whether the ranks agreed to stop
   * after it (SIGTERM); undefined when it must be tried again.
   */
  private async trainStep(): Promise<{ record: StepRecord; stop: boolean } | undefined> {
    const step = this.step;
    this.ft.step = step;
    const started = now();
    const { epoch, samples, lr } = this.prepareStep();
    const sharded = this.ft.shardedState;
    sharded?.beginStep(step);

    const working = this.ft.working;
    this.ft.at('compute');
    if (working && this.config.onFailure === 'exact') {
      await computeShards(this.ft, this.plan, step, this.config.seed, this.buffers, this.gradientTarget,
        (batch) => this.net.lossAndGradient(batch.x, batch.labels, batch.rows, batch.key, batch.samples, batch.progress).loss);
    }
    else if (working) await this.computeRank(epoch, samples);

    const retried = this.ft.retrying;
    const sum = working && this.config.onFailure === 'exact' ? this.ft.shardSum : undefined;
    const outcome = await this.ft.collective('collective', async () => {
      if (sharded) await sharded.update(sum!, lr, step, () => this.ft.at('redundancy'));
      else if (sum) await sum.sum();
      else if (working) await this.ft.allreduce(this.contribution);
      // [updated parameters | loss] with sharded state, else [summed gradient | loss]
      await this.ft.feedSpares(!working ? this.contribution : sharded ? this.net.params.dataWithTail : (sum?.total ?? this.contribution));
    }, this.stopRequested);
    if (!outcome.ok) return undefined;

    this.ft.at('update');
    const P = this.net.params.data.length;
    const B = this.net.buffers.length;
    if (!working && this.config.optimizerState === 'sharded') {
      this.net.params.dataWithTail.set(this.contribution);
      this.lastLoss = this.contribution[P];
    } else if (sharded) {
      sharded.commit(step);
      this.initialSlots = undefined;
      this.lastLoss = this.net.params.dataWithTail[P];
    } else {
      const total = sum ? sum.total : this.contribution;
      this.optimizer.update(this.net.params.data, total.subarray(0, P), this.slots, lr, step);
      if (B > 0) this.net.updateBuffers(total.subarray(P, P + B));
      this.lastLoss = total[P + B];
    }
    this.shrink?.commit(this.shrinkStep!);
    this.step += 1;
    this.ft.step = this.step;
    const stepMs = now() - started;
    if (retried) this.observer.event({ event: 'retry', step, duration_ms: stepMs });
    const spares = this.ft.sparesLaunched ? { spares: this.ft.spares.length } : {};
    return { record: { step, epoch, loss: this.lastLoss, lr, world: this.ft.size, ...spares, samples, step_ms: stepMs, time: Date.now() }, stop: outcome.stop };
  }

  /** SIGTERM reached every rank through the vote: checkpoint, then stop. */
  private async stopOnRequest(): Promise<never> {
    this.observer.log(`stopping after step ${this.step - 1} on request (SIGTERM): checkpoint first`);
    await this.ft.checkpoint('sigterm');
    this.observer.event({ event: 'stop', step: this.step, reason: 'sigterm', checkpoint: this.ft.lastCheckpoint });
    throw new ProtocolStop('sigterm', `stopped (SIGTERM) at step ${this.step}`, this.ft.lastCheckpoint);
  }

  /** This step's epoch, global sample count and learning rate. */
  private prepareStep(): { epoch: number; samples: number; lr: number } {
    const base = learningRate(this.config.lrSchedule, this.config.lr, this.step, this.totalSteps);
    if (!this.shrink) {
      const t = this.step % this.plan.stepsPerEpoch;
      return { epoch: Math.floor(this.step / this.plan.stepsPerEpoch), samples: this.plan.samplesAt(t), lr: base };
    }
    this.shrinkStep = this.shrink.peek(this.ft.shardMap);
    const rescale = this.config.lrRescale === 'linear' ? this.shrinkStep.samples / this.config.batch : 1;
    return { epoch: this.shrinkStep.epoch, samples: this.shrinkStep.samples, lr: base * rescale };
  }

  /**
   * Shrink and none modes: this rank's gradient over its pieces, one piece (a shard's run of rows)
   * at a time so that every draw is keyed by the piece's shard, never by the rank holding it.
   */
  private async computeRank(epoch: number, samples: number): Promise<void> {
    const P = this.net.params.data.length;
    const B = this.net.buffers.length;
    this.contribution.fill(0);
    for (const piece of this.shrinkStep!.pieces.get(this.ft.worldRank) ?? []) {
      const [x, labels] = this.buffers.view(piece.rows.length);
      await this.ft.ready(piece.shard, piece.rows);
      gatherBatch(this.ft.shard(piece.shard), piece.rows, x, labels);
      const key = { seed: this.config.seed, epoch, step: this.step, shard: piece.shard };
      const { loss } = this.net.lossAndGradient(x, labels, piece.rows.length, key, samples);
      this.backend.addInPlace(this.contribution.subarray(0, P), this.net.params.gradients);
      if (B > 0) this.backend.addInPlace(this.contribution.subarray(P, P + B), this.net.statistics);
      this.contribution[P + B] += loss * (piece.rows.length / samples);
    }
  }

  /** Test accuracy and loss, the test split divided over the live ranks; redone after a recovery. */
  private evaluate(): Promise<Evaluation> {
    return evaluateSplit(this.ft, this.test!, this.buffers, (x, labels, rows) => this.net.evaluate(x, labels, rows));
  }

  private restore(dir: string, manifest: CheckpointManifest): void {
    const P = this.net.params.data.length;
    const slots = this.config.optimizerState === 'sharded' ? this.optimizer.slots.map(() => new Float32Array(P)) : this.slots;
    loadCheckpoint(dir, manifest, this.net.params.views, this.net.params.data, this.optimizer.slots.map((name, k) => ({ name, data: slots[k] })), this.heldBuffers());
    if (this.config.optimizerState === 'sharded') this.initialSlots = slots;
    this.step = manifest.step;
    this.takeUpShrink(manifest.shrink);
    this.ft.worldHistory.push(...manifest.world_history);
    this.observer.event({ event: 'resume', step: this.step, from: dir, world: this.ft.size });
    this.observer.log(`resumed from ${dir} at step ${this.step} on ${this.ft.size} ranks`);
  }

  /** StateSource: the state at the current step's start (no survivor has updated it yet). */
  state(): TrainingState {
    const params = this.net.params.data;
    const sharded = this.ft.shardedState?.held();
    const slots = sharded ? sharded.slots : this.slots;
    return {
      tensors: this.net.params.views, params,
      slots: this.optimizer.slots.map((name, k) => ({ name, data: slots[k] })),
      held: sharded ? { from: sharded.from, to: sharded.to } : { from: 0, to: params.length },
      buffers: this.heldBuffers(),
    };
  }

  /** The net's buffers (batchnorm's running statistics) as a checkpoint holds them. */
  private heldBuffers(): TrainingState['buffers'] {
    return { tensors: this.net.bufferViews, data: this.net.buffers };
  }

  /** StateSource: the optimizer state at the run's start, slot k over elements [from, to): zeros, or the resumed checkpoint's. */
  initialState(slot: number, from: number, to: number, out: Float32Array): void {
    if (this.initialSlots) out.set(this.initialSlots[slot].subarray(from, to));
    else out.fill(0);
  }

  /** StateSource: the parameters and the replicated optimizer state, for a rank that joins. */
  joinBuffers(): Float32Array[] {
    return [this.net.params.data, ...this.slots, ...(this.net.buffers.length > 0 ? [this.net.buffers] : [])];
  }

  /** StateSource: a spawned rank takes up the run at `step`. */
  joinAt(step: number, position: { epoch: number; shrink?: { epoch: number; cursors: number[] } }): void {
    this.step = step;
    this.takeUpShrink(position.shrink);
  }

  /** Shrink mode: the data position a checkpoint or a join gives (its epoch and per-shard cursors). */
  private takeUpShrink(position?: { epoch: number; cursors: number[] }): void {
    if (this.shrink && position) this.shrink.commit({ epoch: position.epoch, cursors: position.cursors, pieces: new Map(), samples: 0 });
  }

  /** StateSource: the rows the current step reads of `shards` under `map` (shrink mode's pieces depend on it). */
  stepRows(map: ShardMap, shards: readonly number[]): Map<number, Int32Array> {
    const rows = new Map<number, Int32Array>();
    if (this.shrink) {
      const wanted = new Set(shards);
      for (const piece of [...this.shrink.peek(map).pieces.values()].flat()) if (wanted.has(piece.shard)) rows.set(piece.shard, piece.rows);
    } else {
      const t = this.step % this.plan.stepsPerEpoch;
      for (const shard of shards) rows.set(shard, this.plan.rows(shard, Math.floor(this.step / this.plan.stepsPerEpoch), t));
    }
    return rows;
  }

  position(): { epoch: number; shrink?: { epoch: number; cursors: number[] } } {
    return {
      epoch: this.shrink ? this.shrink.epoch : Math.floor(this.step / this.plan.stepsPerEpoch),
      shrink: this.shrink ? { epoch: this.shrink.epoch, cursors: this.shrink.cursors } : undefined,
    };
  }

  private result(evaluation: Evaluation): TrainResult {
    const params = this.net.params.data;
    return {
      steps: this.step,
      finalLoss: this.lastLoss,
      testAccuracy: evaluation.accuracy,
      testLoss: evaluation.loss,
      failures: this.ft.failures,
      worldInitial: this.ft.worldInitial,
      worldFinal: this.ft.size,
      paramsSha256: paramsSha256(params, this.net.buffers),
      optimizerBytes: this.ft.shardedState?.bytes ?? { state: 4 * this.slots.length * params.length, redundancy: 0 },
    };
  }
}

/** sha256 of the parameters' bytes, then the buffers' (none for a net without batchnorm). */
function paramsSha256(params: Float32Array, buffers: Float32Array): string {
  const hash = createHash('sha256').update(Buffer.from(params.buffer, params.byteOffset, params.byteLength));
  return hash.update(Buffer.from(buffers.buffer, buffers.byteOffset, buffers.byteLength)).digest('hex');
}
