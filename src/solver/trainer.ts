// The trainer's loop, read top to bottom: each step's learning rate, one data-parallel step of the
// Net (step.ts: compute, the voted sum, the update; false when a failure was recovered from, and the
// same step is computed again), then the Manager's commit, which records the step (with an
// evaluation every --eval-every steps) and takes a SIGTERM stop or a periodic checkpoint. The
// trainer is also the protocol's StateSource: what a checkpoint or a joining rank takes of it.
import { loadCheckpoint, type CheckpointManifest, type TrainingState } from '../checkpoint/checkpoint';
import type { Dataset } from '../data/dataset';
import { MicroBatches } from '../data/micro-batches';
import type { ShardMap } from '../data/shard-map';
import type { ShardData } from '../data/split';
import type { Failure, FailurePolicy, LoopPosition, ProtocolObserver, ResumePoint, StateSource } from '../protocol/contracts';
import type { Manager } from '../protocol/manager';
import type { Backend } from '../nn/backend';
import type { Net } from '../nn/net';
import { Stream, streamVector } from '../nn/stream-memory';
import { paramsSha256 } from '../run/params-sha256';
import type { StepRecord } from '../run/records';
import { learningRate, type LrSchedule } from './lr-schedule';
import { matrixRanges, Optimizer, type OptimizerSettings } from './optimizer';
import { BatchBuffers, evaluateSplit, readScoredSplit, type Evaluation, type GradientTarget, type MicroBatch } from './shard-steps';
import { DataPosition } from './data-position';
import { ReplicatedState } from './replicated-state';
import { DataParallelStep } from './step';

export type { Failure, FailurePolicy } from '../protocol/contracts';
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
  /** clip the summed gradient to this global norm (0: off) */
  clipNorm: number;
  seed: number;
  shards: number;
  onFailure: FailurePolicy;
  lrRescale: 'linear' | 'none';
  /** evaluate on the test split every K steps (0: only at the end) */
  evalEvery: number;
  /** evaluations score the test split's first N samples (undefined: all of them) */
  evalSamples?: number;
  /** a checkpoint every K steps (0: none) */
  checkpointEvery: number;
  /** set on a spawned rank, which warmed its kernels up before it joined (warmUpKernels) */
  joinId?: number;
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
  /** the test samples scored (--eval-samples) */
  testSamples: number;
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

/**
 * The kernels made ready, before a spare waits or a spawned rank says it is ready: one pass over a
 * batch of zeros at each shard's size. The first pass would otherwise come on the critical path
 * (a spare takes a lost rank's place and computes its shards at once; the ranks wait in the join
 * for a spawned one), where oneDNN builds each primitive the first time it meets a shape. Nothing
 * of the state changes: a pass overwrites only the gradients and statistics, which the next pass
 * computes anew.
 */
export function warmUpKernels(net: Net, dataset: Dataset, config: Pick<TrainConfig, 'shards' | 'batch' | 'seed'>): void {
  const plan = new MicroBatches(dataset.train.layout(config.shards), config.batch, config.seed);
  warmUpPasses(net, new BatchBuffers(plan.largestBatch, net.inputSize, (length) => net.inputBuffer(length)), plan, config);
}

function warmUpPasses(net: Net, buffers: BatchBuffers, plan: MicroBatches, config: Pick<TrainConfig, 'shards' | 'seed'>): void {
  const sizes = new Set(Array.from({ length: config.shards }, (_, shard) => plan.fullest(shard)));
  for (const rows of sizes) {
    const [x, labels] = buffers.view(rows);
    x.fill(0);
    labels.fill(0);
    net.lossAndGradient(x, labels, rows, { seed: config.seed, epoch: 0, step: 0, shard: 0 });
  }
}

