// The report's charts as vega-lite specs, rendered to SVG in Node by vega (no browser, no
// canvas) and, in a browser, by the page's inlined vega (tooltips, zoom and pan, a run picked in
// the legend): loss against step and wall time with failures marked, loss minus the baseline's,
// step time, throughput, world size, learning rate, test accuracy and loss. Runs share colours and dashes.
import * as vega from 'vega';
import * as vl from 'vega-lite';
import type { TopLevelSpec } from 'vega-lite';
import type { Comparison } from './baseline';
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

/** The charts for `runs`, each run named by `labels[i]`, each compared with its baseline in `comparisons[i]`. */
export function reportCharts(runs: Run[], labels: string[], comparisons: Comparison[]): Chart[] {
  const steps = runs.flatMap((run, i) => {
    // an evaluation pauses the steps after the one it follows, a recovery the step it retries: a wall-time line breaks there
    const recovered = new Set(run.recoveries.map((r) => r.step));
    const resumed = new Set([...run.resumes, ...run.corruptions.map((c) => c.to)]);
    let segment = 0;
    return run.steps.map((s, k) => {
      if (k > 0 && (typeof run.steps[k - 1].test_accuracy === 'number' || recovered.has(s.step) || resumed.has(s.step))) segment++;
      return {
        run: labels[i],
        step: s.step,
        seconds: (s.time - run.startTime) / 1000,
        loss: s.loss,
        lr: s.lr,
        world: s.world,
        step_ms: s.step_ms,
        samples_per_s: (s.samples * 1000) / s.step_ms,
        segment,
      };
    });
  });
  const evaluations = runs.flatMap((run, i) => {
    const points = run.steps
      .filter((s) => typeof s.test_accuracy === 'number')
      .map((s) => ({ run: labels[i], step: s.step, accuracy: s.test_accuracy!, loss: s.test_loss ?? null }));
    // the final evaluation follows the last step's metrics line; summary.json has it
    const summary = run.summary;
    if (summary !== undefined && summary.test_accuracy !== null && points.at(-1)?.step !== summary.steps - 1)
      points.push({ run: labels[i], step: summary.steps - 1, accuracy: summary.test_accuracy, loss: summary.test_loss });
    return points;
  });
  const differences = runs.flatMap((run, i) => {
    const baseline = comparisons[i].baseline;
    if (baseline === undefined || baseline === run) return [];
    const baseLoss = new Map(baseline.steps.map((s) => [s.step, s.loss]));
    return run.steps
      .filter((s) => baseLoss.has(s.step))
      .map((s) => ({ run: labels[i], step: s.step, difference: s.loss - baseLoss.get(s.step)! }));
  });
  const failures = runs.flatMap((run, i) =>
    run.recoveries.map((r) => ({
      run: labels[i],
      step: r.step,
      seconds: (r.time - run.startTime) / 1000,
      loss: run.steps.find((s) => s.step === r.step)?.loss,
    })),
  );
  const resumes = runs.flatMap((run, i) =>
    run.resumes.map((step) => ({
      run: labels[i],
      step,
      seconds: (run.steps.find((s) => s.step === step)!.time - run.startTime) / 1000,
    })),
  );
  const corruptions = runs.flatMap((run, i) =>
    run.corruptions.map((c) => ({
      run: labels[i],
      step: c.step,
      seconds: (c.time - run.startTime) / 1000,
      loss: run.steps.find((s) => s.step === c.step)?.loss ?? run.steps.at(-1)!.loss,
      what:
        c.ranks.length === 0
          ? `${c.differed.length > 0 ? `${c.differed.join('; ')} differed` : 'states differed at a join'}; ${c.action === 'stop' ? 'stopped' : `rolled back to step ${c.to}`}`
          : `rank(s) ${c.ranks.join(', ')}: ${c.differed.join('; ') || 'nobody can be named'}; ` +
            (c.action === 'evict' ? `evicted, rolled back to step ${c.to}` : 'stopped'),
    })),
  );
  // each rank's shard count: before the first change, then as each change left it (a recovery's changes show at the next)
  const shardCounts = runs.flatMap((run, i) =>
    run.rebalances.flatMap((r, k) => [
      ...(k === 0
        ? r.ranks.map((rank, j) => ({ run: labels[i], rank: `rank ${rank}`, step: run.steps[0]?.step ?? 0, shards: r.before[j] }))
        : []),
      ...r.ranks.map((rank, j) => ({ run: labels[i], rank: `rank ${rank}`, step: r.step, shards: r.after[j] })),
      ...(k === run.rebalances.length - 1
        ? r.ranks.map((rank, j) => ({ run: labels[i], rank: `rank ${rank}`, step: run.steps.at(-1)?.step ?? r.step, shards: r.after[j] }))
        : []),
    ]),
  );
  const maxWorld = Math.max(...runs.map((run) => Math.max(...run.steps.map((s) => s.world))));
  const legend = { title: 'run (click to pick)', labelLimit: 260, symbolType: 'stroke', symbolOpacity: 1, symbolStrokeWidth: 3 };
  const color = { field: 'run', type: 'nominal' as const, scale: { domain: labels }, legend };
  // identical curves lie on top of each other: each run has its own dash pattern as well
  const strokeDash = { field: 'run', type: 'nominal' as const, scale: { domain: labels }, legend };
  // clicking a run in the legend fades the others; dragging pans, the wheel zooms (in a browser)
  const params = [
    { name: 'zoom', select: 'interval', bind: 'scales' },
    { name: 'pick', select: { type: 'point', fields: ['run'] }, bind: 'legend' },
  ];
  // on lines, strokeOpacity: their transparent hover points keep opacity 0
  const faded = (opacity: number) => ({ condition: { param: 'pick', value: opacity }, value: opacity / 8 });
  const tooltip = (...fields: [string, string, string?][]) =>
    fields.map(([field, title, format]) => ({
      field,
      title,
      type: field === 'run' || field === 'rank' ? 'nominal' : 'quantitative',
      ...(format ? { format } : {}),
    }));
  const time = { field: 'seconds', type: 'quantitative', title: 'wall time (s)' };
  const step = { field: 'step', type: 'quantitative', title: 'step' };
  // against wall time, a line breaks at each pause (one line per segment); against step, it does not
  const segments = (x: ChartSpec) => (x === time ? { detail: { field: 'segment' } } : {});
  const stepsLine = (y: ChartSpec, x: ChartSpec, fields: [string, string, string?][], opacity = 1, strokeWidth = 2): ChartSpec => ({
    data: { values: steps },
    params,
    mark: { type: 'line', strokeWidth, point: 'transparent' },
    encoding: {
      x,
      y,
      color,
      strokeDash,
      ...segments(x),
      strokeOpacity: faded(opacity),
      tooltip: tooltip(['run', 'run'], ['step', 'step'], ...fields),
    },
  });
  const failureRules = (x: ChartSpec): ChartSpec => ({
    data: { values: failures },
    mark: { type: 'rule', strokeDash: [5, 4], strokeWidth: 1.5 },
    encoding: { x, color },
  });
  const resumeRules = (x: ChartSpec): ChartSpec => ({
    data: { values: resumes },
    mark: { type: 'rule', strokeDash: [1, 3], strokeWidth: 2 },
    encoding: { x, color, tooltip: tooltip(['run', 'run'], ['step', 'resumed at step']) },
  });
  const corruptionMarks = (x: ChartSpec, y: boolean): ChartSpec[] => [
    {
      data: { values: corruptions },
      mark: { type: 'rule', strokeWidth: 2.5, opacity: 0.6 },
      encoding: { x, color },
    },
    ...(y
      ? [
          {
            data: { values: corruptions },
            mark: { type: 'point', shape: 'cross', size: 160, filled: true, opacity: 1 },
            encoding: {
              x,
              y: { field: 'loss', type: 'quantitative' },
              color,
              tooltip: tooltip(['run', 'run'], ['step', 'corruption found at step'], ['what', 'what']),
            },
          },
        ]
      : []),
  ];
  // a moving mean over about 2% of the run: the per-step loss of one batch is noisy
  const window = Math.max(1, Math.round(Math.max(...runs.map((r) => r.steps.length)) / 50));

  const loss = (x: ChartSpec): ChartSpec => ({
    width,
    height,
    layer: [
      stepsLine(
        { field: 'loss', type: 'quantitative', title: 'loss', scale: { zero: false } },
        x,
        [
          ['seconds', 'wall time (s)', '.2f'],
          ['loss', 'loss', '.5f'],
        ],
        0.3,
        1,
      ),
      {
        data: { values: steps },
        transform: [
          {
            window: [{ op: 'mean', field: 'loss', as: 'mean_loss' }],
            frame: [-(window - 1), 0],
            groupby: ['run'],
            sort: [{ field: x.field as string }],
          },
        ],
        mark: { type: 'line', strokeWidth: 2 },
        encoding: {
          x,
          y: { field: 'mean_loss', type: 'quantitative', title: 'loss' },
          color,
          strokeDash,
          ...segments(x),
          strokeOpacity: faded(1),
        },
      },
      failureRules(x),
      resumeRules(x),
      ...corruptionMarks(x, true),
      {
        data: { values: failures },
        mark: { type: 'point', shape: 'triangle-down', size: 140, filled: true, opacity: 1 },
        encoding: {
          x,
          y: { field: 'loss', type: 'quantitative' },
          color,
          tooltip: tooltip(['run', 'run'], ['step', 'failure at step'], ['seconds', 'wall time (s)', '.2f']),
        },
      },
    ],
  });
  const overTime = (field: string, title: string, format: string): ChartSpec => ({
    width,
    height,
    layer: [
      stepsLine({ field, type: 'quantitative', title, scale: { zero: false } }, time, [
        ['seconds', 'wall time (s)', '.2f'],
        [field, title, format],
        ['world', 'ranks'],
      ]),
      failureRules(time),
      resumeRules(time),
      ...corruptionMarks(time, false),
    ],
  });
  const failureNote =
    (failures.length > 0 ? ' Dashed lines and triangles: failures (where the survivors saw them).' : '') +
    (resumes.length > 0
      ? ' Dotted lines: where a run resumed into the same run directory (by hand, or restarted by ft-run --max-restarts) continued it.'
      : '') +
    (corruptions.length > 0
      ? ' Solid lines and crosses: silent data corruption a check found (the steps since the last verified one were replayed).'
      : '');
  const breakNote = ' Lines break where an evaluation or a recovery paused the steps.';
  const charts: Chart[] = [
    {
      title: 'Loss against step',
      caption: `Thin: the loss of each step; bold: its mean over the last ${window} steps; each run has its own dash pattern, so identical curves show as one.${failureNote}`,
      spec: loss(step),
    },
  ];
  if (differences.length > 0) {
    charts.push({
      title: "Loss minus the baseline's",
      caption: "Each run's loss minus its baseline's at the same step: a line at zero all along is an exact recovery.",
      spec: {
        width,
        height,
        layer: [
          {
            data: { values: [{ zero: 0 }] },
            mark: { type: 'rule', color: '#999' },
            encoding: { y: { field: 'zero', type: 'quantitative' } },
          },
          {
            data: { values: differences },
            params,
            mark: { type: 'line', strokeWidth: 2, point: 'transparent' },
            encoding: {
              x: step,
              y: { field: 'difference', type: 'quantitative', title: 'loss − baseline loss' },
              color,
              strokeDash,
              strokeOpacity: faded(1),
              tooltip: tooltip(['run', 'run'], ['step', 'step'], ['difference', 'loss − baseline', '.3e']),
            },
          },
        ],
      },
    });
  }
  charts.push(
    {
      title: 'Loss against wall time',
      caption: `Seconds since the run started; the same curves as above.${breakNote}${failureNote}`,
      spec: loss(time),
    },
    {
      title: 'Step time',
      caption: `Milliseconds each committed step took (a retried step includes its recovery), against wall time.${breakNote}${failureNote}`,
      spec: overTime('step_ms', 'step time (ms)', '.1f'),
    },
    {
      title: 'Throughput',
      caption: `Samples per second of each committed step, against wall time.${breakNote}${failureNote}`,
      spec: overTime('samples_per_s', 'samples/s', '.0f'),
    },
    {
      title: 'World size over time',
      caption: 'Ranks taking part in each committed step, against seconds since the run started.',
      spec: {
        width,
        height,
        data: { values: steps },
        params,
        mark: { type: 'line', interpolate: 'step-after', strokeWidth: 2, point: 'transparent' },
        encoding: {
          x: time,
          y: {
            field: 'world',
            type: 'quantitative',
            title: 'ranks',
            scale: { domain: [0, maxWorld] },
            axis: { values: [...Array(maxWorld + 1).keys()], format: 'd' },
          },
          color,
          strokeDash,
          detail: { field: 'segment' },
          strokeOpacity: faded(1),
          tooltip: tooltip(['run', 'run'], ['step', 'step'], ['seconds', 'wall time (s)', '.2f'], ['world', 'ranks']),
        },
      },
    },
    {
      title: 'Learning rate',
      caption: 'The rate each committed step used (a shrink run rescales it with its global batch).',
      spec: {
        width,
        height,
        layer: [
          stepsLine({ field: 'lr', type: 'quantitative', title: 'learning rate', scale: { zero: true }, axis: { format: '.3~g' } }, step, [
            ['lr', 'learning rate', '.3e'],
          ]),
        ],
      },
    },
  );
  if (shardCounts.length > 0) {
    charts.push({
      title: 'Shards per rank',
      caption:
        'How many shards each rank computed, from the rebalance events (--rebalance auto): a slow rank gives shards to faster ones and gets them back once fast again; the bits do not change. A recovery changes the counts too: they show as the next rebalance found them.',
      spec: {
        width,
        height,
        data: { values: shardCounts },
        mark: { type: 'line', interpolate: 'step-after', strokeWidth: 2, point: true },
        encoding: {
          x: step,
          y: { field: 'shards', type: 'quantitative', title: 'shards', axis: { format: 'd' }, scale: { zero: true } },
          color: { field: 'rank', type: 'nominal', title: 'rank' },
          strokeDash: { field: 'run', type: 'nominal', scale: { domain: labels }, title: 'run' },
          tooltip: tooltip(['run', 'run'], ['rank', 'rank'], ['step', 'from step'], ['shards', 'shards']),
        },
      },
    });
  }
  if (evaluations.length > 0) {
    const accuracies = evaluations.map((e) => e.accuracy);
    const [low, high] = [Math.min(...accuracies), Math.max(...accuracies)];
    const pad = Math.max((high - low) * 0.1, 0.005);
    charts.push({
      title: 'Test accuracy',
      caption: 'On the whole test split, at each evaluation step; the axis spans the accuracies measured.',
      spec: {
        width,
        height,
        data: { values: evaluations },
        params,
        mark: { type: 'line', point: true, strokeWidth: 2 },
        encoding: {
          x: step,
          y: {
            field: 'accuracy',
            type: 'quantitative',
            title: 'test accuracy',
            scale: { domain: [Math.max(0, low - pad), Math.min(1, high + pad)] },
            axis: { format: '.1%' },
          },
          color,
          strokeDash,
          opacity: faded(1),
          tooltip: tooltip(['run', 'run'], ['step', 'step'], ['accuracy', 'test accuracy', '.2%']),
        },
      },
    });
    const losses = evaluations.filter((e) => e.loss !== null);
    if (losses.length > 0) {
      charts.push({
        title: 'Test loss',
        caption: "Mean cross-entropy on the whole test split (a language model's validation loss, per token), at each evaluation step.",
        spec: {
          width,
          height,
          data: { values: losses },
          params,
          mark: { type: 'line', point: true, strokeWidth: 2 },
          encoding: {
            x: step,
            y: { field: 'loss', type: 'quantitative', title: 'test loss', scale: { zero: false }, axis: { format: '.3~g' } },
            color,
            strokeDash,
            opacity: faded(1),
            tooltip: tooltip(['run', 'run'], ['step', 'step'], ['loss', 'test loss', '.4f']),
          },
        },
      });
    }
  }
  return charts;
}

export function standalone(chart: Chart): TopLevelSpec {
  return { config, ...chart.spec } as TopLevelSpec;
}

/** A spec without its selections (one figure's charts would repeat their names): each picked value as if all were picked. */
function withoutInteraction(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutInteraction);
  if (typeof value !== 'object' || value === null) return value;
  const object = value as Record<string, unknown>;
  if ('condition' in object) return { value: (object.condition as { value: unknown }).value };
  return Object.fromEntries(
    Object.entries(object)
      .filter(([key]) => key !== 'params')
      .map(([key, v]) => [key, withoutInteraction(v)]),
  );
}

/** All charts in one figure (two per row), for the PNG export. */
export function combined(charts: Chart[], title: string): TopLevelSpec {
  return {
    config,
    title: { text: title, fontSize: 16 },
    columns: 2,
    concat: charts.map((chart) => ({ ...(withoutInteraction(chart.spec) as ChartSpec), title: chart.title })),
    resolve: { scale: { color: 'shared' } },
  } as TopLevelSpec;
}

/** The vega spec of a vega-lite one (what the page's runtime renders). */
export function compile(spec: TopLevelSpec): vega.Spec {
  return vl.compile(spec).spec;
}

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec)), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
