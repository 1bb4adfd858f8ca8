// ft-train's command line: every flag, its default, and its checks (one line per problem).
import * as path from 'node:path';
import { parseDrill, phases, type Drill } from '../ft/drills';
import { parseRedundancy, type RedundancySpec } from '../ft/placement';
import { optimizerNames, type OptimizerName } from '../solver/optimizer';
import { parseLrSchedule } from '../solver/lr-schedule';
import type { TrainConfig } from '../solver/trainer';
import { commandLine, last, UsageError } from './command';
import { defaultHangTimeoutS } from './mpirun';

export interface TrainOptions extends Omit<TrainConfig, 'shards'> {
  model: string;
  data: string;
  runDir: string;
  /** undefined: the initial world size (or the checkpoint's when resuming) */
  shards?: number;
  checkpointDir: string;
  /** a checkpoint, or a directory of them, to continue from */
  resume?: string;
  threads: number;
  drills: Drill[];
  minRanks: number;
  /** repair attempts per failure */
  maxRetries: number;
  /** write a checkpoint from the survivors after each failure */
  jitCheckpoint: boolean;
  keepCheckpoints: number;
  /** sharded optimizer state: what peers keep of each rank's chunk */
  redundancy: RedundancySpec;
  /** seconds without progress after which a rank counts as failed (see src/ft/hangs.ts) */
  hangTimeout: number;
  /** the launch's last K ranks wait as hot spares */
  spares: number;
  /** spawn ranks to replace the lost */
  respawn: boolean;
  /** ranks spawned in all, at most (undefined: the initial working world size) */
  respawnLimit?: number;
  /** set on a rank the job's ranks spawned: its id is joinId + its rank among those spawned with it */
  joinId?: number;
  /**
   * Shrink and none modes: the samples each rank takes per step, fixed when the run starts
   * (--batch / the initial world size; on --resume, the checkpoint's initial world size), so the
   * run resumes at any world size. Set by ft-train's checks before MPI starts; undefined in exact mode.
   */
  rankBatch?: number;
}

const usage = `mpirun --with-ft ulfm -n N node launch/ft-train.js --model SPEC --data DIR --run-dir DIR [options]

Elastic, fault-tolerant data-parallel training. A rank that dies (kill -9) is detected inside the
gradient sum; the survivors repair the communicator, re-read only its shards and retry the step.
Survivors go on only as a majority of the ranks that may still run (no split brain across a cut link).
Exit codes: 0 done (or stopped on SIGTERM after a checkpoint), 1 an error, 2 bad input, 3 below
--min-ranks (after a checkpoint), 4 the minority side of a partition (stops without writing).`;

