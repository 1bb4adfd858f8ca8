// ft-report: the report comparing training runs (loss curves, failures, world size, accuracy,
// recovery breakdowns, parameters against the baseline) as one offline HTML file, and optionally
// the charts as a PNG. Run directories that cannot be read are named and passed over (--strict:
// the report is refused instead).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readRun, type Run } from '../report/run-data';
import { readRuns, writeReport } from '../report/report';
import { commandLine, last, runMain, UsageError } from './command';

function checkOutput(flag: string, file: string, extension: string): void {
  if (path.extname(file).toLowerCase() !== extension) throw new UsageError(`ft-report: ${flag} ${file}: expected a ${extension} file name`);
  if (fs.existsSync(file) && fs.statSync(file).isDirectory()) throw new UsageError(`ft-report: ${flag} ${file}: is a directory`);
}

runMain('ft-report', async () => {
  const args = commandLine('ft-report', '$0 RUN_DIR... -o report.html [--png report.png]\n\nCompares ft-train runs: loss against step and wall time (failures marked), world size, test accuracy, a table per run and the recovery of each failure.')
    .strict(false)
    .strictOptions() // the run directories are positional
    .option('o', { alias: 'output', type: 'string', demandOption: true, describe: 'the HTML report to write (self-contained, opens offline)' })
    .option('png', { type: 'string', describe: 'also write the charts as one PNG (default: none)' })
    .option('baseline', { type: 'string', describe: 'compare every run\'s params_sha256 with this run (default: per run, the first listed that lost no rank and has the same setup)' })
    .option('title', { type: 'string', default: 'ft-train report', describe: 'the report\'s title' })
    .option('strict', { type: 'boolean', default: false, describe: 'refuse to write a report when a run directory cannot be read (default: pass it over, named in the report)' })
    .check((a) => {
      if (a._.length === 0) throw new Error('give at least one run directory');
      return true;
    })
    .parseSync();
  const output = last(args.o);
  const png = args.png === undefined ? undefined : last(args.png);
  checkOutput('-o', output, '.html');
  if (png !== undefined) checkOutput('--png', png, '.png');

  // a directory named twice (runs/a, runs/a/) is one run
  const dirs = args._.map(String).filter((dir, i, all) => all.findIndex((other) => path.resolve(other) === path.resolve(dir)) === i);
  const { runs, skipped } = readRuns(dirs);
  if (args.strict && skipped.length > 0) throw new Error(skipped[0]);
  for (const line of skipped) console.error(`ft-report: skipped ${line}`);
  if (runs.length === 0) throw new Error(`no readable run directory (${skipped.length} skipped); nothing written`);
  let baseline: Run | undefined;
  if (args.baseline !== undefined) {
    const dir = path.resolve(last(args.baseline));
    baseline = runs.find((run) => path.resolve(run.dir) === dir) ?? readRun(last(args.baseline));
  }

  await writeReport({ title: last(args.title), runs, baseline, skipped }, output, png);
  console.log(`ft-report: ${runs.length} run${runs.length === 1 ? '' : 's'}${skipped.length ? ` (${skipped.length} skipped)` : ''}; wrote ${output}${png ? ` and ${png}` : ''}`);
});
