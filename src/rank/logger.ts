// A rank's log in the run directory (logs/rank-R.log): one JSON line per entry, its level, message,
// rank, pid, fields and time. Each entry is appended at once, synchronously: the lines are few (the
// start, the events, the stops and the end), none is lost to an exit that comes right after it,
// and they interleave in order with the plain lines a drill appends to the same file.
import * as fs from 'node:fs';

/** An entry's fields beside its message (a record, a result, the options). */
export type LogFields = object;

export class RankLogger {
  constructor(
    private readonly file: string,
    private readonly worldRank: number,
  ) {}

  info(message: string, fields?: LogFields): void {
    this.append('info', message, fields);
  }

  warn(message: string, fields?: LogFields): void {
    this.append('warn', message, fields);
  }

  error(message: string, fields?: LogFields): void {
    this.append('error', message, fields);
  }

  private append(level: string, message: string, fields: LogFields = {}): void {
    const entry = { level, message, rank: this.worldRank, pid: process.pid, ...fields, timestamp: new Date().toISOString() };
    fs.appendFileSync(this.file, JSON.stringify(entry) + '\n');
  }
}
