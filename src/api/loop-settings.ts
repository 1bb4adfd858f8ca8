// The custom loop's settings: the trainer's where they mean the same (one table, the same names,
// defaults and checks: api/train-settings.ts), and the state user code registers.
import { cpu } from '../nn/cpu';
import { Optimizer } from '../solver/optimizer';
import { InputError } from './rank-run';
import { resolveTrainOptions, SettingsError, type TrainOptions, type TrainSettings } from './train-settings';

/** The trainer's settings that mean the same in a custom loop (the same names, defaults and checks). */
const loopKeys = [
  'data',
  'runDir',
  'steps',
  'epochs',
  'batch',
  'seed',
  'shards',
  'onFailure',
  'lrRescale',
  'minRanks',
  'maxRetries',
  'hangTimeout',
  'spares',
  'respawn',
  'reserves',
  'respawnLimit',
  'respawnJoin',
  'drill',
  'evalSamples',
  'verifyEvery',
  'onCorruption',
  'rebalance',
  'slowMargin',
  'slowSteps',
  'evictSlower',
  'jitCheckpoint',
  'checkpointDir',
  'checkpointEvery',
  'keepCheckpoints',
  'resume',
  'isa',
  'optimizer',
  'momentum',
  'weightDecay',
  'beta1',
  'beta2',
  'eps',
  'optimizerState',
  'redundancy',
  'clipNorm',
] as const;

/** The settings of a custom loop: ft-train's own where they mean the same, and the state to keep. */
export interface LoopSettings extends Pick<TrainSettings, (typeof loopKeys)[number]> {
  /** The state's tensors, name -> shape, laid out in this order in one flat buffer (`loop.state`). */
  tensors: Record<string, number[]>;
  /** Further state laid out like the tensors (e.g. an optimizer's 'velocity'), also checkpointed. */
  slots?: string[];
  /** Anything else that fixes the result (e.g. { lr: 0.1 }): recorded in checkpoints; a resume must match it. */
  identity?: Record<string, unknown>;
  /** A name for the model in the summary (default 'custom'). */
  model?: string;
}

export type LoopOptions = TrainOptions &
  Required<Pick<LoopSettings, 'tensors' | 'slots' | 'identity' | 'model'>> & {
    /** ft-train's optimizer makes the update (settings.optimizer given, or sharded state) */
    updates: boolean;
    /** the epochs the settings name (null: none named), as the identity records them */
    epochsNamed: number | null;
  };

/** The loop's settings with defaults, or one InputError line. */
export function resolveLoopSettings(settings: LoopSettings): LoopOptions {
  const fail = (message: string): never => {
    throw new InputError(`ft-train: ${message}`, true);
  };
  const own = new Set(['tensors', 'slots', 'identity', 'model']);
  const given: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(settings)) {
    if (own.has(key) || value === undefined) continue;
    if (!(loopKeys as readonly string[]).includes(key)) fail(`unknown setting ${key}`);
    given[key] = value;
  }
  let options: TrainOptions;
  try {
    options = resolveTrainOptions({ ...given, model: settings.model ?? 'custom' } as TrainSettings);
  } catch (error) {
    if (error instanceof SettingsError) throw new InputError(error.message, true);
    throw error;
  }
  const tensors = Object.entries(settings.tensors ?? {});
  if (tensors.length === 0) fail('tensors: expected at least one, name -> shape');
  for (const [name, shape] of tensors) {
    if (!Array.isArray(shape) || shape.length === 0 || !shape.every((d) => Number.isSafeInteger(d) && d > 0))
      fail(`tensors.${name}: expected a shape of positive integers, got ${JSON.stringify(shape)}`);
  }
  const slots = settings.slots ?? [];
  if (new Set(slots).size !== slots.length || slots.some((s) => typeof s !== 'string' || s === ''))
    fail(`slots: expected distinct names, got ${JSON.stringify(slots)}`);
  const updates = settings.optimizer !== undefined || options.optimizerState === 'sharded';
  if (options.optimizerState === 'sharded' && slots.length > 0)
    fail("slots: with optimizerState sharded the optimizer's state is the protocol's, in chunks; register no slots of your own");
  if (options.clipNorm > 0 && !updates)
    fail("clipNorm: clips the gradient before ft-train's update; give optimizer (or clip the sum yourself before your update)");
  const optimizerSlots = updates ? new Optimizer(options.optimizer, cpu).slots : [];
  const clash = slots.find((s) => optimizerSlots.includes(s));
  if (clash) fail(`slots: "${clash}" is ${options.optimizer.name}'s own state (ft-train's optimizer keeps it); register other names`);
  return {
    ...options,
    tensors: settings.tensors,
    slots,
    identity: settings.identity ?? {},
    model: settings.model ?? 'custom',
    updates,
    epochsNamed: settings.epochs ?? null,
  };
}
