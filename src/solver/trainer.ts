// The training loop. One step: each rank computes the gradients of its shards' micro-batches, the
// gradients are summed (exact: over all S shards in shard order; shrink/none: a plain allreduce),
// the survivors agree on the outcome, and only then is the update applied. A failed step leaves
// the parameters untouched on every survivor: the communicator is repaired, the lost ranks' shards
// are reassigned and read back, and the same step is tried again.
import { createHash } from 'node:crypto';
import { isFailure, type Communicator } from '../comm';
import { checkpointDir, commitCheckpoint, loadCheckpoint, pruneCheckpoints, writeStripe, type CheckpointManifest, type CheckpointMeta } from '../checkpoint/checkpoint';
import { repair } from '../comm/recovery';
import type { Dataset } from '../data/dataset';
import { gatherBatch, MicroBatches } from '../data/micro-batches';
import type { ShardLayout } from '../data/shard-layout';
import { ShardMap } from '../data/shard-map';
import type { ShardData } from '../data/split';
import type { Backend } from '../nn/backend';
import type { Net } from '../nn/net';
import type { RunEvent, StepRecord } from '../run/records';
import type { FaultInjector } from './fault-injection';
import { learningRate, type LrSchedule } from './lr-schedule';
import { ShardSum } from './shard-sum';
import { ShrinkSchedule, type Piece, type ShrinkStep } from './shrink-schedule';

export type FailurePolicy = 'exact' | 'shrink' | 'none';

export interface TrainConfig {
  /** global batch at the start */
  batch: number;
  steps?: number;
  epochs?: number;
  lr: number;
  momentum: number;
  weightDecay: number;
  lrSchedule: LrSchedule;
  seed: number;
  shards: number;
  onFailure: FailurePolicy;
  lrRescale: 'linear' | 'none';
  minRanks: number;
  /** evaluate on the test split every K steps (0: only at the end) */
  evalEvery: number;
  /** repair attempts per failure */
  maxRetries: number;
  /** write a checkpoint from the survivors after each failure */
  jitCheckpoint: boolean;
  checkpointDir: string;
  /** a checkpoint every K steps (0: none) */
  checkpointEvery: number;
  keepCheckpoints: number;
  /** the settings that fix the result, recorded in checkpoints */
  identity: Record<string, unknown>;
}

/** Why a run ended before its last step. */
export type StopReason = 'min-ranks' | 'sigterm';

interface Evaluation {
  accuracy: number;
  loss: number;
}

/** What the trainer reports to the run directory and the console. */
export interface TrainObserver {
  step(record: StepRecord): void;
  event(record: RunEvent): void;
  /** the lowest live rank leads (logs and metrics) */
  leader(isLeader: boolean): void;
  log(message: string): void;
}

export interface TrainResult {
  steps: number;
  finalLoss: number;
  testAccuracy: number;
  testLoss: number;
  failures: { step: number; lost: number[]; world: number }[];
  bytesReadBack: number;
  worldInitial: number;
  worldFinal: number;
  paramsSha256: string;
  stopped: StopReason | null;
  /** the last checkpoint written, if any */
  checkpoint: string | null;
}

const now = (): number => performance.now();

export class Trainer {
  private comm: Communicator;
  private map: ShardMap;
  private readonly layout: ShardLayout;
  private readonly plan: MicroBatches;
  private readonly shrink?: ShrinkSchedule;
  private sum?: ShardSum;
  private readonly held = new Map<number, ShardData>();
  private test?: ShardData;
  private readonly velocity: Float32Array;
  /** [gradient (P) | loss]: what one rank contributes to the sum in shrink and none modes */
  private readonly contribution: Float32Array;
  private readonly x: Float32Array;
  private readonly labels: Int32Array;
  private step = 0;
  private lastLoss = NaN;
  private readonly failures: TrainResult['failures'] = [];
  private bytesReadBack = 0;
  private readonly worldInitial: number;
  private failedAt = -1;
  private shrinkStep?: ShrinkStep;
  private stopRequested = false;
  private lastCheckpoint: string | null = null;
  private readonly worldHistory: CheckpointMeta['world_history'] = [];

