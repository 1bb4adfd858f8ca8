// Your own training loop with ft-train's protocol (in the spirit of Horovod's hvd.elastic.run and
// torchft's Manager): user code computes gradients however it likes; the loop gives it each held
// shard's micro-batch, sums the gradients over all shards in shard order (so the bits never depend
// on the world size), has the survivors vote on every step, repairs the communicator after a
// failure, reads back only the lost ranks' shards and asks for just their gradients again, and
// writes JIT and periodic checkpoints of the state it registered. No MPI in user code.
//
//   exitWhenDone(elastic({ data, runDir, steps, tensors: { w: [10, 784], b: [10] }, slots: ['velocity'] }, {
//     init(loop) { ...fill loop.tensors from the seed... },
//     async train(loop) {
//       while (!loop.done) {
//         const { gradient, loss } = await loop.sum((batch) => { ...gradient of batch into loop.gradient...; return meanLoss; });
//         ...update loop.state (and loop.slot('velocity')) from gradient...
//         await loop.commit({ lr });
//       }
//     },
//   }));
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { checkConfig, findCheckpoint, loadCheckpoint, type CheckpointManifest, type TrainingState } from '../checkpoint/checkpoint';
import { encodeSafetensors, type TensorInfo } from '../checkpoint/safetensors';
import { Dataset } from '../data/dataset';
import { MicroBatches } from '../data/micro-batches';
import type { ShardMap } from '../data/shard-map';
import type { ShardData } from '../data/split';
import { Manager, type Failure, type StateSource } from '../protocol/manager';
import { parseDrill } from '../liveness/drills';
import { ProtocolStop } from '../protocol/stop';
import type { KernelSettings } from '../nn/backend';
import { cpu } from '../nn/cpu';
import { levelAsked, type LevelAsked } from '../rank/kernel-level';
import { lossesText, RankJob } from '../rank/job';
import { launcherWorldSize } from '../rank/launcher-env';
import type { Summary } from '../run/records';
import { createRunDir, writeModel, writeSummary } from '../run/writer';
import { BatchBuffers, computeShards, evaluateSplit, type Evaluation, type GradientFn, type GradientTarget, type ScoreFn } from '../solver/shard-steps';
import { InputError, type TrainOutcome } from './train';
import { settingValues, type TrainSettings } from './train-settings';
import { runSettings } from '../run/settings';

export type { Evaluation, GradientFn, MicroBatch, Score, ScoreFn } from '../solver/shard-steps';

/** The settings of a custom loop: ft-train's own where they mean the same, and the state to keep. */
export interface LoopSettings extends Pick<TrainSettings, 'data' | 'runDir' | 'steps' | 'epochs' | 'batch' | 'seed' | 'shards'
  | 'minRanks' | 'maxRetries' | 'hangTimeout' | 'drill' | 'jitCheckpoint' | 'checkpointDir' | 'checkpointEvery' | 'keepCheckpoints' | 'resume' | 'isa'> {
  /** The state's tensors, name -> shape, laid out in this order in one flat buffer (`loop.state`). */
  tensors: Record<string, number[]>;
  /** Further state laid out like the tensors (e.g. an optimizer's 'velocity'), also checkpointed. */
  slots?: string[];
  /** Anything else that fixes the result (e.g. { lr: 0.1 }): recorded in checkpoints; a resume must match it. */
  identity?: Record<string, unknown>;
  /** A name for the model in the summary (default 'custom'). */
  model?: string;
}

/** What user code provides: the initial state, and the loop itself. */
export interface LoopProgram {
  /** Fills the state for step 0, the same on every rank (e.g. from settings.seed); not called on a resume or a join. */
  init(loop: ElasticLoop): void;
  /** Trains until `loop.done`, calling sum() then commit() once per step. */
  train(loop: ElasticLoop): Promise<void>;
}

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
  /** the step's learning rate, for the metrics and the report (default 0) */
  lr?: number;
  [field: string]: number | undefined;
}