export function parseTrainOptions(argv: string[]): TrainOptions {
  const positiveInt = (flag: string, min = 1) => (values: number | number[]) => {
    const value = last(values);
    if (!Number.isSafeInteger(value) || value < min) throw new Error(`--${flag} expects an integer >= ${min}, got ${value}`);
    return value;
  };
  const positive = (flag: string) => (values: number | number[]) => {
    const value = last(values);
    if (!(Number.isFinite(value) && value > 0)) throw new Error(`--${flag} expects a number > 0, got ${value}`);
    return value;
  };
  const nonNegative = (flag: string) => (values: number | number[]) => {
    const value = last(values);
    if (!(Number.isFinite(value) && value >= 0)) throw new Error(`--${flag} expects a number >= 0, got ${value}`);
    return value;
  };
  const unitInterval = (flag: string) => (values: number | number[]) => {
    const value = last(values);
    if (!(Number.isFinite(value) && value >= 0 && value < 1)) throw new Error(`--${flag} expects a number in [0, 1), got ${value}`);
    return value;
  };
  const nonEmptyPath = (flag: string) => (values: string | string[]) => {
    const value = last(values);
    if (value === '') throw new Error(`--${flag} expects a path, got ""`);
    return value;
  };
  const args = commandLine('ft-train', usage)
    .option('model', { type: 'string', coerce: nonEmptyPath('model'), demandOption: true, describe: 'model spec (JSON), e.g. models/lenet.json', group: 'Job:' })
    .option('data', { type: 'string', coerce: nonEmptyPath('data'), demandOption: true, describe: 'dataset directory, e.g. datasets/fashion-mnist', group: 'Job:' })
    .option('run-dir', { type: 'string', coerce: nonEmptyPath('run-dir'), demandOption: true, describe: 'new directory for metrics, events, summary, model', group: 'Job:' })
    .option('steps', { type: 'number', coerce: positiveInt('steps'), describe: 'steps to train (or --epochs)', group: 'Job:' })
    .option('epochs', { type: 'number', coerce: positiveInt('epochs'), describe: 'epochs to train (default 1 when --steps is absent)', group: 'Job:' })
    .option('batch', { type: 'number', default: 64, coerce: positiveInt('batch'), describe: 'global batch (split over the shards)', group: 'Optimizer:' })
    .option('optimizer', { choices: optimizerNames, default: 'sgd' as OptimizerName, coerce: last<OptimizerName>, describe: 'sgd (momentum, L2 weight decay) | adamw (PyTorch\'s: bias correction, decoupled weight decay)', group: 'Optimizer:' })
    .option('lr', { type: 'number', coerce: nonNegative('lr'), describe: 'learning rate (default 0.01 for sgd, 0.001 for adamw)', group: 'Optimizer:' })
    .option('momentum', { type: 'number', default: 0.9, coerce: nonNegative('momentum'), describe: 'SGD momentum', group: 'Optimizer:' })
    .option('weight-decay', { type: 'number', coerce: nonNegative('weight-decay'), describe: 'weight decay (default 5e-4 for sgd, 0.01 for adamw)', group: 'Optimizer:' })
    .option('beta1', { type: 'number', default: 0.9, coerce: unitInterval('beta1'), describe: 'AdamW: decay of the first moment', group: 'Optimizer:' })
    .option('beta2', { type: 'number', default: 0.999, coerce: unitInterval('beta2'), describe: 'AdamW: decay of the second moment', group: 'Optimizer:' })
    .option('eps', { type: 'number', default: 1e-8, coerce: positive('eps'), describe: 'AdamW: added to the denominator', group: 'Optimizer:' })
    .option('optimizer-state', { choices: ['replicated', 'sharded'] as const, default: 'replicated' as const, coerce: last<'replicated' | 'sharded'>, describe: 'replicated: every rank holds all of it; sharded: each rank the state of one chunk of the parameters (exact mode; the same bits)', group: 'Optimizer:' })
    .option('redundancy', { type: 'string', coerce: last<string>, describe: 'sharded state: copies in peers\' memory: none | replicate:M[:group|:ring] (M copies in all, Gemini\'s placement) | ec:K+M (Reed-Solomon, M parities per K ranks) (default replicate:2)', group: 'Fault tolerance:' })
    .option('lr-schedule', { type: 'string', coerce: last<string>, default: 'constant', describe: 'constant | cosine | step:EVERY:GAMMA', group: 'Optimizer:' })
    .option('seed', { type: 'number', default: 1, coerce: positiveInt('seed', 0), describe: 'seed of init, shuffles and dropout', group: 'Optimizer:' })
    .option('shards', { type: 'number', coerce: positiveInt('shards'), describe: 'logical shards S (default: the initial world size)', group: 'Fault tolerance:' })
    .option('on-failure', { choices: ['exact', 'shrink', 'none'] as const, default: 'exact' as const, coerce: last<'exact' | 'shrink' | 'none'>, describe: 'exact: keep the global batch, bit-identical result; shrink: survivors keep their per-rank batch (FT-SGD); none: no fault tolerance (plain allreduce)', group: 'Fault tolerance:' })
    .option('lr-rescale', { choices: ['linear', 'none'] as const, default: 'linear' as const, coerce: last<'linear' | 'none'>, describe: 'shrink mode: scale the rate with the global batch', group: 'Fault tolerance:' })
    .option('min-ranks', { type: 'number', default: 1, coerce: positiveInt('min-ranks'), describe: 'stop (exit code 3) when fewer ranks survive', group: 'Fault tolerance:' })
    .option('max-retries', { type: 'number', default: 5, coerce: positiveInt('max-retries'), describe: 'repair attempts per failure', group: 'Fault tolerance:' })
    .option('hang-timeout', { type: 'number', default: defaultHangTimeoutS, coerce: positive('hang-timeout'), describe: 'seconds without progress after which a rank counts as failed: it is declared dead (by MPI\'s detector, which launch/ft-run sets to the same value) and killed; also bounds every wait', group: 'Fault tolerance:' })
    .option('spares', { type: 'number', default: 0, coerce: positiveInt('spares', 0), describe: 'hot spares: the launch\'s last K ranks hold no shards and only wait; a lost rank\'s place (its shards, its optimizer state) goes to one of them in the same recovery, so the working world keeps its size while they last', group: 'Fault tolerance:' })
    .option('respawn', { type: 'boolean', default: false, describe: 'after a failure, spawn ranks (MPI_Comm_spawn) to take the lost ranks\' places, once spares are used up (exact mode)', group: 'Fault tolerance:' })
    .option('respawn-limit', { type: 'number', coerce: positiveInt('respawn-limit', 0), describe: 'with --respawn: ranks spawned in all, at most (default: the initial working world size)', group: 'Fault tolerance:' })
    .option('join-id', { type: 'number', hidden: true, coerce: positiveInt('join-id', 0) })
    .option('drill', { type: 'string', array: true, default: [] as string[], describe: `rank=R,step=K[,phase=P][,action=kill|stop|term|hang]: that rank sends itself SIGKILL (SIGSTOP, SIGTERM), or spins forever (hang), at phase P of step K (repeatable; for tests). P: ${phases.join('|')}`, group: 'Fault tolerance:' })
    .option('jit-checkpoint', { choices: ['on', 'off'] as const, default: 'on' as const, coerce: last<'on' | 'off'>, describe: 'after a failure, the survivors write a checkpoint of the failed step\'s start', group: 'Checkpoints:' })
    .option('checkpoint-dir', { type: 'string', coerce: nonEmptyPath('checkpoint-dir'), describe: 'where checkpoints go (default: <run-dir>/ckpt)', group: 'Checkpoints:' })
    .option('checkpoint-every', { type: 'number', default: 0, coerce: positiveInt('checkpoint-every', 0), describe: 'also a checkpoint every K steps (0: none)', group: 'Checkpoints:' })
    .option('keep-checkpoints', { type: 'number', default: 3, coerce: positiveInt('keep-checkpoints'), describe: 'complete checkpoints kept (newest)', group: 'Checkpoints:' })
    .option('resume', { type: 'string', coerce: nonEmptyPath('resume'), describe: 'continue from a checkpoint, a checkpoint directory or a run directory (newest complete checkpoint), at any world size', group: 'Checkpoints:' })
    .option('eval-every', { type: 'number', default: 0, coerce: positiveInt('eval-every', 0), describe: 'test-set evaluation every K steps (0: at the end only)', group: 'Job:' })
    .option('threads', { type: 'number', default: 1, coerce: positiveInt('threads'), describe: 'compute threads per rank (the result depends on it: a resume must keep it)', group: 'Job:' })
    .check((a) => {
      if (a.steps !== undefined && a.epochs !== undefined) throw new Error('give --steps or --epochs, not both');
      if (a.optimizerState === 'sharded' && a.onFailure !== 'exact') throw new Error(`--optimizer-state sharded needs --on-failure exact, got ${a.onFailure}`);
      if (a.redundancy !== undefined && a.optimizerState !== 'sharded') throw new Error('--redundancy applies to --optimizer-state sharded only');
      if (a.spares > 0 && a.onFailure === 'none') throw new Error('--spares needs fault tolerance: --on-failure exact or shrink');
      if (a.respawn && a.onFailure !== 'exact') throw new Error(`--respawn needs --on-failure exact, got ${a.onFailure}`);
      if (a.respawnLimit !== undefined && !a.respawn) throw new Error('--respawn-limit applies with --respawn only');
      return true;
    })
    .parseSync(argv);
  let lrSchedule;
  let drills;
  let redundancy: RedundancySpec;
  try {
    lrSchedule = parseLrSchedule(args.lrSchedule);
    drills = args.drill.map(parseDrill);
    redundancy = parseRedundancy(args.redundancy ?? (args.optimizerState === 'sharded' ? 'replicate:2' : 'none'));
  } catch (error) {
    throw new UsageError(`ft-train: ${(error as Error).message} (see --help)`);
  }
  return {
    model: args.model,
    data: args.data,
    runDir: args.runDir,
    steps: args.steps,
    epochs: args.steps === undefined ? (args.epochs ?? 1) : undefined,
    batch: args.batch,
    lr: args.lr ?? (args.optimizer === 'sgd' ? 0.01 : 0.001),
    optimizer: {
      name: args.optimizer, momentum: args.momentum, weightDecay: args.weightDecay ?? (args.optimizer === 'sgd' ? 5e-4 : 0.01),
      beta1: args.beta1, beta2: args.beta2, eps: args.eps,
    },
    optimizerState: args.optimizerState,
    redundancy,
    lrSchedule,
    seed: args.seed,
    shards: args.shards,
    onFailure: args.onFailure,
    lrRescale: args.lrRescale,
    minRanks: args.minRanks,
    maxRetries: args.maxRetries,
    evalEvery: args.evalEvery,
    jitCheckpoint: args.jitCheckpoint === 'on',
    checkpointDir: args.checkpointDir ?? path.join(args.runDir, 'ckpt'),
    checkpointEvery: args.checkpointEvery,
    keepCheckpoints: args.keepCheckpoints,
    resume: args.resume,
    threads: args.threads,
    drills,
    hangTimeout: args.hangTimeout,
    spares: args.spares,
    respawn: args.respawn,
    respawnLimit: args.respawnLimit,
    joinId: args.joinId,
  };
}
