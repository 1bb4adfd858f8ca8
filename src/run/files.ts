// The names of what a run directory holds (docs/architecture.md, the run-directory contract), for its writer and its readers.
export const runFiles = {
  /** one line per committed step (StepRecord) */
  metrics: 'metrics.jsonl',
  /** failures and each recovery phase, with durations (EventRecord) */
  events: 'events.jsonl',
  /** the outcome, written at the end (Summary) */
  summary: 'summary.json',
  /** the final parameters and buffers, written at the end */
  model: 'model.safetensors',
  /** the model's spec beside them, every default filled in (examples/pytorch/load_model.py reads the pair) */
  modelSpec: 'model.json',
  /** a language model's text at the end of training (ft-train --sample-tokens) */
  sample: 'sample.txt',
  /** one log per rank */
  logs: 'logs',
  /** each rank's pid, for launch/drill */
  pids: 'pids',
  /** launch/drill's record of its kills */
  drill: 'drill.json',
} as const;

/** A rank's log in `logs/`: one JSON line per entry (its message, level, timestamp). */
export const rankLogName = (worldRank: number): string => `rank-${worldRank}.log`;
