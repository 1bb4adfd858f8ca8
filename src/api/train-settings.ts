// ft-train's settings, one table for both front doors: the command line's flags (src/cli/train-flags.ts
// builds them from it, kebab-cased) and the library's options object (`train()`
// and the custom loop take the same names, camelCased, with the same defaults and checks). Every
// problem is one line naming the setting as the caller wrote it (`--lr` or `lr`).
import * as path from 'node:path';
import { parseDrill, phases, type Drill } from '../liveness/drills';
import { parseRedundancy, type RedundancySpec } from '../sharding/placement';
import { cpuLevels, type Device } from '../nn/backend';
import type { ModelSpec } from '../nn/spec';
import type { LevelRequest } from '../rank/kernel-level';
import { parseLrSchedule, withWarmup, type LrSchedule } from '../solver/lr-schedule';
import { optimizerNames, type OptimizerName, type OptimizerSettings } from '../solver/optimizer';
import type { FailurePolicy, RespawnJoin } from '../protocol/contracts';
import type { OnCorruption } from '../protocol/verification';
import type { BalanceSettings } from '../protocol/balance';

/** The default --hang-timeout, seconds (launch/ft-run gives MPI's detector the same value). */
export const defaultHangTimeoutS = 30;

/**
 * Checks for silent data corruption every this many steps by default: a check costs about one
 * shard's gradient (the spot check) and a digest of the state, under 2% of a step at 100.
 */
export const defaultVerifyEvery = 100;

/**
 * What `train()` takes: every ft-train flag, camelCased (`--weight-decay` is `weightDecay`), each
 * optional but `model`, `data` and `runDir`, with the command line's defaults.
 */
