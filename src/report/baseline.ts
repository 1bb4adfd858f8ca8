// Which run each run's final parameters are compared with: the baseline the user names, or else
// the first run listed that finished, survived no failure and has the same settings (summary.json's
// `settings`, every one but the failure mode). Runs with other settings are not compared at all;
// an exact recovery must end with the baseline's params_sha256, a shrink one is expected to differ.
import type { RunSettings } from '../run/settings';
import type { Run } from './run-data';

export type Verdict = 'baseline' | 'equal' | 'differs' | 'no baseline' | 'other settings' | 'settings unknown' | 'unfinished';

export interface Comparison {
  baseline?: Run;
  verdict: Verdict;
  /** why a `differs` is expected (a shrink run that lost ranks trains on smaller batches) */
  expected?: string;
}

/** The setting that may differ between a run and its baseline: the mode is what is compared. */
const modeSetting = 'on_failure';

/** The names of the settings in which `a` and `b` differ, failure mode aside. */
function differentSettings(a: RunSettings, b: RunSettings): string[] {
  const names = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((name) => name !== modeSetting);
  return names.filter((name) => a[name] !== b[name]);
}

function sameSettings(a: Run, b: Run): boolean {
  return (
    a.summary?.settings !== undefined &&
    b.summary?.settings !== undefined &&
    differentSettings(a.summary.settings, b.summary.settings).length === 0
  );
}

function verdict(run: Run, baseline: Run): Comparison {
  if (baseline === run) return { baseline, verdict: 'baseline' };
  if (baseline.summary?.settings === undefined) return { verdict: 'settings unknown' };
  if (!sameSettings(run, baseline)) return { verdict: 'other settings' };
  if (baseline.summary.params_sha256 === run.summary!.params_sha256) return { baseline, verdict: 'equal' };
  const shrunk = run.summary!.on_failure === 'shrink' && run.summary!.failures.length > 0;
  return shrunk ? { baseline, verdict: 'differs', expected: 'shrink mode' } : { baseline, verdict: 'differs' };
}

export function compareWithBaselines(runs: Run[], named?: Run): Comparison[] {
  return runs.map((run) => {
    if (run.summary === undefined) return { verdict: 'unfinished' };
    if (run.summary.settings === undefined) return { verdict: 'settings unknown' };
    if (named !== undefined) return verdict(run, named);
    const baseline = runs.find((other) => other.summary !== undefined && other.summary.failures.length === 0 && sameSettings(other, run));
    return baseline === undefined ? { verdict: 'no baseline' } : verdict(run, baseline);
  });
}