const loopKeys = ['steps', 'epochs', 'batch', 'seed', 'shards', 'minRanks', 'maxRetries', 'hangTimeout', 'drill', 'jitCheckpoint',
  'checkpointDir', 'checkpointEvery', 'keepCheckpoints', 'resume', 'data', 'runDir', 'isa'] as const;

/** The loop's settings with defaults, or one InputError line. */
function resolveLoopSettings(settings: LoopSettings): Required<Pick<LoopSettings, 'batch' | 'seed' | 'minRanks' | 'maxRetries' | 'hangTimeout' | 'drill' | 'jitCheckpoint' | 'checkpointEvery' | 'keepCheckpoints' | 'isa'>> & LoopSettings {
  const fail = (message: string): never => { throw new InputError(`ft-train: ${message}`); };
  const resolved = { ...settings, ...settingValues(settings as unknown as Record<string, unknown>, loopKeys, (key) => key, fail) };
  if (settings.steps !== undefined && settings.epochs !== undefined) fail('give steps or epochs, not both');
  const tensors = Object.entries(settings.tensors ?? {});
  if (tensors.length === 0) fail('tensors: expected at least one, name -> shape');
  for (const [name, shape] of tensors) {
    if (!Array.isArray(shape) || shape.length === 0 || !shape.every((d) => Number.isSafeInteger(d) && d > 0)) fail(`tensors.${name}: expected a shape of positive integers, got ${JSON.stringify(shape)}`);
  }
  const slots = settings.slots ?? [];
  if (new Set(slots).size !== slots.length || slots.some((s) => typeof s !== 'string' || s === '')) fail(`slots: expected distinct names, got ${JSON.stringify(slots)}`);
  return resolved as unknown as ReturnType<typeof resolveLoopSettings>;
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
  private currentStep = 0;
  private lastLoss = NaN;
  private test?: ShardData;
  private started = 0;
  private evaluation?: Evaluation;
  private stopRequested = false;
  private stopAfterCommit = false;

  /** @internal */
  constructor(
    private readonly settings: ReturnType<typeof resolveLoopSettings>,
    private readonly ft: Manager,
    private readonly dataset: Dataset,
    private readonly plan: MicroBatches,
    private readonly job: RankJob,
  ) {
    let size = 0;
    for (const [name, shape] of Object.entries(settings.tensors)) {
      this.views.push({ name, shape, offset: size });
      size += shape.reduce((a, b) => a * b, 1);
    }
    this.state = new Float32Array(size);
    for (const view of this.views) this.tensors[view.name] = this.state.subarray(view.offset, view.offset + view.shape.reduce((a, b) => a * b, 1));
    this.gradient = new Float32Array(size);
    this.target = { gradient: this.gradient, statistics: new Float32Array(0) };
    this.slotData = new Map((settings.slots ?? []).map((name) => [name, new Float32Array(size)]));
    const largest = Math.max(plan.globalBatch, ...Array.from({ length: plan.layout.count }, (_, s) => plan.size(s)));
    this.buffers = new BatchBuffers(largest, dataset.sampleShape.reduce((a, b) => a * b, 1));
  }

  /** The step about to be computed (steps done so far). */
  get step(): number {
    return this.currentStep;
  }

  /** The current step's epoch. */
  get epoch(): number {
    return Math.floor(this.currentStep / this.plan.stepsPerEpoch);
  }

  /** Steps in all. */
  get totalSteps(): number {
    return this.settings.steps ?? (this.settings.epochs ?? 1) * this.plan.stepsPerEpoch;
  }

  /** Whether the run has reached its last step. */
  get done(): boolean {
    return this.currentStep >= this.totalSteps;
  }

  /** Working ranks now, and this rank's place among them. */
  get size(): number {
    return this.ft.size;
  }

  /** This rank's place among the working ranks (0 .. size - 1). */
  get rank(): number {
    return this.ft.rank;
  }

  /** Whether this rank leads (writes the run's files) now. */
  get isLeader(): boolean {
    return this.ft.isLeader;
  }

  /** Per-sample feature shape and class count of the dataset. */
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
   * The step's gradient summed over all shards in shard order, and its loss. `compute` runs once for
   * each micro-batch this rank must compute (again, after a failure, for shards taken over from a
   * lost rank): it writes the micro-batch's gradient, the sum of per-sample gradients divided by
   * `batch.samples`, into `loop.gradient` and returns the micro-batch's mean loss. Resolves once
   * the survivors have agreed on the step; the state must not change before then.
   */
  async sum(compute: GradientFn): Promise<StepSum> {
    const P = this.state.length;
    for (;;) {
      this.started = performance.now();
      this.ft.step = this.currentStep;
      this.ft.at('compute');
      await computeShards(this.ft, this.plan, this.currentStep, this.settings.seed, this.buffers, this.target, compute);
      const sum = this.ft.shardSum;
      const outcome = await this.ft.collective('collective', async () => {
        await sum.sum();
      }, this.stopRequested);
      if (!outcome.ok) continue; // recovered: the same step on the repaired world
      this.ft.at('update');
      if (outcome.stop) this.stopAfterCommit = true;
      this.lastLoss = sum.total[P];
      return { gradient: sum.total.subarray(0, P), loss: sum.total[P] };
    }
  }

  /** Records the step (metrics.jsonl, progress) after user code has applied it; a periodic checkpoint when due. */
  async commit(record: CommitRecord = {}): Promise<void> {
    const step = this.currentStep;
    const t = step % this.plan.stepsPerEpoch;
    this.currentStep += 1;
    this.ft.step = this.currentStep;
    const lr = record.lr ?? 0;
    this.job.observer.step({ ...record, step, epoch: Math.floor(step / this.plan.stepsPerEpoch), loss: this.lastLoss, lr, world: this.ft.size,
      samples: this.plan.samplesAt(t), step_ms: performance.now() - this.started, time: Date.now() });
    if (this.stopAfterCommit) {
      this.job.observer.log(`stopping after step ${this.currentStep - 1} on request (SIGTERM): checkpoint first`);
      await this.ft.checkpoint('sigterm');
      this.job.observer.event({ event: 'stop', step: this.currentStep, reason: 'sigterm', checkpoint: this.ft.lastCheckpoint });
      throw new ProtocolStop('sigterm', `stopped (SIGTERM) at step ${this.currentStep}`, this.ft.lastCheckpoint);
    }
    const every = this.settings.checkpointEvery;
    if (every > 0 && this.currentStep % every === 0 && !this.done) await this.ft.checkpoint('periodic');
  }

  /** Test accuracy and loss over the dataset's test split, divided over the ranks (`score` gives a batch's mean loss and correct count). */
  async evaluate(score: ScoreFn): Promise<Evaluation> {
    this.test ??= await this.dataset.test.readAll();
    this.evaluation = await evaluateSplit(this.ft, this.test, this.buffers, score);
    return this.evaluation;
  }

  /** @internal SIGTERM: a checkpoint and a clean stop after the current step. */
  requestStop(): void {
    this.stopRequested = true;
  }

  /** @internal the result once the loop is done */
  result(): LoopResult {
    const bytes = Buffer.from(this.state.buffer, this.state.byteOffset, this.state.byteLength);
    return {
      steps: this.currentStep, finalLoss: this.lastLoss, evaluation: this.evaluation, failures: this.ft.failures,
      worldInitial: this.ft.worldInitial, worldFinal: this.ft.size, stateSha256: createHash('sha256').update(bytes).digest('hex'),
    };
  }

  /** @internal the tensors of model.safetensors */
  modelTensors(): { name: string; shape: number[]; data: Float32Array }[] {
    return this.views.map((view) => ({ name: view.name, shape: view.shape, data: this.tensors[view.name] }));
  }

  /** @internal restores a checkpoint's state */
  restore(dir: string, manifest: CheckpointManifest): void {
    loadCheckpoint(dir, manifest, this.views, this.state, [...this.slotData].map(([name, data]) => ({ name, data })));
    this.currentStep = manifest.step;
    this.ft.worldHistory.push(...manifest.world_history);
    this.job.observer.event({ event: 'resume', step: this.currentStep, from: dir, world: this.ft.size });
  }

  /** @internal what the protocol asks of the loop, as it stands at the current step's start */
  stateSource(): StateSource {
    const slots = (): { name: string; data: Float32Array }[] => [...this.slotData].map(([name, data]) => ({ name, data }));
    return {
      state: (): TrainingState => ({ tensors: this.views, params: this.state, slots: slots(), held: { from: 0, to: this.state.length } }),
      position: () => ({ epoch: this.epoch }),
      stepRows: (_map: ShardMap, shards: readonly number[]) => {
        const t = this.currentStep % this.plan.stepsPerEpoch;
        return new Map(shards.map((shard) => [shard, this.plan.rows(shard, this.epoch, t)]));
      },
      // replicated state only: the protocol never asks for a sharded start
      initialState: (_slot, _from, _to, out) => out.fill(0),
      joinBuffers: () => [this.state, ...this.slotData.values()],
      joinAt: (step) => {
        this.currentStep = step;
      },
    };
  }
}