export class Trainer implements StateSource {
  private readonly data: DataPosition;
  private test?: ShardData;
  private readonly optimizer: Optimizer;
  /**
   * replicated optimizer state, each slot over all P parameters (sharded: none, the Manager holds
   * it), and its update, where the net computes (on a GPU, in device memory)
   */
  private readonly replicated: ReplicatedState;
  /** sharded state resumed from a checkpoint: its slots, whole, until the first step commits (ShardedState's initial state) */
  private initialSlots?: Float32Array[];
  private readonly buffers: BatchBuffers;
  /** exact mode: the net's gradient and statistics, placed straight in the sum's slots */
  private readonly gradientTarget: GradientTarget;
  private readonly steps: DataParallelStep;

  constructor(
    private readonly config: TrainConfig,
    private readonly manager: Manager,
    private readonly dataset: Dataset,
    private readonly net: Net,
    backend: Backend,
    private readonly observer: ProtocolObserver,
  ) {
    const plan = new MicroBatches(dataset.train.layout(config.shards), config.batch, config.seed);
    this.data = new DataPosition(
      plan,
      config,
      config.onFailure === 'exact' ? undefined : (config.rankBatch ?? config.batch / manager.world.size),
    );
    const P = net.params.data.length;
    // sharded state updates its chunks on the host (src/sharding), replicated state where the net computes
    const updating = config.optimizerState === 'sharded' ? backend : net.backend;
    this.optimizer = new Optimizer(config.optimizer, updating, matrixRanges(net.params.views));
    const slots = config.optimizerState === 'sharded' ? [] : this.optimizer.slots.map((_, k) => streamVector(P, Stream.state + k));
    this.replicated = new ReplicatedState(this.optimizer, updating, slots, net);
    this.buffers = new BatchBuffers(plan.largestBatch, net.inputSize, (length) => net.inputBuffer(length));
    this.gradientTarget = {
      get gradient() {
        return net.params.gradients;
      },
      get statistics() {
        return net.statistics;
      },
      place: (vector) => net.placeGradients(vector),
    };
    const parameters = {
      withTail: net.params.dataWithTail,
      toHost: () => void net.hostParams(),
      buffers: net.buffers,
      updateBuffers: (statistics: Float32Array) => net.updateBuffers(statistics),
    };
    this.steps = new DataParallelStep(config, manager, this.data, this.buffers, parameters, backend);
  }

  /** The run's length in steps (with --epochs and a shrinking world, the plan's estimate). */
  get totalSteps(): number {
    return this.data.totalSteps;
  }

  /** StateSource: whether the run has reached its end. */
  done(): boolean {
    return this.data.done(this.manager.step);
  }

  /** StateSource: whether the current step is the run's last. */
  lastStep(): boolean {
    return this.data.done(this.manager.step + 1);
  }

  /** Trains to the end; throws ProtocolStop when the run stops early (SIGTERM, --min-ranks, an error). */
  async run(resume?: { dir: string; manifest: CheckpointManifest }): Promise<TrainResult> {
    const from = resume ? this.restore(resume.dir, resume.manifest) : undefined;
    // a spawned rank's parameters come with the join: its own init would only keep the others waiting
    if (!resume && this.config.joinId === undefined) this.net.init(this.config.seed);
    const world = this.manager.world;
    // a spawned rank warmed up before it said it was ready (warmUpKernels)
    if (world.spares.includes(world.worldRank) && this.config.joinId === undefined) this.warmUp();
    await this.manager.start(this, from);
    this.test = await readScoredSplit(this.dataset.test, this.config.evalSamples);
    while (!this.done()) await this.trainStep();
    this.manager.endTraining();
    return this.result(await this.evaluate());
  }

  /** A spare's kernels made ready before it waits (see warmUpKernels). */
  private warmUp(): void {
    warmUpPasses(this.net, this.buffers, this.data.plan, this.config);
  }

