// ft-train's command line: the settings of src/api/train-settings.ts as flags (kebab-cased), with their
// defaults in --help; every problem is one line naming the flag.
import type { Options } from 'yargs';
import { flagName, resolveTrainOptions, trainSettings, type TrainOptions, type TrainSettings } from '../api/train-settings';
import { commandLine, last, UsageError } from './command';

export type { TrainOptions } from '../api/train-settings';

const usage = `mpirun --with-ft ulfm -n N node launch/ft-train.js --model SPEC --data DIR --run-dir DIR [options]

Elastic, fault-tolerant data-parallel training. A rank that dies (kill -9) is detected inside the
gradient sum; the survivors repair the communicator, re-read only its shards and retry the step.
Survivors go on only as a majority of the ranks that may still run (no split brain across a cut link).
Exit codes: 0 done (or stopped on SIGTERM after a checkpoint), 1 an error, 2 bad input, 3 below
--min-ranks (after a checkpoint), 4 the minority side of a partition (stops without writing).`;

const yargsType = {
  integer: 'number',
  number: 'number',
  string: 'string',
  boolean: 'boolean',
  choice: 'string',
  strings: 'string',
} as const;

export function parseTrainOptions(argv: string[]): TrainOptions {
  let parser = commandLine('ft-train', usage, argv);
  for (const [key, setting] of Object.entries(trainSettings)) {
    const option: Options = {
      type: yargsType[setting.kind],
      describe: setting.describe,
      group: `${setting.group}:`,
      demandOption: setting.required,
      default: setting.default,
      choices: setting.choices,
      array: setting.kind === 'strings' ? true : undefined,
      // a flag given twice counts once, the last time
      coerce: setting.kind === 'strings' ? undefined : last,
    };
    parser = parser.option(flagName(key), option);
  }
  const args = parser
    .option('join-id', { type: 'number', hidden: true, coerce: last })
    .option('join-step', { type: 'number', hidden: true, coerce: last })
    .parseSync() as Record<string, unknown>;
  const given: Record<string, unknown> = {};
  for (const key of Object.keys(trainSettings)) given[key] = args[key];
  const joinId = args.joinId as number | undefined;
  const joinStep = args.joinStep as number | undefined;
  for (const [flag, value] of [
    ['--join-id', joinId],
    ['--join-step', joinStep],
  ] as const)
    if (value !== undefined && !(Number.isSafeInteger(value) && value >= 0))
      throw new UsageError(`ft-train: ${flag} expects an integer >= 0, got ${value} (see --help)`);
  try {
    return { ...resolveTrainOptions(given as unknown as TrainSettings, (key) => `--${flagName(key)}`), joinId, joinStep };
  } catch (error) {
    throw new UsageError(`${(error as Error).message} (see --help)`);
  }
}