export interface TrainSettings {
  /** Model spec: a JSON file (e.g. models/lenet.json) or the spec itself as an object. */
  model: string | ModelSpecInput;
  /** Dataset directory (written by ft-data or launch/prepare), e.g. datasets/fashion-mnist. */
  data: string;
  /** New directory for metrics, events, summary and model. */
  runDir: string;
  /** Steps to train; or `epochs`. */
  steps?: number;
  /** Epochs to train (default 1 when `steps` is absent). */
  epochs?: number;
  /** Global batch, split over the shards (default 64). */
  batch?: number;
  /** 'sgd' (momentum, L2 weight decay; default) or 'adamw' (PyTorch's). */
  optimizer?: OptimizerName;
  /** Learning rate (default 0.01 for sgd, 0.001 for adamw). */
  lr?: number;
  /** SGD momentum (default 0.9). */
  momentum?: number;
  /** Weight decay (default 5e-4 for sgd, 0.01 for adamw). */
  weightDecay?: number;
  /** AdamW: decay of the first moment (default 0.9). */
  beta1?: number;
  /** AdamW: decay of the second moment (default 0.999). */
  beta2?: number;
  /** AdamW: added to the denominator (default 1e-8). */
  eps?: number;
  /** 'replicated' (default): every rank holds all optimizer state; 'sharded': one chunk each (exact mode). */
  optimizerState?: 'replicated' | 'sharded';
  /** Sharded state's copies in peers' memory: none | replicate:M[:group|:ring] | ec:K+M (default replicate:2). */
  redundancy?: string;
  /** constant (default) | cosine | step:EVERY:GAMMA */
  lrSchedule?: string;
  /** Steps of linear warm-up before the schedule (default 0). */
  warmupSteps?: number;
  /** Scale the summed gradient down to this global norm where it is larger (default 0: off). */
  clipNorm?: number;
  /** Seed of init, shuffles and dropout (default 1). */
  seed?: number;
  /** Logical shards S (default: the initial world size). */
  shards?: number;
  /** 'exact' (default): bit-identical result; 'shrink': survivors keep their batch; 'none': no fault tolerance. */
  onFailure?: FailurePolicy;
  /** Shrink mode: scale the rate with the global batch, 'linear' (default) or 'none'. */
  lrRescale?: 'linear' | 'none';
  /** Stop (exit code 3) when fewer ranks survive (default 1). */
  minRanks?: number;
  /** Repair attempts per failure (default 5). */
  maxRetries?: number;
  /** Seconds without progress after which a rank counts as failed (default 30). */
  hangTimeout?: number;
  /** Hot spares: the launch's last K ranks, before any reserves (default 0). */
  spares?: number;
  /** Spawn ranks to replace the lost that no spare replaced, and to refill the spares (exact mode; default false). */
  respawn?: boolean;
  /** With respawn: the launch's last R ranks (after the spares) sleep until woken to replace a lost rank, before any is spawned (default 0). */
  reserves?: number;
  /** With respawn: ranks spawned in all, at most (default: the initial working world size). */
  respawnLimit?: number;
  /** With respawn: when spawned ranks join: 'ready' (default: training goes on; they join at the first step's end once ready) or 'wait' (at the retried step's end, waiting for them). */
  respawnJoin?: RespawnJoin;
  /** Fault drills "rank=R,step=K[,phase=P][,action=A]" (for tests; default none). */
  drill?: string[];
  /** Check for silent data corruption every K steps (exact mode; default 100 there, else 0; 0: never). */
  verifyEvery?: number;
  /** What a corruption a check names a rank for does: 'evict' (default: evict it, roll back, replay) or 'stop'. */
  onCorruption?: OnCorruption;
  /** Slow ranks: 'auto' (default in exact mode) moves shards off them at step ends, the bits unchanged; 'off'. */
  rebalance?: 'auto' | 'off';
  /** A rank is slow when its compute time per shard is at least 1 + M times the others' (default 0.5). */
  slowMargin?: number;
  /** Steps a rank's speed is the median of, and the fewest steps between two rebalances (default 3). */
  slowSteps?: number;
  /** A rank this many times slower than the others at 4 x slowSteps steps in a row is evicted where a spare or respawn takes its place (default 4; 0: never). */
  evictSlower?: number;
  /** 'on' (default): after a failure the survivors write a checkpoint of the failed step's start. */
  jitCheckpoint?: 'on' | 'off';
  /** Where checkpoints go (default: <runDir>/ckpt). */
  checkpointDir?: string;
  /** Also a checkpoint every K steps (default 0: none). */
  checkpointEvery?: number;
  /** Complete checkpoints kept, newest first (default 3). */
  keepCheckpoints?: number;
  /** Continue from a checkpoint, a checkpoint directory or a run directory. */
  resume?: string;
  /** Test-set evaluation every K steps (default 0: at the end only). */
  evalEvery?: number;
  /** Test samples an evaluation scores: the test split's first N, the same at any world size (default: all of them). */
  evalSamples?: number;
  /** A language model: tokens of text it writes after training, into the run's sample.txt (default 200; 0: none). */
  sampleTokens?: number;
  /** Compute threads per rank (default 1; the result depends on it). */
  threads?: number;
  /** Where the net computes: 'cpu' (default) or 'cuda' (an NVIDIA GPU per rank; the result depends on it). */
  device?: Device;
  /** The CPU kernels' instruction-set level: 'auto' (default: the best every rank's host runs; a resume: the checkpoint's), a level, or 'native'. */
  isa?: LevelRequest;
}

/** A model spec given as an object: the JSON file's fields (see models/*.json). */
export type ModelSpecInput = Omit<ModelSpec, 'file' | 'name' | 'layers'> & { name?: string; layers: unknown[] } & Record<string, unknown>;

/** The settings resolved: defaults filled in, texts parsed, cross-checks passed. */
export interface TrainOptions {
  model: string | ModelSpecInput;
  data: string;
  runDir: string;
  steps?: number;
  epochs?: number;
  batch: number;
  lr: number;
  optimizer: OptimizerSettings;
  optimizerState: 'replicated' | 'sharded';
  redundancy: RedundancySpec;
  lrSchedule: LrSchedule;
  clipNorm: number;
  seed: number;
  shards?: number;
  onFailure: FailurePolicy;
  lrRescale: 'linear' | 'none';
  minRanks: number;
  maxRetries: number;
  hangTimeout: number;
  spares: number;
  respawn: boolean;
  reserves: number;
  respawnLimit?: number;
  respawnJoin: RespawnJoin;
  drills: Drill[];
  verifyEvery: number;
  onCorruption: OnCorruption;
  /** --rebalance auto: how slow ranks are found and handled (undefined: off) */
  rebalance?: BalanceSettings;
  jitCheckpoint: boolean;
  checkpointDir: string;
  checkpointEvery: number;
  keepCheckpoints: number;
  resume?: string;
  evalEvery: number;
  /** the test split's first N samples are what an evaluation scores (undefined: all of them) */
  evalSamples?: number;
  sampleTokens: number;
  threads: number;
  device: Device;
  isa: LevelRequest;
  /** set on a rank the job's ranks spawned: its id is joinId + its rank among those spawned with it */
  joinId?: number;
  /** set on a rank the job's ranks spawned: the step they were at (its drill points' step until it joins) */
  joinStep?: number;
  /**
   * Shrink and none modes: the samples each rank takes per step, fixed when the run starts
   * (batch / the initial world size; on resume, the checkpoint's initial world size), so the run
   * resumes at any world size. Set by the checks before MPI starts; undefined in exact mode.
   */
  rankBatch?: number;
}

