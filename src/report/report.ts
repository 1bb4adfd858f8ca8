// From run directories to a report: reads the runs, names them, compares each with its baseline,
// renders the charts and lays out the HTML page; the PNG export draws the same charts in one
// figure; the CSV export holds the steps of every run.
import * as path from 'node:path';
import { Resvg } from '@resvg/resvg-js';
import { writeAtomically } from '../base/atomic-write';
import { RunDirError } from '../run/reader';
import { compareWithBaselines, type Comparison } from './baseline';
import { combined, compile, renderSvg, reportCharts, standalone, type Chart } from './charts';
import { stepsCsv } from './csv';
import { reportHtml, type Projection } from './html';
import { readRun, type Run } from './run-data';
import { makeDirectory } from '../base/make-directory';

export interface ReportInput {
  title: string;
  runs: Run[];
  /** compare every run with this one instead of picking baselines */
  baseline?: Run;
  /** one line per run directory that was passed over */
  skipped: string[];
  /** what failures would cost at scale (default: 1,024 and 8,192 ranks, 2e-3 failures per rank per day) */
  projection?: Projection;
}

export const defaultProjection: Projection = { ranks: [1024, 8192], failuresPerDay: 2e-3 };

/** The runs of `dirs` that can be read, and one line for each that cannot. */
export function readRuns(dirs: string[]): { runs: Run[]; skipped: string[] } {
  const runs: Run[] = [];
  const skipped: string[] = [];
  for (const dir of dirs) {
    try {
      runs.push(readRun(dir));
    } catch (error) {
      if (!(error instanceof RunDirError)) throw error;
      skipped.push(error.message);
    }
  }
  return { runs, skipped };
}

/** The run --baseline names: one of `runs` when it is listed, else read from `dir`. */
export function baselineRun(runs: Run[], dir: string): Run {
  const resolved = path.resolve(dir);
  return runs.find((run) => path.resolve(run.dir) === resolved) ?? readRun(dir);
}

/** Each run's name: its directory's base name, or its path where base names repeat. */
export function runLabels(runs: Run[]): string[] {
  const names = runs.map((run) => path.basename(path.resolve(run.dir)));
  return runs.map((run, i) => (names.indexOf(names[i]) === names.lastIndexOf(names[i]) ? names[i] : run.dir));
}

/** Writes the runs' steps as one CSV table, atomically. */
export function writeCsv(runs: Run[], file: string): void {
  makeDirectory(path.dirname(path.resolve(file)));
  writeAtomically(file, stepsCsv(runs, runLabels(runs)));
}

/** The runs' names, their comparisons with their baselines and the report's charts. */
function chartsOf(input: ReportInput): { labels: string[]; comparisons: Comparison[]; charts: Chart[] } {
  const labels = runLabels(input.runs);
  const comparisons = compareWithBaselines(input.runs, input.baseline);
  return { labels, comparisons, charts: reportCharts(input.runs, labels, comparisons) };
}

async function pageOf(input: ReportInput, { labels, comparisons, charts }: ReturnType<typeof chartsOf>, live?: string): Promise<string> {
  const rendered = await Promise.all(
    charts.map(async (chart) => ({ chart, svg: await renderSvg(standalone(chart)), vega: compile(standalone(chart)) })),
  );
  return reportHtml({
    ...input,
    projection: input.projection ?? defaultProjection,
    labels,
    comparisons,
    charts: rendered,
    generated: new Date(),
    live,
  });
}

/** The report's HTML page, served live by ft-report --serve: `version` names the state of the runs it shows. */
export function livePage(input: ReportInput, version: string): Promise<string> {
  return pageOf(input, chartsOf(input), version);
}

/**
 * Writes the HTML report and, when `pngFile` is given, its charts as one PNG at twice their size in
 * pixels (sharp on high-density screens and in print). Both are rendered before either is written;
 * each file is written atomically.
 */
export async function writeReport(input: ReportInput, htmlFile: string, pngFile?: string): Promise<void> {
  const prepared = chartsOf(input);
  const html = await pageOf(input, prepared);
  const png =
    pngFile === undefined
      ? undefined
      : new Resvg(await renderSvg(combined(prepared.charts, input.title)), {
          fitTo: { mode: 'zoom', value: 2 },
          font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' },
        })
          .render()
          .asPng();
  for (const file of [htmlFile, pngFile]) if (file !== undefined) makeDirectory(path.dirname(path.resolve(file)));
  if (pngFile !== undefined && png !== undefined) writeAtomically(pngFile, png);
  writeAtomically(htmlFile, html);
}
