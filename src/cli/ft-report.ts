// ft-report: the report comparing training runs (loss curves, failures, world size, accuracy,
// recovery breakdowns, parameters against the baseline, what failures would cost at scale) as one
// offline HTML file, and optionally the charts as a PNG and the steps as a CSV table. Run directories that cannot be read are named and passed over (--strict:
// the report is refused instead).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { baselineRun, defaultProjection, readRuns, writeCsv, writeReport } from '../report/report';
import { commandLine, last, runMain, UsageError } from './command';
import { serveReport, type LiveReport, type LiveReportSettings } from '../report/serve';

/** The port --serve listens on by default. */
const defaultPort = 8808;

/** Serves the live report until SIGINT or SIGTERM; a port in use is bad usage (exit 2), with nothing served. */
async function serve(dirs: string[], settings: LiveReportSettings, port: number): Promise<void> {
  let live: LiveReport;
  try {
    live = await serveReport(dirs, settings, port);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE')
      throw new UsageError(`ft-report: --port ${port}: in use on 127.0.0.1 (choose another, or --port 0 for any free one)`);
    throw error;
  }
  const count = live.runs();
  console.log(
    `ft-report: serving the report of ${count} run${count === 1 ? '' : 's'} on ${live.url} (kept current as the runs go on; Ctrl-C stops)`,
  );
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await live.close();
  console.log(`ft-report: ${signal}: stopped serving ${live.url}`);
}

function checkOutput(flag: string, file: string, extension: string): void {
  if (path.extname(file).toLowerCase() !== extension) throw new UsageError(`ft-report: ${flag} ${file}: expected a ${extension} file name`);
  if (fs.existsSync(file) && fs.statSync(file).isDirectory()) throw new UsageError(`ft-report: ${flag} ${file}: is a directory`);
}

runMain('ft-report', async () => {
  const args = commandLine(
    'ft-report',
    "$0 RUN_DIR... -o report.html [--png report.png] [--csv steps.csv]\n$0 RUN_DIR... --serve [--port P]\n\nCompares ft-train runs: loss against step and wall time (failures marked), loss minus the baseline's, step time, throughput, world size, learning rate, test accuracy, the settings, a table per run, the recovery of each failure and what failures would cost at scale. With --serve, the report is served on 127.0.0.1 and kept current while the runs go on (the page updates itself, without a reload); Ctrl-C stops the server.",
  )
    .strict(false)
    .strictOptions() // the run directories are positional
    .option('o', {
      alias: 'output',
      type: 'string',
      describe: 'the HTML report to write (self-contained, opens offline; default: none, with --csv)',
    })
    .option('png', { type: 'string', describe: 'also write the charts as one PNG (default: none)' })
    .option('csv', {
      type: 'string',
      describe:
        "write every run's steps as one CSV table (run, step, time, loss, lr, world, step_ms, test_accuracy, test_loss) (default: none)",
    })
    .option('project', {
      type: 'string',
      default: defaultProjection.ranks.join(','),
      describe: 'world sizes N1,N2,... at which to project what failures would cost',
    })
    .option('failure-rate', {
      type: 'number',
      default: defaultProjection.failuresPerDay,
      describe: 'failures per rank per day, for the projection',
    })
    .option('baseline', {
      type: 'string',
      describe:
        "compare every run's params_sha256 with this run (default: per run, the first listed that lost no rank and has the same setup)",
    })
    .option('title', { type: 'string', default: 'ft-train report', describe: "the report's title" })
    .option('serve', {
      type: 'boolean',
      default: false,
      describe: 'serve the report on 127.0.0.1 and keep it current while the runs go on, instead of writing files',
    })
    .option('port', { type: 'number', describe: `the port --serve listens on (0: any free one) (default: ${defaultPort})` })
    .option('strict', {
      type: 'boolean',
      default: false,
      describe: 'refuse to write a report when a run directory cannot be read (default: pass it over, named in the report)',
    })
    .check((a) => {
      if (a._.length === 0) throw new Error('give at least one run directory');
      if (a.serve && (a.o !== undefined || a.png !== undefined || a.csv !== undefined))
        throw new Error('--serve shows the report in a browser, -o, --png and --csv write it to files: give one or the other');
      if (a.port !== undefined && !a.serve) throw new Error('--port goes with --serve');
      const port = a.port === undefined ? defaultPort : last(a.port);
      if (!(Number.isSafeInteger(port) && port >= 0 && port <= 65535))
        throw new Error(`--port expects an integer in [0, 65535], got ${port}`);
      if (a.serve) return true;
      if (a.o === undefined && a.csv === undefined) throw new Error('give -o report.html, --csv steps.csv, both, or --serve');
      if (a.png !== undefined && a.o === undefined) throw new Error('--png goes with -o report.html');
      if (!/^[1-9]\d*(,[1-9]\d*)*$/.test(String(last(a.project))))
        throw new Error(`--project expects world sizes N1,N2,... (positive integers), got "${last(a.project)}"`);
      const rate = last(a['failure-rate']);
      if (!(Number.isFinite(rate) && rate > 0))
        throw new Error(`--failure-rate expects a positive number of failures per rank per day, got "${rate}"`);
      return true;
    })
    .parseSync();
  const output = args.o === undefined ? undefined : last(args.o);
  const png = args.png === undefined ? undefined : last(args.png);
  const csv = args.csv === undefined ? undefined : last(args.csv);
  if (output !== undefined) checkOutput('-o', output, '.html');
  if (png !== undefined) checkOutput('--png', png, '.png');
  if (csv !== undefined) checkOutput('--csv', csv, '.csv');
  const port = args.port === undefined ? defaultPort : last(args.port);
  const projection = { ranks: String(last(args.project)).split(',').map(Number), failuresPerDay: last(args['failure-rate']) };

  // a directory named twice (runs/a, runs/a/) is one run
  const dirs = args._.map(String).filter((dir, i, all) => all.findIndex((other) => path.resolve(other) === path.resolve(dir)) === i);
  const { runs, skipped } = readRuns(dirs);
  if (args.strict && skipped.length > 0) throw new Error(skipped[0]);
  for (const line of skipped) console.error(`ft-report: skipped ${line}`);
  if (runs.length === 0)
    throw new Error(`no readable run directory (${skipped.length} skipped); nothing ${args.serve ? 'served' : 'written'}`);
  const baseline = args.baseline === undefined ? undefined : baselineRun(runs, last(args.baseline));

  if (args.serve) {
    await serve(
      dirs,
      { title: last(args.title), projection, baseline: args.baseline === undefined ? undefined : last(args.baseline) },
      port,
    );
    return;
  }
  if (output !== undefined) await writeReport({ title: last(args.title), runs, baseline, skipped, projection }, output, png);
  if (csv !== undefined) writeCsv(runs, csv);
  const written = [output, png, csv].filter((file) => file !== undefined);
  console.log(
    `ft-report: ${runs.length} run${runs.length === 1 ? '' : 's'}${skipped.length ? ` (${skipped.length} skipped)` : ''}; wrote ${written.slice(0, -1).join(', ')}${written.length > 1 ? ' and ' : ''}${written.at(-1)}`,
  );
});
