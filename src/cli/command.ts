// Shared shape of ft-train's command-line programs: yargs with --help, unknown or malformed flags
// rejected in one line, and any error ending the program with one line on stderr and exit code 1.
import yargs, { type Argv } from 'yargs';
import { hideBin } from 'yargs/helpers';

/** A strict yargs parser for `program` (its name in usage and errors). */
export function commandLine(program: string, usage: string): Argv {
  return yargs(hideBin(process.argv))
    .scriptName(program)
    .usage(usage)
    .strict()
    .help()
    .version(false)
    .wrap(Math.min(100, process.stdout.columns ?? 100))
    .fail((message, error) => {
      const text = (message ?? error?.message ?? 'bad arguments').replace(/:?\s*\n\s*/g, ': ');
      throw new UsageError(`${program}: ${text} (see --help)`);
    });
}

/** yargs collects a flag given twice into a list; for single-valued flags the last one counts. */
export function last<T>(value: T | T[]): T {
  return Array.isArray(value) ? value[value.length - 1] : value;
}

/** Bad command-line input; the message is the whole line to print. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** Runs a program's main; errors print as `program: message` (a UsageError as is) and exit 1. */
export function runMain(program: string, main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    console.error(error instanceof UsageError ? message : `${program}: ${message}`);
    process.exitCode = 1;
  });
}