  /** One try at the current step: committed and recorded, or recovered from (the same step comes again). */
  private async trainStep(): Promise<void> {
    const manager = this.manager;
    const step = manager.step;
    const started = performance.now();
    const prepared = this.steps.prepare(learningRate(this.config.lrSchedule, this.config.lr, step, this.totalSteps));
    const compute = (batch: MicroBatch): number =>
      this.net.lossAndGradient(batch.x, batch.labels, batch.rows, batch.key, batch.samples, batch.progress).loss;
    if (!(await this.steps.run(prepared, this.gradientTarget, compute, this.replicated))) return;
    if (manager.shardedState && !manager.shardedState.needsInitial) this.initialSlots = undefined;
    const { epoch, samples, lr } = prepared;
    const spares = manager.world.sparesLaunched ? { spares: manager.world.spares.length } : {};
    const record: StepRecord = {
      step,
      epoch,
      loss: this.steps.lastLoss,
      lr,
      world: manager.world.size,
      ...spares,
      samples,
      step_ms: performance.now() - started,
      time: Date.now(),
    };
    await manager.commit(async () => {
      if (this.config.evalEvery > 0 && manager.step % this.config.evalEvery === 0 && !this.done()) {
        const evaluation = await this.evaluate();
        Object.assign(record, { test_accuracy: evaluation.accuracy, test_loss: evaluation.loss });
      }
      this.observer.step(record);
    });
  }

  /** Test accuracy and loss, the test split divided over the live ranks; redone after a recovery. */
  private evaluate(): Promise<Evaluation> {
    return evaluateSplit(this.manager, this.test!, this.buffers, (x, labels, rows) => this.net.evaluate(x, labels, rows));
  }

  /** Loads the checkpoint: where the run resumes. */
  private restore(dir: string, manifest: CheckpointManifest): ResumePoint {
    const P = this.net.params.data.length;
    const slots = this.config.optimizerState === 'sharded' ? this.optimizer.slots.map(() => new Float32Array(P)) : this.replicated.onHost();
    loadCheckpoint(
      dir,
      manifest,
      this.net.params.views,
      this.net.params.data,
      this.optimizer.slots.map((name, k) => ({ name, data: slots[k] })),
      this.heldBuffers(),
    );
    if (this.config.optimizerState === 'sharded') this.initialSlots = slots;
    else this.replicated.hostWritten();
    this.data.takeUp(manifest);
    this.observer.event({ event: 'resume', step: manifest.step, from: dir, world: this.manager.world.size });
    this.observer.log(`resumed from ${dir} at step ${manifest.step} on ${this.manager.world.size} ranks`);
    return { step: manifest.step, worldHistory: manifest.world_history };
  }

  /** StateSource: the state at the current step's start (no survivor has updated it yet). */
  state(): TrainingState {
    const params = this.net.hostParams();
    const sharded = this.manager.shardedState?.held();
    const slots = sharded ? sharded.slots : this.replicated.onHost();
    return {
      tensors: this.net.params.views,
      params,
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
    return [this.net.hostParams(), ...this.replicated.onHost(), ...(this.net.buffers.length > 0 ? [this.net.buffers] : [])];
  }

  /** StateSource: the protocol wrote into the arrays of state() or joinBuffers() (a rollback, a join). */
  stateWritten(): void {
    this.replicated.hostWritten();
  }

  /** StateSource: a spawned rank takes up the run's data position. */
  joinAt(position: LoopPosition): void {
    this.data.takeUp(position);
  }

  /** StateSource: the rows the current step reads of `shards` under `map`. */
  stepRows(map: ShardMap, shards: readonly number[]): Map<number, Int32Array> {
    return this.data.stepRows(this.manager.step, map, shards);
  }

  /** StateSource: the epoch and shrink mode's data position. */
  position(): LoopPosition {
    return this.data.position(this.manager.step);
  }

  private result(evaluation: Evaluation): TrainResult {
    // on the host from here on: the final write (model.safetensors) reads them there
    const params = this.net.hostParams();
    return {
      steps: this.manager.step,
      finalLoss: this.steps.lastLoss,
      testAccuracy: evaluation.accuracy,
      testLoss: evaluation.loss,
      testSamples: evaluation.samples,
      failures: this.manager.failures,
      worldInitial: this.manager.world.initialSize,
      worldFinal: this.manager.world.size,
      paramsSha256: paramsSha256([params, this.net.buffers]),
      optimizerBytes: this.manager.shardedState?.bytes ?? { state: 4 * this.replicated.length, redundancy: 0 },
    };
  }
}