  constructor(
    private readonly config: TrainConfig,
    world: Communicator,
    private readonly dataset: Dataset,
    private readonly net: Net,
    private readonly backend: Backend,
    private readonly observer: TrainObserver,
    private readonly faults: FaultInjector,
  ) {
    this.comm = world;
    this.worldInitial = world.size;
    this.layout = dataset.train.layout(config.shards);
    this.plan = new MicroBatches(this.layout, config.batch, config.seed);
    this.map = ShardMap.initial(config.shards, world.worldRanks);
    if (config.onFailure !== 'exact') {
      if (config.batch % world.size !== 0) throw new Error(`--batch ${config.batch} must be a multiple of the world size ${world.size} with --on-failure ${config.onFailure}`);
      this.shrink = new ShrinkSchedule(this.plan, config.batch / world.size);
    }
    const P = net.params.data.length;
    this.velocity = new Float32Array(P);
    this.contribution = new Float32Array(P + 1);
    const largest = Math.max(config.batch, ...Array.from({ length: config.shards }, (_, s) => this.plan.size(s)));
    this.x = new Float32Array(largest * net.inputSize);
    this.labels = new Int32Array(largest);
  }

  private get me(): number {
    return this.comm.worldRanks[this.comm.rank];
  }

  private get totalSteps(): number {
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

  async run(resume?: { dir: string; manifest: CheckpointManifest }): Promise<TrainResult> {
    this.observer.leader(this.isLeader());
    await this.load(this.map.shardsOf(this.me));
    this.test = await this.dataset.test.readAll();
    if (resume) this.restore(resume.dir, resume.manifest);
    else this.net.init(this.config.seed);
    this.worldHistory.push({ step: this.step, world: this.comm.size, lost: [] });
    this.rebuildSum();
    let evaluation: Evaluation | null = null;
    while (!this.done()) {
      const outcome = await this.attemptStep();
      if (outcome.record && this.config.evalEvery > 0 && this.step % this.config.evalEvery === 0 && !this.done()) {
        evaluation = await this.evaluate();
        if (!evaluation) return this.result(null, 'min-ranks');
        Object.assign(outcome.record, { test_accuracy: evaluation.accuracy, test_loss: evaluation.loss });
      }
      if (outcome.record) this.observer.step(outcome.record);
      if (outcome.stop) return this.result(null, outcome.stop);
      if (outcome.record && this.config.checkpointEvery > 0 && this.step % this.config.checkpointEvery === 0 && !this.done()) {
        if (!(await this.checkpointSafely('periodic'))) return this.result(null, 'min-ranks');
      }
    }
    evaluation = await this.evaluate();
    return this.result(evaluation, evaluation === null ? 'min-ranks' : null);
  }

  private restore(dir: string, manifest: CheckpointManifest): void {
    loadCheckpoint(dir, manifest, this.net.params.views, this.net.params.data, this.velocity);
    this.step = manifest.step;
    if (this.shrink && manifest.shrink) this.shrink.commit({ epoch: manifest.shrink.epoch, cursors: manifest.shrink.cursors, pieces: new Map(), samples: 0 });
    this.worldHistory.push(...manifest.world_history);
    this.observer.event({ event: 'resume', step: this.step, from: dir, world: this.comm.size });
    this.observer.log(`resumed from ${dir} at step ${this.step} on ${this.comm.size} ranks`);
  }

  /** One try at the current step: its metrics record once committed, and whether to stop after it. */
  private async attemptStep(): Promise<{ record?: StepRecord; stop?: StopReason }> {
    const step = this.step;
    const retried = this.failedAt === step;
    const started = now();
    const { epoch, samples, lr } = this.prepareStep();

    this.faults.at(step, 'compute');
    let sum: Float32Array | null = null;
    if (this.config.onFailure === 'exact') this.computeShards(epoch, samples);
    else this.computeRank(epoch, samples);

    this.faults.at(step, 'collective');
    const collectiveStart = now();
    try {
      sum = this.sum ? await this.sum.sum() : await this.allreduce();
    } catch (error) {
      if (!isFailure(error) || this.config.onFailure === 'none') throw error;
      this.noteFailure(error as Error, 'collective', now() - collectiveStart);
    }

    // the vote: bit 0 = my sum succeeded, bit 1 = nobody asked to stop (AND over the survivors)
    let agreed = (sum ? 1 : 0) | 2;
    let broken = sum === null;
    if (this.config.onFailure !== 'none') {
      this.faults.at(step, 'agree');
      const vote = await this.vote((sum ? 1 : 0) | (this.stopRequested ? 0 : 2), 2);
      agreed = vote.agreed;
      if (vote.failure) {
        broken = true;
        if (sum) this.noteFailure(vote.failure, 'agree', 0);
      }
    }
    const commit = (agreed & 1) === 1;

    let record: StepRecord | undefined;
    if (commit && sum) {
      this.faults.at(step, 'update');
      const P = this.net.params.data.length;
      this.backend.sgdUpdate(this.net.params.data, sum.subarray(0, P), this.velocity, lr, this.config.momentum, this.config.weightDecay);
      this.lastLoss = sum[P];
      this.shrink?.commit(this.shrinkStep!);
      this.step += 1;
      const stepMs = now() - started;
      if (retried) this.observer.event({ event: 'retry', step, duration_ms: stepMs });
      record = { step, epoch, loss: this.lastLoss, lr, world: this.comm.size, samples, step_ms: stepMs, time: Date.now() };
    }
    if (broken && !(await this.recover(step))) return { record, stop: 'min-ranks' };
    if ((agreed & 2) === 0) {
      this.observer.log(`stopping at step ${this.step} on request (SIGTERM): checkpoint first`);
      if (!(await this.checkpointSafely('sigterm'))) return { record, stop: 'min-ranks' };
      this.observer.event({ event: 'stop', step: this.step, reason: 'sigterm', checkpoint: this.lastCheckpoint });
      return { record, stop: 'sigterm' };
    }
    return { record };
  }

  /**
   * The AND of `flag` over the survivors. A failure raised by agree is raised on every survivor
   * alike and still carries the agreed flag (`unknown` stands in if it does not).
   */
  private async vote(flag: number, unknown: number): Promise<{ agreed: number; failure?: Error }> {
    try {
      return { agreed: await this.comm.agree(flag) };
    } catch (error) {
      if (!isFailure(error)) throw error;
      return { agreed: (error as { flag?: number }).flag ?? unknown, failure: error as Error };
    }
  }

  /** This step's epoch, global sample count and learning rate. */
  private prepareStep(): { epoch: number; samples: number; lr: number } {
    const base = learningRate(this.config.lrSchedule, this.config.lr, this.step, this.totalSteps);
    if (!this.shrink) {
      const t = this.step % this.plan.stepsPerEpoch;
      return { epoch: Math.floor(this.step / this.plan.stepsPerEpoch), samples: this.plan.samplesAt(t), lr: base };
    }
    this.shrinkStep = this.shrink.peek(this.map);
    const rescale = this.config.lrRescale === 'linear' ? this.shrinkStep.samples / this.config.batch : 1;
    return { epoch: this.shrinkStep.epoch, samples: this.shrinkStep.samples, lr: base * rescale };
  }

  /** Exact mode: one gradient per held shard, each into the shard-ordered sum. */
  private computeShards(epoch: number, samples: number): void {
    const t = this.step % this.plan.stepsPerEpoch;
    const gradients = this.net.params.gradients;
    for (const shard of this.sum!.held) {
      const rows = this.plan.rows(shard, epoch, t);
      let loss = 0;
      if (rows.length === 0) gradients.fill(0);
      else {
        const [x, labels] = this.batchBuffers(rows.length);
        gatherBatch(this.held.get(shard)!, rows, x, labels);
        const key = { seed: this.config.seed, epoch, step: t, shard };
        loss = this.net.lossAndGradient(x, labels, rows.length, key, samples).loss * (rows.length / samples);
      }
      this.sum!.put(shard, gradients, loss);
    }
  }

  /** Shrink and none modes: one gradient over this rank's pieces. */
  private computeRank(epoch: number, samples: number): void {
    const pieces: Piece[] = this.shrinkStep!.pieces.get(this.me) ?? [];
    let count = 0;
    for (const piece of pieces) {
      gatherBatch(this.held.get(piece.shard)!, piece.rows, this.x.subarray(count * this.net.inputSize), this.labels.subarray(count));
      count += piece.rows.length;
    }
    const P = this.net.params.data.length;
    if (count === 0) {
      this.contribution.fill(0);
      return;
    }
    const key = { seed: this.config.seed, epoch, step: this.step, shard: pieces[0].shard };
    const { loss } = this.net.lossAndGradient(...this.batchBuffers(count), count, key, samples);
    this.contribution.set(this.net.params.gradients);
    this.contribution[P] = loss * (count / samples);
  }

  /** Views of the input and label buffers sized for `count` samples. */
  private batchBuffers(count: number): [Float32Array, Int32Array] {
    return [this.x.subarray(0, count * this.net.inputSize), this.labels.subarray(0, count)];
  }

  private async allreduce(): Promise<Float32Array> {
    await this.comm.allreduce(this.contribution, 'sum');
    return this.contribution;
  }

  private noteFailure(error: Error, phase: string, detectMs: number): void {
    if (this.failedAt === this.step) return;
    this.failedAt = this.step;
    this.observer.event({ event: 'failure', step: this.step, phase, error: error.name, detect_ms: detectMs });
    this.observer.log(`step ${this.step}: ${error.name} in the ${phase} phase`);
  }

  /** The recovery protocol; false when fewer than --min-ranks survive (after a checkpoint). */
  private async recover(step: number): Promise<boolean> {
    this.faults.at(step, 'recovery');
    if (this.failedAt !== step) this.noteFailure(new Error('agreed failure'), 'agree', 0);
    for (;;) {
      const fixed = await repair(this.comm, step, this.config.maxRetries);
      this.comm = fixed.comm;
      this.observer.leader(this.isLeader());
      this.observer.event({ event: 'revoke+shrink', step, lost: fixed.lost, world: this.comm.size, duration_ms: fixed.revokeShrinkMs, attempts: fixed.attempts });
      this.observer.event({ event: 'agree', step, duration_ms: fixed.agreeMs });
      if (fixed.lost.length > 0) {
        this.failures.push({ step, lost: fixed.lost, world: this.comm.size });
        this.worldHistory.push({ step, world: this.comm.size, lost: fixed.lost });
      }
      const readStart = now();
      const next = this.map.without(fixed.lost);
      const moved = this.map.movedTo(next);
      if (this.comm.size >= this.config.minRanks) await this.load(moved.get(this.me) ?? []);
      let bytes = 0;
      for (const shards of moved.values()) for (const s of shards) bytes += this.dataset.train.shardBytes(this.layout, s);
      this.map = next;
      this.rebuildSum();
      const below = this.comm.size < this.config.minRanks;
      if (!below) {
        this.bytesReadBack += bytes;
        this.observer.event({ event: 'readback', step, shards: [...moved.values()].flat().sort((a, b) => a - b), bytes, duration_ms: now() - readStart });
        this.observer.log(`step ${step}: lost rank(s) ${fixed.lost.join(', ') || 'none'}; revoke+shrink ${fixed.revokeShrinkMs.toFixed(1)} ms, agree ${fixed.agreeMs.toFixed(1)} ms, ` +
          `read back ${bytes} bytes in ${(now() - readStart).toFixed(1)} ms; retrying on ${this.comm.size} ranks`);
      }
      if (below || this.config.jitCheckpoint) {
        try {
          await this.writeCheckpoint(below ? 'min-ranks' : 'jit');
        } catch (error) {
          if (!isFailure(error)) throw error;
          this.observer.log(`step ${step}: a failure while writing the checkpoint; repairing again`);
          continue;
        }
      }
      if (below) {
        this.observer.event({ event: 'stop', step, reason: 'below-min-ranks', world: this.comm.size, min_ranks: this.config.minRanks, checkpoint: this.lastCheckpoint });
        this.observer.log(`${this.comm.size} rank(s) left, below --min-ranks ${this.config.minRanks}: stopping (checkpoint ${this.lastCheckpoint})`);
        return false;
      }
      return true;
    }
  }

  /** A checkpoint that survives failures while it is written (false: below --min-ranks). */
  private async checkpointSafely(reason: string): Promise<boolean> {
    try {
      await this.writeCheckpoint(reason);
      return true;
    } catch (error) {
      if (!isFailure(error)) throw error;
      this.noteFailure(error as Error, 'checkpoint', 0);
      return this.recover(this.step);
    }
  }

  /** Every live rank writes its stripe of the state at the current step's start; the leader commits. */
  private async writeCheckpoint(reason: string): Promise<void> {
    const started = now();
    const state = { tensors: this.net.params.views, params: this.net.params.data, velocity: this.velocity };
    const dir = checkpointDir(this.config.checkpointDir, this.step);
    const mine = Buffer.from(writeStripe(dir, state, this.comm.rank, this.comm.size), 'hex');
    const digests = new Uint8Array(mine.length * this.comm.size);
    await this.comm.allgather(new Uint8Array(mine), digests);
    const meta: CheckpointMeta = {
      step: this.step,
      epoch: this.shrink ? this.shrink.epoch : Math.floor(this.step / this.plan.stepsPerEpoch),
      reason,
      shards: this.config.shards,
      shard_map: this.map.toJSON(),
      seed: this.config.seed,
      config: this.config.identity,
      config_sha256: createHash('sha256').update(JSON.stringify(this.config.identity)).digest('hex'),
      rng: { seed: this.config.seed, kind: 'counter-based' },
      world_history: this.worldHistory,
      shrink: this.shrink ? { epoch: this.shrink.epoch, cursors: this.shrink.cursors } : undefined,
    };
    if (this.isLeader()) {
      const hex = Array.from({ length: this.comm.size }, (_, i) => Buffer.from(digests.subarray(mine.length * i, mine.length * (i + 1))).toString('hex'));
      const manifest = commitCheckpoint(dir, meta, state, hex);
      pruneCheckpoints(this.config.checkpointDir, this.config.keepCheckpoints);
      this.observer.event({ event: 'checkpoint', step: this.step, reason, dir, bytes: manifest.file.bytes, stripes: this.comm.size, duration_ms: now() - started });
    }
    this.lastCheckpoint = dir;
  }

  private rebuildSum(): void {
    this.sum = this.config.onFailure === 'exact' ? new ShardSum(this.comm, this.map, this.net.params.data.length + 1, (acc, x) => this.backend.addInPlace(acc, x)) : undefined;
  }

  private async load(shards: number[]): Promise<void> {
    for (const [s, data] of await this.dataset.train.readShards(this.layout, shards)) this.held.set(s, data);
  }

  private isLeader(): boolean {
    return this.me === Math.min(...this.comm.worldRanks);
  }

  /** Test accuracy and loss, the test split divided over the live ranks; survives failures (null: stopped). */
  private async evaluate(): Promise<Evaluation | null> {
    const test = this.test!;
    for (;;) {
      const from = Math.floor((this.comm.rank * test.rows) / this.comm.size);
      const to = Math.floor(((this.comm.rank + 1) * test.rows) / this.comm.size);
      const totals = new Float64Array(2); // correct, summed loss
      const chunk = Math.floor(this.x.length / this.net.inputSize);
      for (let first = from; first < to; first += chunk) {
        const rows = Int32Array.from({ length: Math.min(chunk, to - first) }, (_, i) => first + i);
        const [x, labels] = this.batchBuffers(rows.length);
        gatherBatch(test, rows, x, labels);
        const { loss, correct } = this.net.evaluate(x, labels, rows.length);
        totals[0] += correct;
        totals[1] += loss * rows.length;
      }
      let summed = 1;
      try {
        await this.comm.allreduce(totals, 'sum');
      } catch (error) {
        if (!isFailure(error) || this.config.onFailure === 'none') throw error;
        summed = 0;
      }
      const evaluation = { accuracy: totals[0] / test.rows, loss: totals[1] / test.rows };
      if (this.config.onFailure === 'none') return evaluation;
      // as in a step: every rank votes, whatever its allreduce did, so all take the same path
      const vote = await this.vote(summed, 0);
      if (vote.agreed === 1 && !vote.failure) return evaluation;
      this.noteFailure(vote.failure ?? new Error('failure during evaluation'), 'evaluation', 0);
      if (!(await this.recover(this.step))) return null;
      if (vote.agreed === 1) return evaluation;
    }
  }

  private result(evaluation: Evaluation | null, stopped: StopReason | null): TrainResult {
    const params = this.net.params.data;
    return {
      steps: this.step,
      finalLoss: this.lastLoss,
      testAccuracy: evaluation?.accuracy ?? NaN,
      testLoss: evaluation?.loss ?? NaN,
      failures: this.failures,
      bytesReadBack: this.bytesReadBack,
      worldInitial: this.worldInitial,
      worldFinal: this.comm.size,
      paramsSha256: createHash('sha256').update(Buffer.from(params.buffer, params.byteOffset, params.byteLength)).digest('hex'),
      stopped,
      checkpoint: this.lastCheckpoint,
    };
  }
}
