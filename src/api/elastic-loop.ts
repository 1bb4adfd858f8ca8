// The loop handed to user code by elastic() (elastic.ts): the state it registered, in one flat
// buffer with named views and slots; the step; and the protocol's calls. sum() gives the step's
// gradient summed over all shards, voted, for user code's own update; update() has ft-train's
// optimizer make it (replicated or sharded state); commit() records the step through the Manager.
// It is also the protocol's state source: what a checkpoint or a joining rank takes of it.
import { loadCheckpoint, type CheckpointManifest, type TrainingState } from '../checkpoint/checkpoint';
import type { TensorInfo } from '../checkpoint/safetensors';
import type { Dataset } from '../data/dataset';
import { MicroBatches } from '../data/micro-batches';
import type { ShardMap } from '../data/shard-map';
import type { ShardData } from '../data/split';
import { cpu } from '../nn/cpu';
import type { Failure, LoopPosition, ProtocolObserver, ResumePoint, StateSource } from '../protocol/contracts';
import type { Manager } from '../protocol/manager';
import { DataPosition } from '../solver/data-position';
import { matrixRanges, Optimizer } from '../solver/optimizer';
import {
  BatchBuffers,
  evaluateSplit,
  readScoredSplit,
  type Evaluation,
  type GradientFn,
  type GradientTarget,
  type ScoreFn,
} from '../solver/shard-steps';
import { ReplicatedState } from '../solver/replicated-state';
import { DataParallelStep, type PreparedStep } from '../solver/step';
import type { LoopOptions } from './loop-settings';
import { paramsSha256 } from '../run/params-sha256';

/** A custom loop's result, on every rank that reached the end. */
export interface LoopResult {
  /** steps committed */
  steps: number;
  /** the last step's loss */
  finalLoss: number;
  /** the last evaluate()'s, if any */
  evaluation?: Evaluation;
  failures: Failure[];
  /** working ranks at the start and at the end */
  worldInitial: number;
  worldFinal: number;
  /** sha256 of the state's bytes */
  stateSha256: string;
}

/** A step's gradient summed over all shards, and its loss. */
export interface StepSum {
  /** laid out like `state`; valid until the next sum() */
  gradient: Float32Array;
  /** the step's mean loss over its global batch */
  loss: number;
}

/** Fields of the step record commit() writes to metrics.jsonl besides the loop's own. */
export interface CommitRecord {
  /** the step's learning rate, for the metrics and the report (default: update()'s, shrink mode's rescale included; else 0) */
  lr?: number;
  [field: string]: number | undefined;
}

/** The loop handed to user code: the state, the step, and the protocol's calls. */
export class ElasticLoop {
  /** The registered tensors, all in one buffer (`tensors` are views of it). */
  readonly state: Float32Array;
  /** Each registered tensor, a view of `state`. */
  readonly tensors: Record<string, Float32Array> = {};
  /** Where user code puts one micro-batch's gradient, laid out like `state`. */
  readonly gradient: Float32Array;
  /** user code's gradient, copied into the sum (it is the user's buffer, so never placed elsewhere) */
  private readonly target: GradientTarget;
  private readonly slotData: Map<string, Float32Array>;
  private readonly views: (TensorInfo & { offset: number })[] = [];
  private readonly buffers: BatchBuffers;
  private readonly data: DataPosition;
  private readonly steps: DataParallelStep;
  /** ft-train's optimizer, when it makes the update (update()); its state is replicated here unless sharded */
  private readonly optimizer?: ReplicatedState;
  /** sharded state resumed from a checkpoint: its slots, whole, until the first step commits */
  private initialSlots?: Float32Array[];
  /** the committed step's epoch, global samples and rate */
  private prepared: PreparedStep = { epoch: 0, samples: 0, lr: 0 };
  private test?: ShardData;
  private started = 0;
  private evaluation?: Evaluation;

