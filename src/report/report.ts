// From run directories to a report: names the runs, compares each with its baseline, renders the
// charts and lays out the HTML page; the PNG export draws the same charts in one figure.
import * as path from 'node:path';
import { Resvg } from '@resvg/resvg-js';
import { compareWithBaselines } from './baseline';
import { combined, renderSvg, reportCharts, standalone } from './charts';
import { reportHtml } from './html';
import type { Run } from './run-data';

export interface ReportInput {
  title: string;
  runs: Run[];
  /** compare every run with this one instead of picking baselines */
  baseline?: Run;
  /** one line per run directory that was passed over */
  skipped: string[];
}

/** Each run's name: its directory's base name, or its path where base names repeat. */
export function runLabels(runs: Run[]): string[] {
  const names = runs.map((run) => path.basename(path.resolve(run.dir)));
  return runs.map((run, i) => (names.indexOf(names[i]) === names.lastIndexOf(names[i]) ? names[i] : run.dir));
}

export async function reportPage(input: ReportInput): Promise<string> {
  const labels = runLabels(input.runs);
  const charts = await Promise.all(reportCharts(input.runs, labels).map(async (chart) => ({ chart, svg: await renderSvg(standalone(chart)) })));
  return reportHtml({ ...input, labels, comparisons: compareWithBaselines(input.runs, input.baseline), charts, generated: new Date() });
}

/** The charts as one PNG, at twice their size in pixels (sharp on high-density screens and in print). */
export async function reportPng(input: ReportInput): Promise<Buffer> {
  const svg = await renderSvg(combined(reportCharts(input.runs, runLabels(input.runs)), input.title));
  const image = new Resvg(svg, { fitTo: { mode: 'zoom', value: 2 }, font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' } });
  return image.render().asPng();
}
