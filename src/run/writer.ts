// Writing a run directory (files.ts names its files). Only the leader (lowest live rank) appends
// metrics and events; a new leader first appends the committed steps and events the old one may
// not have written. summary.json is written at the end, atomically.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { namingFile } from '../base/file-errors';
import { writeAtomically } from '../base/atomic-write';
import { rankLogName, runFiles } from './files';
import { launchMarkName, pidFileText } from './pids';
import { fileSize, lastRecord, recordsFrom } from './reader';
import type { EventRecord, RunEvent, StepRecord, Summary } from './records';
import { makeDirectory } from '../base/make-directory';

/**
 * Creates the run directory. One that already holds a run is refused in one line, unless the run
 * resumes (`resuming`) and that run did not complete: then this run appends to its files, keeping
 * their history (the report draws both as one run, the resume marked). `launch` is the launch's
 * PMIx namespace (launcherNamespace): the run its own faster ranks began (a stop at start-up
 * already recorded while a loaded rank was still loading) is its own, not one to refuse.
 */
export function createRunDir(dir: string, resuming = false, launch?: string): void {
  const mark = launch === undefined ? undefined : path.join(dir, runFiles.pids, launchMarkName(launch));
  if (fs.existsSync(dir)) {
    if (!fs.statSync(dir).isDirectory()) throw new Error(`${dir}: --run-dir exists and is not a directory`);
    const entries = fs.readdirSync(dir).filter((name) => name !== runFiles.logs && name !== runFiles.pids);
    if (resuming && entries.includes(runFiles.summary))
      throw new Error(`${dir}: --run-dir holds a run that completed (${runFiles.summary}); resume into a new directory`);
    const ownLaunchBegan = mark !== undefined && fs.existsSync(mark);
    if (!resuming && entries.length > 0 && !ownLaunchBegan)
      throw new Error(`${dir}: --run-dir already holds a run (${entries.slice(0, 3).join(', ')}); choose a new directory or --resume it`);
  }
  makeDirectory(path.join(dir, runFiles.logs));
  makeDirectory(path.join(dir, runFiles.pids));
  if (mark !== undefined) fs.closeSync(fs.openSync(mark, 'a'));
}

export class RunLog {
  private leader = false;
  /** the last committed steps' records and the last events, for a new leader to fill in what the old one missed */
  private recent: StepRecord[] = [];
  private recentEvents: EventRecord[] = [];
  /** where this run's lines start in metrics.jsonl and events.jsonl (past a resumed run's history) */
  private readonly metricsFrom: number;
  private readonly eventsFrom: number;
  /** the files appended to, by name, open for appending */
  private readonly appendFds = new Map<string, number>();

  constructor(
    readonly dir: string,
    private readonly worldRank: number,
  ) {
    // every rank opens its log before MPI starts, before the leader can write a line of this run
    this.metricsFrom = fileSize(path.join(dir, runFiles.metrics));
    this.eventsFrom = fileSize(path.join(dir, runFiles.events));
    fs.writeFileSync(path.join(dir, runFiles.pids, String(worldRank)), pidFileText());
  }

  get logFile(): string {
    return path.join(this.dir, runFiles.logs, rankLogName(this.worldRank));
  }

  /** Makes this rank the writer (or not); on becoming it, appends the steps and events the files lack. */
  setLeader(leader: boolean): void {
    if (leader && !this.leader) {
      const lastStep = lastRecord<StepRecord>(path.join(this.dir, runFiles.metrics), this.metricsFrom)?.step ?? -1;
      for (const record of this.recent) if (record.step > lastStep) this.append(runFiles.metrics, record);
      for (const record of this.missingEvents()) this.append(runFiles.events, record);
    }
    this.leader = leader;
  }

  get isLeader(): boolean {
    return this.leader;
  }

  /**
   * The recent events the file lacks. Every survivor records the same events of a recovery, each
   * with its own clock, so they are matched by event and step: where the file has w records of a
   * pair and this rank holds h, the file lacks this rank's latest h - w.
   */
  private missingEvents(): EventRecord[] {
    const key = (record: RunEvent) => `${record.event}@${record.step ?? ''}`;
    const written = new Map<string, number>();
    for (const record of recordsFrom<RunEvent>(path.join(this.dir, runFiles.events), this.eventsFrom)) {
      const k = key(record);
      written.set(k, (written.get(k) ?? 0) + 1);
    }
    // the file lacks a pair's records past the first w this rank holds
    const seen = new Map<string, number>();
    return this.recentEvents.filter((record) => {
      const k = key(record);
      seen.set(k, (seen.get(k) ?? 0) + 1);
      return seen.get(k)! > (written.get(k) ?? 0);
    });
  }

  /** Every rank records each committed step; the leader writes it. */
  step(record: StepRecord): void {
    this.recent.push(record);
    if (this.recent.length > 4) this.recent.shift();
    if (this.leader) this.append(runFiles.metrics, record);
  }

  event(event: RunEvent): void {
    const record: EventRecord = { time: Date.now(), ...event };
    this.recentEvents.push(record);
    if (this.recentEvents.length > 16) this.recentEvents.shift();
    if (this.leader) this.append(runFiles.events, record);
  }

  private append(file: string, record: StepRecord | EventRecord): void {
    const target = path.join(this.dir, file);
    namingFile(target, () => {
      // opened once (a line per step): one write per line, so a kill -9 cannot leave half of it
      let fd = this.appendFds.get(file);
      if (fd === undefined) {
        fd = fs.openSync(target, 'a');
        this.appendFds.set(file, fd);
      }
      fs.writeSync(fd, JSON.stringify(record) + '\n');
    });
  }

  /** Closes the files this rank appends to (at the end of the run). */
  close(): void {
    for (const fd of this.appendFds.values()) fs.closeSync(fd);
    this.appendFds.clear();
  }
}

/**
 * Appends `event` to the run's events.jsonl from outside the job (launch/ft-run between two jobs,
 * when no rank writes): one write per line, like the leader's.
 */
export function appendRunEvent(dir: string, event: RunEvent): void {
  const target = path.join(dir, runFiles.events);
  namingFile(target, () => fs.appendFileSync(target, JSON.stringify({ time: Date.now(), ...event }) + '\n'));
}

/** The final model: its spec (when known) first, then the weights, each atomically. */
export function writeModel(dir: string, safetensors: Uint8Array, spec?: string): void {
  if (spec !== undefined) writeAtomically(path.join(dir, runFiles.modelSpec), spec);
  writeAtomically(path.join(dir, runFiles.model), safetensors);
}

/** A language model's text at the end of training, atomically. */
export function writeSample(dir: string, text: string): void {
  writeAtomically(path.join(dir, runFiles.sample), text);
}

export function writeSummary(dir: string, summary: Summary): void {
  writeAtomically(path.join(dir, runFiles.summary), JSON.stringify(summary, null, 2) + '\n');
}