  /** @internal */
  constructor(
    private readonly settings: LoopOptions,
    private readonly manager: Manager,
    private readonly dataset: Dataset,
    shards: number,
    private readonly observer: ProtocolObserver,
    /** the state, then one element: the sharded update's result lands here with the step's loss after it */
    stateWithTail: Float32Array,
  ) {
    let size = 0;
    for (const [name, shape] of Object.entries(settings.tensors)) {
      this.views.push({ name, shape, offset: size });
      size += shape.reduce((a, b) => a * b, 1);
    }
    this.state = stateWithTail.subarray(0, size);
    for (const view of this.views)
      this.tensors[view.name] = this.state.subarray(view.offset, view.offset + view.shape.reduce((a, b) => a * b, 1));
    this.gradient = new Float32Array(size);
    this.target = { gradient: this.gradient, statistics: new Float32Array(0) };
    this.slotData = new Map(settings.slots.map((name) => [name, new Float32Array(size)]));
    if (settings.updates) {
      const optimizer = new Optimizer(settings.optimizer, cpu, matrixRanges(this.views));
      const slots = settings.optimizerState === 'sharded' ? [] : optimizer.slots.map(() => new Float32Array(size));
      this.optimizer = new ReplicatedState(optimizer, cpu, slots);
    }
    const plan = new MicroBatches(dataset.train.layout(shards), settings.batch, settings.seed);
    this.data = new DataPosition(plan, settings, settings.rankBatch);
    this.buffers = new BatchBuffers(
      plan.largestBatch,
      dataset.sampleShape.reduce((a, b) => a * b, 1),
    );
    const parameters = { withTail: stateWithTail, buffers: new Float32Array(0), updateBuffers: () => undefined, toHost: () => undefined };
    this.steps = new DataParallelStep(settings, manager, this.data, this.buffers, parameters, cpu);
  }

  /** The step about to be computed (steps done so far). */
  get step(): number {
    return this.manager.step;
  }

  /** The current step's epoch. */
  get epoch(): number {
    return this.data.epoch(this.manager.step);
  }

  /** Steps in all (with epochs and a shrinking world, the plan's estimate). */
  get totalSteps(): number {
    return this.data.totalSteps;
  }

  /** Whether the run has reached its last step. */
  get done(): boolean {
    return this.data.done(this.manager.step);
  }

  /** Working ranks now. */
  get size(): number {
    return this.manager.world.size;
  }

  /** This rank's place among the working ranks (0 .. size - 1; -1 on a spare). */
  get rank(): number {
    return this.manager.world.rank;
  }

  /** Whether this rank leads (writes the run's files) now. */
  get isLeader(): boolean {
    return this.manager.world.isLeader;
  }

  /** Per-sample feature shape of the dataset. */
  get sampleShape(): readonly number[] {
    return this.dataset.sampleShape;
  }

  /** The dataset's class count. */
  get classes(): number {
    return this.dataset.classes;
  }

  /** A registered slot (see LoopSettings.slots), laid out like `state`. */
  slot(name: string): Float32Array {
    const data = this.slotData.get(name);
    if (!data) throw new RangeError(`slot: no slot named "${name}"; registered: ${[...this.slotData.keys()].join(', ') || 'none'}`);
    return data;
  }

  /**
   * The step's gradient summed over all shards (exact: in shard order), and its loss; user code
   * then updates the state. `compute` runs once for each micro-batch this rank must compute
   * (again, after a failure, for shards taken over from a lost rank): it writes the micro-batch's
   * gradient, the sum of per-sample gradients divided by `batch.samples`, into `loop.gradient` and
   * returns the micro-batch's mean loss. Resolves once the survivors have agreed on the step; the
   * state must not change before then. On a spare, compute never runs: the sum comes from the leader.
   */
  async sum(compute: GradientFn): Promise<StepSum> {
    if (this.settings.optimizerState === 'sharded')
      throw new Error("sum(): with optimizerState sharded the optimizer state is the protocol's: call update()");
    for (;;) {
      this.started = performance.now();
      this.prepared = this.steps.prepare(0);
      if (await this.steps.run(this.prepared, this.target, compute)) return { gradient: this.steps.gradient(), loss: this.steps.lastLoss };
    }
  }

  /**
   * The step's summed gradient applied by ft-train's optimizer (settings.optimizer) at rate `lr`
   * (shrink mode: rescaled as lrRescale says), its state replicated or sharded; the step's loss.
   * `compute` as for sum().
   */
  async update(compute: GradientFn, { lr }: { lr: number }): Promise<{ loss: number }> {
    if (!this.optimizer)
      throw new Error("update(): give settings.optimizer (ft-train's optimizer makes the update), or update the state from sum()");
    for (;;) {
      this.started = performance.now();
      this.prepared = this.steps.prepare(lr);
      if (!(await this.steps.run(this.prepared, this.target, compute, this.optimizer))) continue;
      if (this.manager.shardedState && !this.manager.shardedState.needsInitial) this.initialSlots = undefined;
      return { loss: this.steps.lastLoss };
    }
  }

  /** Records the step (metrics.jsonl, progress) after user code has applied it; a SIGTERM stop or a periodic checkpoint when due. */
  async commit(record: CommitRecord = {}): Promise<void> {
    const step = this.manager.step;
    const { epoch, samples, lr } = this.prepared;
    const stepMs = performance.now() - this.started;
    const { world } = this.manager;
    const spares = world.sparesLaunched ? { spares: world.spares.length } : {};
    await this.manager.commit(() =>
      this.observer.step({
        ...record,
        step,
        epoch,
        loss: this.steps.lastLoss,
        lr: record.lr ?? lr,
        world: world.size,
        ...spares,
        samples,
        step_ms: stepMs,
        time: Date.now(),
      }),
    );
  }

