// The run directory contract (DESIGN.md "Run directory"): metrics.jsonl (one line per committed
// step), events.jsonl (failures and each recovery phase, with durations), summary.json and
// model.safetensors (written at the end, atomically), logs/ (one log per rank), pids/ (each rank's
// pid, for launch/drill), drill.json (launch/drill's kills). Only the leader (lowest live rank)
// appends metrics and events; a new leader first appends the committed steps the old one may not
// have written.
import * as fs from 'node:fs';
import * as path from 'node:path';

export const runFiles = {
  metrics: 'metrics.jsonl',
  events: 'events.jsonl',
  summary: 'summary.json',
  model: 'model.safetensors',
  logs: 'logs',
  pids: 'pids',
  /** launch/drill's record of its kills */
  drill: 'drill.json',
} as const;

/** Throws one line if `dir` already holds a run (anything in it); creates it otherwise. */
export function createRunDir(dir: string): void {
  if (fs.existsSync(dir)) {
    if (!fs.statSync(dir).isDirectory()) throw new Error(`${dir}: --run-dir exists and is not a directory`);
    const entries = fs.readdirSync(dir).filter((name) => name !== runFiles.logs && name !== runFiles.pids);
    if (entries.length > 0) throw new Error(`${dir}: --run-dir already holds a run (${entries.slice(0, 3).join(', ')}); choose a new directory`);
  }
  fs.mkdirSync(path.join(dir, runFiles.logs), { recursive: true });
  fs.mkdirSync(path.join(dir, runFiles.pids), { recursive: true });
}

/** A committed step's metrics line; `step` orders them. */
type StepLine = { step: number } & object;

export class RunLog {
  private leader = false;
  /** the last committed steps' records and the last events, for a new leader to fill in what the old one missed */
  private recent: StepLine[] = [];
  private recentEvents: { time: number }[] = [];

  constructor(readonly dir: string, private readonly worldRank: number) {
    fs.writeFileSync(path.join(dir, runFiles.pids, String(worldRank)), `${process.pid}\n`);
  }

  get logFile(): string {
    return path.join(this.dir, runFiles.logs, `rank-${this.worldRank}.log`);
  }

  /** Makes this rank the writer (or not); on becoming it, appends the steps and events the files lack. */
  setLeader(leader: boolean): void {
    if (leader && !this.leader) {
      const lastStep = lastRecord<StepLine>(path.join(this.dir, runFiles.metrics))?.step ?? -1;
      for (const record of this.recent) if (record.step > lastStep) this.append(runFiles.metrics, record);
      const lastTime = lastRecord<{ time: number }>(path.join(this.dir, runFiles.events))?.time ?? -1;
      for (const record of this.recentEvents) if (record.time > lastTime) this.append(runFiles.events, record);
    }
    this.leader = leader;
  }

  get isLeader(): boolean {
    return this.leader;
  }

  /** Every rank records each committed step; the leader writes it. */
  step(record: StepLine): void {
    this.recent.push(record);
    if (this.recent.length > 4) this.recent.shift();
    if (this.leader) this.append(runFiles.metrics, record);
  }

  event(record: Record<string, unknown>): void {
    const line = { time: Date.now(), ...record };
    this.recentEvents.push(line);
    if (this.recentEvents.length > 16) this.recentEvents.shift();
    if (this.leader) this.append(runFiles.events, line);
  }

  private append(file: string, record: object): void {
    // one write per line: a kill -9 cannot leave half of it
    fs.appendFileSync(path.join(this.dir, file), JSON.stringify(record) + '\n');
  }
}

/** The last line of a JSON-lines file of the run; undefined before the first, or while it is being written. */
export function lastRecord<T>(file: string): T | undefined {
  if (!fs.existsSync(file)) return undefined;
  const lines = fs.readFileSync(file, 'utf8').trimEnd().split('\n').filter(Boolean);
  try {
    return lines.length === 0 ? undefined : (JSON.parse(lines[lines.length - 1]) as T);
  } catch {
    return undefined; // another process's line, half appended
  }
}