/**
 * Runs `program` as every rank of a job (start the script with launch/ft-run or `mpirun --with-ft
 * ulfm`): checks the settings and the dataset before MPI starts (bad ones reject with an
 * InputError, exit code 2), starts MPI (bounded), fills or restores the state, runs the program's
 * loop under the protocol, and has the final leader write model.safetensors (the tensors) and
 * summary.json. Resolves with the exit code the process should end with (see train()).
 */
export async function elastic(settings: LoopSettings, program: LoopProgram): Promise<TrainOutcome<LoopResult>> {
  const started = Date.now();
  const s = resolveLoopSettings(settings);
  const checkpointDir = s.checkpointDir ?? path.join(s.runDir, 'ckpt');
  const model = s.model ?? 'custom';
  let dataset: Dataset | undefined;
  let drills;
  let resume: ReturnType<typeof findCheckpoint> | undefined;
  let shards: number;
  let identity: Record<string, unknown>;
  let isa: LevelAsked;
  try {
    drills = s.drill.map(parseDrill);
    dataset = await Dataset.open(s.data);
    resume = s.resume !== undefined ? findCheckpoint(s.resume) : undefined;
    shards = resume?.manifest.shards ?? s.shards ?? launcherWorldSize();
    if (s.batch < shards) throw new Error(`batch ${s.batch} is smaller than the ${shards} shards: every shard takes at least one sample per step`);
    dataset.train.layout(shards);
    // isa auto resumes at the level the checkpoint was computed at
    isa = levelAsked(s.isa, resume && { dir: resume.dir, level: resume.manifest.config.isa });
    identity = {
      model, tensors: s.tensors, slots: s.slots ?? [], data: { train: dataset.manifest.splits.train.sha256, test: dataset.manifest.splits.test.sha256 },
      batch: s.batch, seed: s.seed, shards, steps: s.steps ?? null, epochs: s.epochs ?? null, user: s.identity ?? {},
      // the kernels' level user code computes at, if it uses ft-train's
      isa: isa.level,
    };
    if (resume) checkConfig(resume.dir, resume.manifest, identity);
    createRunDir(s.runDir, resume !== undefined);
  } catch (error) {
    await dataset?.close();
    throw new InputError(`ft-train: ${(error as Error).message}`);
  }
  const job = new RankJob({
    runDir: s.runDir, hangTimeout: s.hangTimeout, drills, steps: s.steps, stopOnSigterm: true, startStep: resume?.manifest.step ?? 0,
    isa,
  });
  const world = await job.start();
  identity.isa = job.kernels.level;
  const layout = dataset.train.layout(shards);
  const plan = new MicroBatches(layout, s.batch, s.seed);
  const size = Object.values(s.tensors).reduce((n, shape) => n + shape.reduce((a, b) => a * b, 1), 0);
  const ft = new Manager({
    onFailure: 'exact', shards, minRanks: s.minRanks, maxRetries: s.maxRetries, jitCheckpoint: s.jitCheckpoint === 'on', checkpointDir,
    keepCheckpoints: s.keepCheckpoints, spareCheckpoint: s.jitCheckpoint === 'on' || s.checkpointEvery > 0, identity, commTimeoutMs: job.bounds.commMs, pidsDir: job.pidsDir,
    // the user's gradient is copied into the sum once computed: nothing to overlap
    sumLength: size + 1, add: (acc, x) => cpu.addInPlace(acc, x), overlap: false, spares: 0, joined: job.joined,
  }, world, dataset, layout, job.observer, job.faults);
  const loop = new ElasticLoop(s, ft, dataset, plan, job);
  job.stopWith(() => loop.requestStop());
  if (job.runLog.isLeader) {
    job.runLog.event({ event: 'start', world: world.size, spares: 0, shards, on_failure: 'exact', batch: s.batch, isa: job.kernels.level });
    job.progress.line(`training ${model} (custom loop) on ${s.data}: ${world.size} ranks, ${shards} shards, global batch ${s.batch}, kernels at ${job.kernels.level}; run dir ${s.runDir}`);
  }
  let code = 0;
  let result: LoopResult | undefined;
  try {
    if (resume) loop.restore(resume.dir, resume.manifest);
    else program.init(loop);
    ft.step = loop.step;
    await ft.start(loop.stateSource(), resume !== undefined);
    await program.train(loop);
    await ft.finish(() => writeLoopResults(s, model, shards, loop, ft.bytesReadBack, started, identity, job.kernels));
    result = loop.result();
    if (ft.isLeader) {
      const lost = lossesText(result.failures);
      job.progress.line(`done: ${result.steps} steps, final loss ${result.finalLoss.toFixed(4)}, ${result.worldFinal} of ${result.worldInitial} ranks left` +
        `${lost ? ` (lost ${lost}; ${ft.bytesReadBack} bytes read back)` : ''}, state_sha256 ${result.stateSha256.slice(0, 16)}`);
    }
    job.logger.info('end', { ...result });
  } catch (error) {
    const stop = await job.stopped(error, ft, checkpointDir);
    if (stop.leave) return { exitCode: stop.code };
    code = stop.code;
  }
  return { exitCode: await job.end(code, ft, dataset), result };
}

