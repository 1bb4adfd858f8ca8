// Which run each run's final parameters are compared with: the baseline the user names, or else
// the first run listed that survived no failure and trained the same setup (model, data, shards,
// global batch, seed, steps). An exact recovery must end with the baseline's params_sha256.
import type { Summary } from '../run/records';
import type { Run } from './run-data';

export type Verdict = 'baseline' | 'equal' | 'differs' | 'no baseline';

export interface Comparison {
  baseline?: Run;
  verdict: Verdict;
}

const setupFields: (keyof Summary)[] = ['model', 'data', 'shards', 'batch', 'seed', 'steps'];

function sameSetup(a: Summary, b: Summary): boolean {
  return setupFields.every((field) => a[field] === b[field]);
}

export function compareWithBaselines(runs: Run[], named?: Run): Comparison[] {
  return runs.map((run) => {
    const baseline = named ?? runs.find((other) => other.summary.failures.length === 0 && sameSetup(other.summary, run.summary));
    if (baseline === undefined) return { verdict: 'no baseline' };
    if (baseline === run) return { baseline, verdict: 'baseline' };
    return { baseline, verdict: baseline.summary.params_sha256 === run.summary.params_sha256 ? 'equal' : 'differs' };
  });
}
