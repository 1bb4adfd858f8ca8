// Shared shape of ft-train's command-line programs: yargs with --help and --version, `--flag value`
// and `--flag=value` alike; an unknown flag named with the nearest known one, a number flag given
// no number refused with what it got, and any error ending the program with one line on stderr:
// exit code 2 for bad usage, 1 for anything else.
import * as fs from 'node:fs';
import * as path from 'node:path';
import yargs, { type Argv } from 'yargs';
import { hideBin } from 'yargs/helpers';

/** The package's version, as `--version` prints it. */
const version = (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'package.json'), 'utf8')) as { version: string })
  .version;

/** A strict yargs parser for `program` (its name in usage and errors) over `argv` (default: this process's arguments). */
export function commandLine(program: string, usage: string, argv: string[] = hideBin(process.argv)): Argv {
  const parser: Argv = yargs(argv);
  return (
    parser
      .scriptName(program)
      .usage(usage)
      .strict()
      .help()
      .version('version', 'Show version number', `${program} ${version}`)
      .wrap(Math.min(100, process.stdout.columns ?? 100))
      // before yargs' own checks, so that a misspelled required flag is named as unknown, not as missing
      .middleware(() => checkFlags(program, argv, (parser as unknown as { getOptions(): KnownOptions }).getOptions()), true)
      .fail((message, error) => {
        const text = (message ?? error?.message ?? 'bad arguments').replace(/:?\s*\n\s*/g, ': ');
        throw new UsageError(`${program}: ${text} (see --help)`);
      })
  );
}

/** The options yargs knows, as its (untyped) `getOptions()` returns them: the fields used here. */
interface KnownOptions {
  key: Record<string, unknown>;
  alias: Record<string, string[]>;
  boolean: string[];
  number: string[];
  hiddenOptions: string[];
}

/** A flag as written: its name (no dashes), the dashes, and its value when given with `=` or as the next word. */
interface Written {
  name: string;
  dashes: string;
  value?: string;
}

const isNumberText = (text: string): boolean => text.trim() !== '' && Number.isFinite(Number(text));

/** The flags in `argv` before `--` (short ones one by one: `-ab` is -a and -b). */
function writtenFlags(argv: string[], options: KnownOptions): Written[] {
  const flags: Written[] = [];
  const valueAfter = (at: number): string | undefined => {
    const next = argv[at + 1];
    return next !== undefined && (!next.startsWith('-') || isNumberText(next)) ? next : undefined;
  };
  for (const [at, word] of argv.entries()) {
    if (word === '--') break;
    const long = /^--([^=]+)(?:=(.*))?$/s.exec(word);
    const short = /^-([a-zA-Z])(.*)$/s.exec(word);
    if (long)
      flags.push({
        name: long[1],
        dashes: '--',
        value: long[2] ?? (options.boolean.includes(canonical(long[1], options)) ? undefined : valueAfter(at)),
      });
    else if (short && /^[a-zA-Z]+$/.test(short[2])) flags.push(...[...(short[1] + short[2])].map((name) => ({ name, dashes: '-' })));
    else if (short) flags.push({ name: short[1], dashes: '-', value: short[2] === '' ? valueAfter(at) : short[2].replace(/^=/, '') });
  }
  return flags;
}

/** The option key that `name` (as written: an alias, camelCased, `no-` before a boolean) stands for, or '' for none. */
function canonical(name: string, options: KnownOptions): string {
  const kebab = name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  for (const candidate of [name, kebab]) {
    if (candidate in options.key) return candidate;
    const owner = Object.keys(options.alias).find((key) => key in options.key && options.alias[key].includes(candidate));
    if (owner !== undefined) return owner;
  }
  const negated = /^no-(.+)$/.exec(kebab);
  return negated && options.boolean.includes(canonical(negated[1], options)) ? canonical(negated[1], options) : '';
}

/** Refuses an unknown flag (naming the nearest known one) and a number flag whose value is no number. */
function checkFlags(program: string, argv: string[], options: KnownOptions): void {
  for (const flag of writtenFlags(argv, options)) {
    const key = canonical(flag.name, options);
    if (key === '') {
      const names = Object.keys(options.key)
        .filter((name) => !options.hiddenOptions.includes(name))
        .flatMap((name) => [name, ...(options.alias[name] ?? [])])
        .filter((name) => name.length > 1);
      const nearest = flag.dashes === '--' ? suggestFlag(flag.name, names) : undefined;
      throw new UsageError(
        `${program}: unknown flag ${flag.dashes}${flag.name}${nearest ? `; did you mean --${nearest}?` : ''} (see --help)`,
      );
    }
    if (options.number.includes(key) && flag.value !== undefined && !isNumberText(flag.value)) {
      throw new UsageError(`${program}: ${flag.dashes}${flag.name}: expected a number, got ${JSON.stringify(flag.value)}`);
    }
  }
}

/** Edits (insert, delete, replace, swap two neighbours) turning `a` into `b`. */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/**
 * The known flag nearest to `name` (both without dashes), or undefined when none is close: the
 * fewest edits, at most 1 for names under 6 letters and 2 from 6 on (the first in `known` on a
 * tie); failing that, the one flag that `name` begins (names of 3 letters or more).
 */
export function suggestFlag(name: string, known: string[]): string | undefined {
  const allowed = name.length < 6 ? 1 : 2;
  let best: string | undefined;
  let bestDistance = allowed + 1;
  for (const candidate of known) {
    const distance = editDistance(name, candidate);
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  if (best !== undefined) return best;
  const extending = known.filter((candidate) => candidate.startsWith(name));
  return name.length >= 3 && extending.length === 1 ? extending[0] : undefined;
}

/** yargs collects a flag given twice into a list; for single-valued flags the last one counts. */
export function last<T>(value: T | T[]): T {
  return Array.isArray(value) ? value[value.length - 1] : value;
}

/** Bad command-line input; the message is the whole line to print. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** Runs a program's main; errors print as `program: message` (a UsageError as is), exit 2 for a UsageError and 1 otherwise. */
export function runMain(program: string, main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    console.error(error instanceof UsageError ? message : `${program}: ${message}`);
    process.exitCode = error instanceof UsageError ? 2 : 1;
  });
}