function writeLoopResults(s: LoopSettings & { batch: number; seed: number }, model: string, shards: number, loop: ElasticLoop, bytesReadBack: number, started: number,
  identity: Record<string, unknown>, kernels: KernelSettings): void {
  const result = loop.result();
  writeModel(s.runDir, encodeSafetensors(loop.modelTensors(), { model, steps: String(result.steps), state_sha256: result.stateSha256 }));
  const summary: Summary = {
    status: 'complete', steps: result.steps, final_loss: result.finalLoss,
    test_accuracy: result.evaluation?.accuracy ?? null, test_loss: result.evaluation?.loss ?? null,
    wall_s: (Date.now() - started) / 1000, failures: result.failures, ranks_lost: result.failures.reduce((n, f) => n + f.lost.length, 0),
    bytes_read_back: bytesReadBack, world_initial: result.worldInitial, world_final: result.worldFinal, params_sha256: result.stateSha256,
    model, data: s.data, shards, on_failure: 'exact', batch: s.batch, seed: s.seed, optimizer: 'custom', optimizer_state: 'replicated',
    redundancy: null, optimizer_state_bytes_per_rank: 4 * (s.slots ?? []).length * loop.state.length, redundancy_bytes_per_rank: 0,
    settings: runSettings({ ...identity, on_failure: 'exact' }),
    kernels,
  };
  writeSummary(s.runDir, summary);
}
