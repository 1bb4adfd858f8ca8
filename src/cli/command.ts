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
    .parserConfiguration({ 'duplicate-arguments-array': false }) // a flag given twice: the last one counts
    .help()
    .version(false)
    .wrap(Math.min(100, process.stdout.columns ?? 100))
    .fail((message, error) => {
      throw new UsageError(`${program}: ${message ?? error?.message} (see --help)`);
    });
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
