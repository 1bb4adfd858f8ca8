// Reading a run directory's files. A finished run's files are read strictly: a missing, unreadable
// or half-written one is a RunDirError naming the file and the problem. A live run's files are
// read with recordsFrom and lastRecord, which tolerate the line being appended.
import * as fs from 'node:fs';

export class RunDirError extends Error {}

export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The file's text; a file that cannot be read is a RunDirError naming it. */
function readText(file: string): string {
  if (!fs.existsSync(file)) throw new RunDirError(`${file}: missing`);
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new RunDirError(`${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

/** A JSON file holding one object. */
export function readObject(file: string): Json {
  let value: unknown;
  try {
    value = JSON.parse(readText(file));
  } catch (error) {
    if (error instanceof RunDirError) throw error;
    throw new RunDirError(`${file}: not JSON`);
  }
  if (!isObject(value)) throw new RunDirError(`${file}: not a JSON object`);
  return value;
}

/** The file's size in bytes, 0 when it does not exist: where a run that continues it starts. */
export function fileSize(file: string): number {
  return fs.existsSync(file) ? fs.statSync(file).size : 0;
}

/** The objects of a JSON-lines file with their line numbers (blank lines skipped). */
export function readLines(file: string): { value: Json; line: number }[] {
  const text = readText(file);
  if (text.length > 0 && !text.endsWith('\n')) throw new RunDirError(`${file}: half-written (its last line has no end)`);
  const lines: { value: Json; line: number }[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.length === 0) return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      value = undefined;
    }
    if (!isObject(value)) throw new RunDirError(`${file}: line ${i + 1} is not a JSON object`);
    lines.push({ value, line: i + 1 });
  });
  return lines;
}

/**
 * The last line of a JSON-lines file of a live run, among those from byte `from` on (a resumed
 * run's own, past the history it continues); undefined before the first, or while it is being written.
 */
export function lastRecord<T>(file: string, from = 0): T | undefined {
  if (!fs.existsSync(file)) return undefined;
  const lines = fs.readFileSync(file).subarray(from).toString('utf8').trimEnd().split('\n').filter(Boolean);
  try {
    return lines.length === 0 ? undefined : (JSON.parse(lines[lines.length - 1]) as T);
  } catch {
    return undefined; // another process's line, half appended
  }
}

/**
 * The records (JSON objects) of a JSON-lines file of a live run, from byte `from` on (a resumed
 * run's own, past the history it continues); none while the file does not exist. A blank line, or
 * one half written (by a process killed mid-line, or still appending), is passed over.
 */
export function recordsFrom<T>(file: string, from = 0): T[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file)
    .subarray(from)
    .toString('utf8')
    .split('\n')
    .flatMap((line) => {
      try {
        const value: unknown = JSON.parse(line);
        return isObject(value) ? [value as T] : [];
      } catch {
        return [];
      }
    });
}
