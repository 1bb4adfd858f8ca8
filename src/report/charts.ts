// The report's charts as vega-lite specs, rendered to SVG in Node by vega (no browser, no
// canvas): loss against step and against wall time with failures marked, world size, test
// accuracy. Runs share axes and colours across charts.
import * as vega from 'vega';
import * as vl from 'vega-lite';
import type { TopLevelSpec } from 'vega-lite';
import type { Run } from './run-data';

export interface Chart {
  title: string;
  /** how to read it, under the chart */
  caption: string;
  /** without config: standalone() and combined() add it */
  spec: ChartSpec;
}

type ChartSpec = Record<string, unknown>;

const width = 720;
const height = 260;
const font = 'DejaVu Sans, Helvetica, Arial, sans-serif';
const config = { font, background: 'white', view: { stroke: '#ddd' } };

/** The charts for `runs`, each run named by `labels[i]`. */
export function reportCharts(runs: Run[], labels: string[]): Chart[] {
  const steps = runs.flatMap((run, i) => run.steps.map((s) => ({ run: labels[i], step: s.step, seconds: (s.time - run.startTime) / 1000, loss: s.loss, world: s.world })));
  const evaluations = runs.flatMap((run, i) => {
    const points = run.steps.filter((s) => typeof s.test_accuracy === 'number').map((s) => ({ run: labels[i], step: s.step, accuracy: s.test_accuracy }));
    // the final evaluation follows the last step's metrics line; summary.json has it
    const last = run.summary.steps - 1;
    if (run.summary.test_accuracy !== null && points.at(-1)?.step !== last) points.push({ run: labels[i], step: last, accuracy: run.summary.test_accuracy });
    return points;
  });
  const failures = runs.flatMap((run, i) => run.recoveries.map((r) => ({
    run: labels[i],
    step: r.step,
    seconds: (r.time - run.startTime) / 1000,
    loss: run.steps.find((s) => s.step === r.step)?.loss,
  })));
  const maxWorld = Math.max(...runs.map((run) => run.summary.world_initial));
  const color = { field: 'run', type: 'nominal' as const, scale: { domain: labels }, legend: { title: 'run', labelLimit: 260, symbolType: 'stroke', symbolOpacity: 1, symbolStrokeWidth: 3 } };
  // a moving mean over about 2% of the run: the per-step loss of one batch is noisy
  const window = Math.max(1, Math.round(Math.max(...runs.map((r) => r.steps.length)) / 50));

  const loss = (x: { field: string; title: string }): ChartSpec => {
    const axis = { field: x.field, type: 'quantitative' as const, title: x.title };
    return {
      width, height,
      layer: [
        { data: { values: steps }, mark: { type: 'line', opacity: 0.25, strokeWidth: 1 }, encoding: { x: axis, y: { field: 'loss', type: 'quantitative', title: 'loss', scale: { zero: false } }, color } },
        {
          data: { values: steps },
          transform: [{ window: [{ op: 'mean', field: 'loss', as: 'mean_loss' }], frame: [-(window - 1), 0], groupby: ['run'], sort: [{ field: x.field }] }],
          mark: { type: 'line', strokeWidth: 2 },
          encoding: { x: axis, y: { field: 'mean_loss', type: 'quantitative', title: 'loss' }, color },
        },
        { data: { values: failures }, mark: { type: 'rule', strokeDash: [5, 4], strokeWidth: 1.5 }, encoding: { x: axis, color } },
        { data: { values: failures }, mark: { type: 'point', shape: 'triangle-down', size: 140, filled: true, opacity: 1 }, encoding: { x: axis, y: { field: 'loss', type: 'quantitative' }, color } },
      ],
    };
  };
  const failureNote = failures.length > 0 ? ' Dashed lines and triangles: failures (where the survivors saw them).' : '';
  const charts: Chart[] = [
    { title: 'Loss against step', caption: `Thin: the loss of each step; bold: its mean over the last ${window} steps.${failureNote}`, spec: loss({ field: 'step', title: 'step' }) },
    { title: 'Loss against wall time', caption: `Seconds since the run started; the same curves as above.${failureNote}`, spec: loss({ field: 'seconds', title: 'wall time (s)' }) },
    {
      title: 'World size over time',
      caption: 'Ranks taking part in each committed step, against seconds since the run started.',
      spec: {
        width, height,
        data: { values: steps },
        mark: { type: 'line', interpolate: 'step-after', strokeWidth: 2 },
        encoding: {
          x: { field: 'seconds', type: 'quantitative', title: 'wall time (s)' },
          y: { field: 'world', type: 'quantitative', title: 'ranks', scale: { domain: [0, maxWorld] }, axis: { values: [...Array(maxWorld + 1).keys()], format: 'd' } },
          color,
        },
      },
    },
  ];
  if (evaluations.length > 0) {
    charts.push({
      title: 'Test accuracy',
      caption: 'On the whole test split, at each evaluation step.',
      spec: {
        width, height,
        data: { values: evaluations },
        mark: { type: 'line', point: true, strokeWidth: 2 },
        encoding: {
          x: { field: 'step', type: 'quantitative', title: 'step' },
          y: { field: 'accuracy', type: 'quantitative', title: 'test accuracy', scale: { zero: false }, axis: { format: '.0%' } },
          color,
        },
      },
    });
  }
  return charts;
}

export function standalone(chart: Chart): TopLevelSpec {
  return { config, ...chart.spec } as TopLevelSpec;
}

/** All charts in one figure (two per row), for the PNG export. */
export function combined(charts: Chart[], title: string): TopLevelSpec {
  return {
    config,
    title: { text: title, fontSize: 16 },
    columns: 2,
    concat: charts.map((chart) => ({ ...chart.spec, title: chart.title })),
    resolve: { scale: { color: 'shared' } },
  } as TopLevelSpec;
}

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