type Kind = 'integer' | 'number' | 'string' | 'boolean' | 'choice' | 'strings';

/** One setting: its kind, default (absent: none), the range it must lie in, and its help line. */
export interface Setting {
  kind: Kind;
  default?: number | string | boolean | string[];
  /** integers and numbers: the least allowed value, and whether it is excluded */
  min?: number;
  above?: boolean;
  /** numbers: the value must stay below this */
  below?: number;
  choices?: readonly string[];
  describe: string;
  group: 'Job' | 'Optimizer' | 'Fault tolerance' | 'Checkpoints';
  required?: boolean;
  /** strings: a file or directory */
  path?: boolean;
}

/** Every setting of ft-train, in help order. */
export const trainSettings: Record<Exclude<keyof TrainSettings, never>, Setting> = {
  model: { kind: 'string', path: true, required: true, describe: 'model spec (JSON), e.g. models/lenet.json', group: 'Job' },
  data: { kind: 'string', path: true, required: true, describe: 'dataset directory, e.g. datasets/fashion-mnist', group: 'Job' },
  runDir: { kind: 'string', path: true, required: true, describe: 'new directory for metrics, events, summary, model', group: 'Job' },
  steps: { kind: 'integer', min: 1, describe: 'steps to train (or --epochs; default: one epoch)', group: 'Job' },
  epochs: { kind: 'integer', min: 1, describe: 'epochs to train (default 1 when --steps is absent)', group: 'Job' },
  evalEvery: { kind: 'integer', min: 0, default: 0, describe: 'test-set evaluation every K steps (0: at the end only)', group: 'Job' },
  evalSamples: {
    kind: 'integer',
    min: 1,
    describe: "test samples each evaluation scores: the test split's first N, the same at any world size (default: all of them)",
    group: 'Job',
  },
  sampleTokens: {
    kind: 'integer',
    min: 0,
    default: 200,
    describe: 'a language model: tokens of text it writes after training, into sample.txt (0: none)',
    group: 'Job',
  },
  threads: {
    kind: 'integer',
    min: 1,
    default: 1,
    describe: 'compute threads per rank (the result depends on it: a resume must keep it)',
    group: 'Job',
  },
  device: {
    kind: 'choice',
    choices: ['cpu', 'cuda'],
    default: 'cpu',
    describe:
      "where the net's layers compute: cpu, or cuda (cuDNN, cuBLAS and CUDA kernels on the rank's GPU, Open MPI's local rank modulo the GPUs; every layer type but concat, and the update of replicated optimizer state; the collectives and checkpoints stay on the host). The result depends on it: a resume must keep it",
    group: 'Job',
  },
  isa: {
    kind: 'choice',
    choices: ['auto', ...cpuLevels, 'native'],
    default: 'auto',
    describe:
      "the CPU kernels' instruction-set level, the same on every rank (the result depends on it): auto, the best every rank's host runs (a resume: the checkpoint's); or x86-64-v2|v3|v4; native: each host's libraries choose (fastest, but the bits depend on the CPU and the environment)",
    group: 'Job',
  },
  batch: {
    kind: 'integer',
    min: 1,
    default: 64,
    describe: "global batch (split over the shards; above the training split's rows: all of them each step)",
    group: 'Optimizer',
  },
  optimizer: {
    kind: 'choice',
    choices: optimizerNames,
    default: 'sgd',
    describe: "sgd (momentum, L2 weight decay) | adamw (PyTorch's: bias correction, decoupled weight decay)",
    group: 'Optimizer',
  },
  lr: { kind: 'number', min: 0, describe: 'learning rate (default 0.01 for sgd, 0.001 for adamw)', group: 'Optimizer' },
  momentum: { kind: 'number', min: 0, default: 0.9, describe: 'SGD momentum', group: 'Optimizer' },
  weightDecay: { kind: 'number', min: 0, describe: 'weight decay (default 5e-4 for sgd, 0.01 for adamw)', group: 'Optimizer' },
  beta1: { kind: 'number', min: 0, below: 1, default: 0.9, describe: 'AdamW: decay of the first moment', group: 'Optimizer' },
  beta2: { kind: 'number', min: 0, below: 1, default: 0.999, describe: 'AdamW: decay of the second moment', group: 'Optimizer' },
  eps: { kind: 'number', min: 0, above: true, default: 1e-8, describe: 'AdamW: added to the denominator', group: 'Optimizer' },
  optimizerState: {
    kind: 'choice',
    choices: ['replicated', 'sharded'],
    default: 'replicated',
    describe:
      'replicated: every rank holds all of it; sharded: each rank the state of one chunk of the parameters (exact mode; the same bits)',
    group: 'Optimizer',
  },
  lrSchedule: { kind: 'string', default: 'constant', describe: 'constant | cosine | step:EVERY:GAMMA', group: 'Optimizer' },
  warmupSteps: {
    kind: 'integer',
    min: 0,
    default: 0,
    describe: 'steps of linear warm-up to --lr, the schedule running over the steps after them',
    group: 'Optimizer',
  },
  clipNorm: {
    kind: 'number',
    min: 0,
    default: 0,
    describe: "clip the summed gradient to this global norm (PyTorch's clip_grad_norm_; 0: off)",
    group: 'Optimizer',
  },
  seed: { kind: 'integer', min: 0, default: 1, describe: 'seed of init, shuffles and dropout', group: 'Optimizer' },
  redundancy: {
    kind: 'string',
    describe:
      "sharded state: copies in peers' memory: none | replicate:M[:group|:ring] (M copies in all, Gemini's placement) | ec:K+M (Reed-Solomon, M parities per K ranks) (default replicate:2)",
    group: 'Fault tolerance',
  },
  shards: {
    kind: 'integer',
    min: 1,
    describe: 'logical shards S, at least the working ranks with --spares (default: the initial world size)',
    group: 'Fault tolerance',
  },
  onFailure: {
    kind: 'choice',
    choices: ['exact', 'shrink', 'none'],
    default: 'exact',
    describe:
      'exact: keep the global batch, bit-identical result; shrink: survivors keep their per-rank batch (FT-SGD); none: no fault tolerance (plain allreduce)',
    group: 'Fault tolerance',
  },
  lrRescale: {
    kind: 'choice',
    choices: ['linear', 'none'],
    default: 'linear',
    describe: 'shrink mode: scale the rate with the global batch',
    group: 'Fault tolerance',
  },
  minRanks: { kind: 'integer', min: 1, default: 1, describe: 'stop (exit code 3) when fewer ranks survive', group: 'Fault tolerance' },
  maxRetries: { kind: 'integer', min: 1, default: 5, describe: 'repair attempts per failure', group: 'Fault tolerance' },
  hangTimeout: {
    kind: 'number',
    min: 0,
    above: true,
    default: defaultHangTimeoutS,
    describe:
      "seconds without progress after which a rank counts as failed: it is declared dead (by MPI's detector, which launch/ft-run sets to the same value) and killed; also bounds every wait",
    group: 'Fault tolerance',
  },
  spares: {
    kind: 'integer',
    min: 0,
    default: 0,
    describe:
      "hot spares: the launch's last K ranks (before any --reserves) hold no shards and only wait; a lost rank's place (its shards, its optimizer state) goes to one of them in the same recovery, so the working world keeps its size while they last (with --respawn, spawned ranks refill them)",
    group: 'Fault tolerance',
  },
  respawn: {
    kind: 'boolean',
    default: false,
    describe:
      "after a failure, spawn ranks (PMIx_Spawn, then MPI_Comm_accept) to take the lost ranks' places that no spare took, and to refill the spares used up or lost; they join once ready (exact mode)",
    group: 'Fault tolerance',
  },
  reserves: {
    kind: 'integer',
    min: 0,
    default: 0,
    describe:
      "with --respawn: the launch's last R ranks (after the spares) start, then sleep until woken to take a lost rank's place, one at a time, before any rank is spawned; a woken reserve joins within a step or two and, being of the launch's own job, reaches the others over shared memory, where a spawned rank uses TCP",
    group: 'Fault tolerance',
  },
  respawnLimit: {
    kind: 'integer',
    min: 0,
    describe: 'with --respawn: ranks spawned in all, at most (default: the initial working world size)',
    group: 'Fault tolerance',
  },
  respawnJoin: {
    kind: 'choice',
    choices: ['ready', 'wait'],
    default: 'ready',
    describe:
      "with --respawn: when the spawned ranks join. ready: the survivors retry and train on without them, and they join at the first step's end once started (a recovery costs no process start-up); wait: the survivors wait for them at the retried step's end (the world is whole again one step after the failure, the start-up paid by all)",
    group: 'Fault tolerance',
  },
  drill: {
    kind: 'strings',
    default: [],
    describe: `rank=R,step=K[,phase=P][,action=kill|stop|term|hang|host|cut|flip|corrupt|slow][,target=params|state][,factor=F]: that rank sends itself SIGKILL (SIGSTOP, SIGTERM), spins forever (hang), loses its host or is cut off, at phase P of step K; flip: one bit of what phase compute|collective|update holds (a gradient, the sum received, the parameters, or with target=state the optimizer state), once; corrupt: the same at every step from K on; slow,factor=F: its compute F times slower from step K on (factor=1 ends it) (repeatable; for tests). P: ${phases.join('|')}`,
    group: 'Fault tolerance',
  },
  verifyEvery: {
    kind: 'integer',
    min: 0,
    describe: `check for silent data corruption every K steps and at the last (and the state after it): the ranks compare their state's digests, and each recomputes one shard another rank computed (0: never; default ${defaultVerifyEvery} with --on-failure exact, else 0; with sharded state each chunk is also checked against the copies peers keep of it, not against parities). A corrupted state or a faulty core is caught at the next check; a one-off flip of a gradient is caught only if it hits the checked step and shard (probability N/(S*K) at N ranks, S shards: measured 1% at the default K with S = N), and with sharded state a one-off flip of the parameters or of the sum received is not (every rank takes that chunk's update alike)`,
    group: 'Fault tolerance',
  },
  onCorruption: {
    kind: 'choice',
    choices: ['evict', 'stop'],
    default: 'evict',
    describe:
      'a check that names a rank for corruption: evict it (as failed), roll back to the last verified step and replay; or stop the job (exit 1; stop needs the check: --on-failure exact, --verify-every above 0)',
    group: 'Fault tolerance',
  },
  rebalance: {
    kind: 'choice',
    choices: ['auto', 'off'],
    describe:
      "slow ranks: each rank's compute time per shard rides in every step's sum; auto moves shards off a rank that stays slower than the others (at step ends, each rank keeping one; the bits do not change), gives them back when it is fast again, and evicts one far slower when a spare or respawn can take its place (default auto with --on-failure exact; off elsewhere, where moving shards would change which samples a rank trains on)",
    group: 'Fault tolerance',
  },
  slowMargin: {
    kind: 'number',
    min: 0,
    above: true,
    default: 0.5,
    describe: 'with --rebalance auto: a rank is slow when its median time per shard is at least 1 + M times the median of the others',
    group: 'Fault tolerance',
  },
  slowSteps: {
    kind: 'integer',
    min: 1,
    default: 3,
    describe:
      "with --rebalance auto: the steps a rank's time per shard is the median of, and the fewest steps between two changes of the shard map",
    group: 'Fault tolerance',
  },
  evictSlower: {
    kind: 'number',
    min: 0,
    default: 4,
    describe:
      'with --rebalance auto: a rank this many times slower than the others at 4 x --slow-steps steps in a row is evicted as failed, when a spare or --respawn can take its place (0: never)',
    group: 'Fault tolerance',
  },
  jitCheckpoint: {
    kind: 'choice',
    choices: ['on', 'off'],
    default: 'on',
    describe: "after a failure, the survivors write a checkpoint of the failed step's start",
    group: 'Checkpoints',
  },
  checkpointDir: { kind: 'string', path: true, describe: 'where checkpoints go (default: <run-dir>/ckpt)', group: 'Checkpoints' },
  checkpointEvery: { kind: 'integer', min: 0, default: 0, describe: 'also a checkpoint every K steps (0: none)', group: 'Checkpoints' },
  keepCheckpoints: { kind: 'integer', min: 1, default: 3, describe: 'complete checkpoints kept (newest)', group: 'Checkpoints' },
  resume: {
    kind: 'string',
    path: true,
    describe:
      'continue from a checkpoint, a checkpoint directory or a run directory (newest complete checkpoint), at any world size (default: none, a fresh start)',
    group: 'Checkpoints',
  },
};