  /**
   * Test accuracy and loss over the dataset's test split, divided over the ranks (`score` gives a
   * batch's mean loss and correct count). A collective of every rank: call it after the loop, or
   * at a step's start (before sum/update), never between commit() and the next step, where a rank
   * that joined at the commit is already in the next step's sum.
   */
  async evaluate(score: ScoreFn): Promise<Evaluation> {
    this.test ??= await readScoredSplit(this.dataset.test, this.settings.evalSamples);
    this.evaluation = await evaluateSplit(this.manager, this.test, this.buffers, score);
    return this.evaluation;
  }

  /** @internal the result once the loop is done */
  result(): LoopResult {
    return {
      steps: this.manager.step,
      finalLoss: this.steps.lastLoss,
      evaluation: this.evaluation,
      failures: this.manager.failures,
      worldInitial: this.manager.world.initialSize,
      worldFinal: this.manager.world.size,
      stateSha256: paramsSha256([this.state]),
    };
  }

  /** @internal the optimizer state each rank holds, and what it keeps for peers */
  optimizerBytes(): { state: number; redundancy: number } {
    const replicated = this.optimizer?.length ?? 0;
    return this.manager.shardedState?.bytes ?? { state: 4 * (this.slotData.size * this.state.length + replicated), redundancy: 0 };
  }

  /** @internal the tensors of model.safetensors */
  modelTensors(): { name: string; shape: number[]; data: Float32Array }[] {
    return this.views.map((view) => ({ name: view.name, shape: view.shape, data: this.tensors[view.name] }));
  }

  /** @internal fills the state (`init`) or restores it, and starts the protocol */
  async start(init: (loop: ElasticLoop) => void, resume?: { dir: string; manifest: CheckpointManifest }): Promise<void> {
    if (!resume) init(this);
    await this.manager.start(this.stateSource(), resume && this.restore(resume.dir, resume.manifest));
  }

  /** Restores a checkpoint's state: where the run resumes. */
  private restore(dir: string, manifest: CheckpointManifest): ResumePoint {
    const sharded =
      this.settings.optimizerState === 'sharded' ? this.optimizerSlotNames().map(() => new Float32Array(this.state.length)) : undefined;
    const optimizer = this.optimizerSlotNames().map((name, k) => ({ name, data: sharded ? sharded[k] : this.optimizer!.onHost()[k] }));
    loadCheckpoint(dir, manifest, this.views, this.state, [...this.userSlots(), ...optimizer]);
    if (!sharded) this.optimizer?.hostWritten();
    this.initialSlots = sharded;
    this.data.takeUp(manifest);
    this.observer.event({ event: 'resume', step: manifest.step, from: dir, world: this.manager.world.size });
    return { step: manifest.step, worldHistory: manifest.world_history };
  }

  private optimizerSlotNames(): readonly string[] {
    return this.optimizer?.optimizer.slots ?? [];
  }

  private userSlots(): { name: string; data: Float32Array }[] {
    return [...this.slotData].map(([name, data]) => ({ name, data }));
  }

  /** @internal what the protocol asks of the loop, as it stands at the current step's start */
  stateSource(): StateSource {
    return {
      state: (): TrainingState => {
        const sharded = this.manager.shardedState?.held();
        const optimizer = this.optimizerSlotNames().map((name, k) => ({
          name,
          data: sharded ? sharded.slots[k] : this.optimizer!.onHost()[k],
        }));
        return {
          tensors: this.views,
          params: this.state,
          slots: [...this.userSlots(), ...optimizer],
          held: sharded ? { from: sharded.from, to: sharded.to } : { from: 0, to: this.state.length },
        };
      },
      position: (): LoopPosition => this.data.position(this.manager.step),
      done: () => this.done,
      lastStep: () => this.data.done(this.manager.step + 1),
      stepRows: (map: ShardMap, shards: readonly number[]) => this.data.stepRows(this.manager.step, map, shards),
      initialState: (slot, from, to, out) => {
        if (this.initialSlots) out.set(this.initialSlots[slot].subarray(from, to));
        else out.fill(0);
      },
      joinBuffers: () => [this.state, ...this.slotData.values(), ...(this.optimizer?.onHost() ?? [])],
      joinAt: (position) => this.data.takeUp(position),
      stateWritten: () => this.optimizer?.hostWritten(),
    };
  }
}
