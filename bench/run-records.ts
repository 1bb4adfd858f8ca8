// A finished run's records, as the benchmarks read them: its metrics, its events and its summary.
import * as path from 'node:path';
import { runFiles } from '../src/run/files';
import { readLines, readObject } from '../src/run/reader';
import type { EventRecord, StepRecord, Summary } from '../src/run/records';

export interface RunRecords {
  metrics: StepRecord[];
  events: EventRecord[];
  summary: Summary;
}

export function runRecords(runDir: string): RunRecords {
  const lines = <T>(file: string): T[] => readLines(path.join(runDir, file)).map(({ value }) => value as unknown as T);
  return {
    metrics: lines<StepRecord>(runFiles.metrics),
    events: lines<EventRecord>(runFiles.events),
    summary: readObject(path.join(runDir, runFiles.summary)) as unknown as Summary,
  };
}