/** `weightDecay` -> `weight-decay`. */
export const flagName = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** Bad settings: the message is the whole line to print. */
export class SettingsError extends Error {
  override name = 'SettingsError';
}

/** The problem with `value` for `setting`, or undefined when it is fine. */
export function checkSetting(setting: Setting, value: unknown): string | undefined {
  const got = typeof value === 'number' ? String(value) : (JSON.stringify(value) ?? String(value));
  switch (setting.kind) {
    case 'integer':
      return Number.isSafeInteger(value) && (value as number) >= setting.min!
        ? undefined
        : `expects an integer >= ${setting.min}, got ${got}`;
    case 'number': {
      const number = value as number;
      const ok =
        typeof value === 'number' &&
        Number.isFinite(number) &&
        (setting.above ? number > setting.min! : number >= setting.min!) &&
        (setting.below === undefined || number < setting.below);
      const range = setting.below !== undefined ? `in [${setting.min}, ${setting.below})` : `${setting.above ? '>' : '>='} ${setting.min}`;
      return ok ? undefined : `expects a number ${range}, got ${got}`;
    }
    case 'string':
      return typeof value === 'string' && value !== '' ? undefined : `expects ${setting.path ? 'a path' : 'a text'}, got ${got}`;
    case 'boolean':
      return typeof value === 'boolean' ? undefined : `expects true or false, got ${got}`;
    case 'choice':
      return setting.choices!.includes(value as string) ? undefined : `expects one of ${setting.choices!.join(', ')}, got ${got}`;
    case 'strings':
      return Array.isArray(value) && value.every((v) => typeof v === 'string') ? undefined : `expects a list of texts, got ${got}`;
  }
}

