// The runs' steps as one tidy CSV table (ft-report --csv): a row per run and committed step, the
// numbers exactly as metrics.jsonl holds them, an empty cell where a step has no such value.
import type { StepRecord } from '../run/records';
import type { Run } from './run-data';

const columns = ['run', 'step', 'time', 'loss', 'lr', 'world', 'step_ms', 'test_accuracy', 'test_loss'] as const;

/** A CSV cell: quoted where it holds a comma, a quote or a line break. */
function cell(value: string | number | undefined): string {
  if (value === undefined) return '';
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The table with a header line; `time` is ms since the epoch, as in metrics.jsonl. */
export function stepsCsv(runs: Run[], labels: string[]): string {
  const rows = runs.flatMap((run, i) =>
    run.steps.map((s) => columns.map((column) => cell(column === 'run' ? labels[i] : s[column as keyof StepRecord])).join(',')),
  );
  return [columns.join(','), ...rows].map((line) => `${line}\n`).join('');
}