/**
 * The values of the settings `keys` in `given`, defaults filled in, each checked against its
 * entry in the table (a model given as an object is the spec's to check); `fail` takes the line.
 */
export function settingValues(
  given: Record<string, unknown>,
  keys: readonly (keyof TrainSettings)[],
  label: (key: string) => string,
  fail: (message: string) => never,
): Record<string, unknown> {
  const value: Record<string, unknown> = {};
  for (const key of keys) {
    const setting = trainSettings[key];
    const v = given[key] ?? setting.default;
    if (v === undefined) {
      if (setting.required) fail(`${label(key)} is required`);
      continue;
    }
    const objectModel = key === 'model' && typeof v === 'object' && v !== null && !Array.isArray(v);
    const problem = objectModel ? undefined : checkSetting(setting, v);
    if (problem) fail(`${label(key)} ${problem}`);
    value[key] = v;
  }
  return value;
}

/**
 * Fills in the defaults and checks everything (`label` turns a setting's name into the caller's
 * spelling: `--weight-decay` on the command line, `weightDecay` in code).
 */
export function resolveTrainOptions(
  input: TrainSettings,
  label: (key: string) => string = (key) => key,
  program = 'ft-train',
): TrainOptions {
  const fail = (message: string): never => {
    throw new SettingsError(`${program}: ${message}`);
  };
  const given = input as unknown as Record<string, unknown>;
  for (const key of Object.keys(given)) {
    if (!(key in trainSettings) && given[key] !== undefined) fail(`unknown setting ${label(key)}`);
  }
  const a = settingValues(given, Object.keys(trainSettings) as (keyof TrainSettings)[], label, fail) as unknown as Required<
    Omit<
      TrainSettings,
      | 'steps'
      | 'epochs'
      | 'lr'
      | 'weightDecay'
      | 'redundancy'
      | 'shards'
      | 'respawnLimit'
      | 'checkpointDir'
      | 'resume'
      | 'verifyEvery'
      | 'rebalance'
      | 'evalSamples'
    >
  > &
    TrainSettings;
  if (a.steps !== undefined && a.epochs !== undefined) fail(`give ${label('steps')} or ${label('epochs')}, not both`);
  if (a.optimizerState === 'sharded' && a.onFailure !== 'exact')
    fail(`${label('optimizerState')} sharded needs ${label('onFailure')} exact, got ${a.onFailure}`);
  if (a.clipNorm > 0 && a.optimizerState === 'sharded')
    fail(`${label('clipNorm')} needs the whole summed gradient on each rank: use ${label('optimizerState')} replicated`);
  if (a.redundancy !== undefined && a.optimizerState !== 'sharded')
    fail(`${label('redundancy')} applies to ${label('optimizerState')} sharded only`);
  if (a.spares > 0 && a.onFailure === 'none') fail(`${label('spares')} needs fault tolerance: ${label('onFailure')} exact or shrink`);
  if (a.respawn && a.onFailure !== 'exact') fail(`${label('respawn')} needs ${label('onFailure')} exact, got ${a.onFailure}`);
  if (a.verifyEvery !== undefined && a.verifyEvery > 0 && a.onFailure !== 'exact')
    fail(`${label('verifyEvery')} needs ${label('onFailure')} exact (equal bits whoever computes), got ${a.onFailure}`);
  // the default (evict) cannot be told from a choice; stop, where no check runs, would be a promise kept by nothing
  if (a.onCorruption === 'stop' && (a.verifyEvery === 0 || a.onFailure !== 'exact'))
    fail(`${label('onCorruption')} stop needs the check for corruption (${label('onFailure')} exact, ${label('verifyEvery')} above 0)`);
  if (a.rebalance === 'auto' && a.onFailure !== 'exact')
    fail(`${label('rebalance')} auto needs ${label('onFailure')} exact (the same bits whoever computes a shard), got ${a.onFailure}`);
  if (a.evictSlower > 0 && a.evictSlower <= 1) fail(`${label('evictSlower')} expects 0 (never) or a factor above 1, got ${a.evictSlower}`);
  if (a.reserves > 0 && !a.respawn) fail(`${label('reserves')} applies with ${label('respawn')} only`);
  if (a.respawnLimit !== undefined && !a.respawn) fail(`${label('respawnLimit')} applies with ${label('respawn')} only`);
  if (a.respawnJoin !== 'ready' && !a.respawn) fail(`${label('respawnJoin')} applies with ${label('respawn')} only`);
  const parsed = <T>(parse: () => T): T => {
    try {
      return parse();
    } catch (error) {
      return fail(`${(error as Error).message}`);
    }
  };
  const sgd = a.optimizer === 'sgd';
  return {
    model: a.model,
    data: a.data,
    runDir: a.runDir,
    steps: a.steps,
    epochs: a.steps === undefined ? (a.epochs ?? 1) : undefined,
    batch: a.batch,
    lr: a.lr ?? (sgd ? 0.01 : 0.001),
    optimizer: {
      name: a.optimizer,
      momentum: a.momentum,
      weightDecay: a.weightDecay ?? (sgd ? 5e-4 : 0.01),
      beta1: a.beta1,
      beta2: a.beta2,
      eps: a.eps,
    },
    optimizerState: a.optimizerState,
    redundancy: parsed(() => parseRedundancy(a.redundancy ?? (a.optimizerState === 'sharded' ? 'replicate:2' : 'none'))),
    lrSchedule: parsed(() => withWarmup(parseLrSchedule(a.lrSchedule), a.warmupSteps)),
    clipNorm: a.clipNorm,
    seed: a.seed,
    shards: a.shards,
    onFailure: a.onFailure,
    lrRescale: a.lrRescale,
    minRanks: a.minRanks,
    maxRetries: a.maxRetries,
    hangTimeout: a.hangTimeout,
    spares: a.spares,
    respawn: a.respawn,
    reserves: a.reserves,
    respawnLimit: a.respawnLimit,
    respawnJoin: a.respawnJoin,
    drills: parsed(() => a.drill.map(parseDrill)),
    verifyEvery: a.verifyEvery ?? (a.onFailure === 'exact' ? defaultVerifyEvery : 0),
    onCorruption: a.onCorruption,
    rebalance:
      (a.rebalance ?? (a.onFailure === 'exact' ? 'auto' : 'off')) === 'auto'
        ? { slowMargin: a.slowMargin, slowSteps: a.slowSteps, evictSlower: a.evictSlower }
        : undefined,
    jitCheckpoint: a.jitCheckpoint === 'on',
    checkpointDir: a.checkpointDir ?? path.join(a.runDir, 'ckpt'),
    checkpointEvery: a.checkpointEvery,
    keepCheckpoints: a.keepCheckpoints,
    resume: a.resume,
    evalEvery: a.evalEvery,
    evalSamples: a.evalSamples,
    sampleTokens: a.sampleTokens,
    threads: a.threads,
    device: a.device,
    isa: a.isa,
  };
}
