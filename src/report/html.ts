// The report as one self-contained HTML file: styles inline, charts as SVG data URIs and, where
// scripts run, drawn again by the inlined vega runtime (tooltips, zoom and pan, legend picking);
// no request (its Content-Security-Policy forbids any), so it opens offline and can be mailed.
import * as fs from 'node:fs';
import type { Spec } from 'vega';
import type { Comparison } from './baseline';
import type { Chart } from './charts';
import { costMeasurements, ftTrainWaste, paperBertLarge, periodicWaste, optimalCheckpointRate, secondsPerDay } from './failure-cost';
import type { Recovery, Run } from './run-data';

export interface Projection {
  ranks: number[];
  failuresPerDay: number;
}

export interface ReportContent {
  title: string;
  runs: Run[];
  labels: string[];
  comparisons: Comparison[];
  /** each chart as an SVG and as the vega spec the page's runtime draws */
  charts: { chart: Chart; svg: string; vega: Spec }[];
  /** one line per run directory that was passed over */
  skipped: string[];
  /** what failures would cost: at these world sizes, failing this often per rank per day */
  projection: Projection;
  generated: Date;
  /** served live (ft-report --serve): the runs' version this page shows; it asks its server for newer ones */
  live?: string;
}

const style = `
body { font: 14px/1.45 "DejaVu Sans", Helvetica, Arial, sans-serif; color: #222; margin: 24px auto; max-width: 1180px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta, figcaption, .note { color: #555; font-size: 13px; }
pre.sample { white-space: pre-wrap; background: #f6f6f6; padding: 8px 10px; font-size: 13px; max-height: 320px; overflow: auto; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 5px 8px; text-align: right; white-space: nowrap; }
th { background: #f5f5f5; white-space: normal; vertical-align: bottom; }
td.text, th.text { text-align: left; }
code { font-size: 12px; }
.equal { color: #11733a; font-weight: bold; }
.differs { color: #b3261e; font-weight: bold; }
.expected { color: #8a5a00; font-weight: bold; }
.unfinished { color: #8a5a00; }
td.changed { background: #fff0b3; font-weight: bold; }
tr.paper td { color: #555; font-style: italic; }
.skipped { background: #fff4e5; border: 1px solid #f0c36d; padding: 8px 12px; }
.charts { display: grid; grid-template-columns: 1fr; gap: 24px; }
figure { margin: 0; }
figure img { max-width: 100%; height: auto; }
figure.interactive img { display: none; }
.vg-tooltip { position: fixed; pointer-events: none; background: #fff; border: 1px solid #999; padding: 4px 8px; font-size: 12px; box-shadow: 0 1px 4px rgba(0,0,0,.2); z-index: 10; }
.vg-tooltip td { border: 0; padding: 0 4px; }
`;

/** Draws each figure's chart with vega where scripts run; a tooltip element follows the hovered mark. */
const interactive = `
(function () {
  var tip;
  function text(value) { return String(value).replace(/[&<>]/g, function (c) { return '&#' + c.charCodeAt(0) + ';'; }); }
  function tooltip(handler, event, item, value) {
    if (value === null || value === undefined || value === '') { if (tip) { tip.remove(); tip = undefined; } return; }
    if (!tip) { tip = document.createElement('div'); tip.className = 'vg-tooltip'; document.body.appendChild(tip); }
    tip.innerHTML = typeof value === 'object' ? '<table>' + Object.keys(value).map(function (k) { return '<tr><td>' + text(k) + '</td><td><b>' + text(value[k]) + '</b></td></tr>'; }).join('') + '</table>' : text(value);
    tip.style.left = (event.clientX + 12) + 'px';
    tip.style.top = (event.clientY + 12) + 'px';
  }
  // again after a live page swapped in a newer body (its scripts do not run again)
  window.ftDrawCharts = function () {
    var specs = JSON.parse(document.getElementById('vega-specs').textContent);
    document.querySelectorAll('figure[data-chart]').forEach(function (figure) {
      var box = document.createElement('div');
      figure.insertBefore(box, figure.firstChild);
      new vega.View(vega.parse(specs[Number(figure.getAttribute('data-chart'))]), { renderer: 'svg', container: box, hover: true })
        .tooltip(tooltip).runAsync().then(function () { figure.classList.add('interactive'); });
    });
  };
  window.ftDrawCharts();
})();
`;

/**
 * A served page's follower: every second it asks its server for the runs' version, and when it
 * changed fetches the page again, swaps in its body and draws the charts anew: no reload, and no
 * request beyond the server that sent it.
 */
const live = `
(function () {
  var version = document.documentElement.getAttribute('data-version');
  var busy = false;
  function check() {
    if (busy) return;
    busy = true;
    fetch('/version', { cache: 'no-store' }).then(function (answer) { return answer.text(); }).then(function (current) {
      if (current === version) return;
      return fetch('/', { cache: 'no-store' }).then(function (answer) { return answer.text(); }).then(function (html) {
        var next = new DOMParser().parseFromString(html, 'text/html');
        version = next.documentElement.getAttribute('data-version');
        document.title = next.title;
        document.body.innerHTML = next.body.innerHTML;
        window.ftDrawCharts();
      });
    }).catch(function () {}).then(function () { busy = false; });
  }
  setInterval(check, 1000);
})();
`;

/** The vega runtime, inlined: the page makes no request. */
function vegaRuntime(): string {
  return fs.readFileSync(require.resolve('vega/build/vega.min.js'), 'utf8');
}

/** JSON safe inside a script element. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, '\\u003c');
}

/** The text each language model wrote at the end of its run (sample.txt); nothing without any. */
function samplesSection(content: ReportContent): string {
  const samples = content.runs.flatMap((run, i) => (run.sample === undefined ? [] : [{ label: content.labels[i], text: run.sample }]));
  if (samples.length === 0) return '';
  const blocks = samples.map(({ label, text }) => `<h3>${escape(label)}</h3>\n<pre class="sample">${escape(text)}</pre>`);
  return `<h2>Samples</h2>\n<p class="note">What each language model wrote after training, after a new line, at temperature 1 with the run's seed (ft-sample writes more).</p>\n${blocks.join('\n')}\n`;
}

function escape(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function ms(value: number | undefined): string {
  return value === undefined || Number.isNaN(value) ? '–' : value.toFixed(1);
}

function megabytes(bytes: number): string {
  return `<span title="${bytes} bytes">${(bytes / 1e6).toFixed(2)} MB</span>`;
}

function percent(value: number | null): string {
  return value === null ? '–' : `${(value * 100).toFixed(2)}%`;
}

const verdictText: Record<Comparison['verdict'], string> = {
  baseline: 'baseline',
  equal: '<span class="equal">equal</span>',
  differs: '<span class="differs">differs</span>',
  'no baseline': 'no baseline',
  'other settings': 'other settings (not compared)',
  'settings unknown': 'settings unknown (not compared)',
  unfinished: 'unfinished (not compared)',
};

function verdictCell(comparison: Comparison): string {
  return comparison.expected === undefined
    ? verdictText[comparison.verdict]
    : `<span class="expected">differs</span> (expected: ${escape(comparison.expected)})`;
}

/** Where the runs scored different numbers of test samples (--eval-samples), each accuracy says how many: they do not compare otherwise. */
function scoredNotes(content: ReportContent): string[] {
  const scored = content.runs.map((run) => run.summary?.test_samples ?? undefined);
  if (new Set(scored).size < 2) return scored.map(() => '');
  return scored.map((n) => (typeof n === 'number' ? ` <span class="note">(${n} samples)</span>` : ''));
}

function runsTable(content: ReportContent): string {
  const scored = scoredNotes(content);
  const rows = content.runs.map((run, i) => {
    const s = run.summary;
    const name = `<td class="text" title="${escape(run.dir)}">${escape(content.labels[i])}</td>`;
    const last = run.steps.at(-1)!;
    if (s === undefined) {
      return (
        `<tr>${name}<td class="text">–</td><td>${run.steps[0].world} → ${last.world}</td><td>${last.step + 1}</td><td>${last.loss.toFixed(4)}</td><td>–</td>` +
        `<td>${((last.time - run.startTime) / 1000).toFixed(2)} s</td><td>${run.recoveries.reduce((n, r) => n + r.lost.length, 0)}</td><td>–</td><td class="text">–</td>` +
        `<td class="text">${verdictText.unfinished}: <span class="unfinished">last committed step ${last.step}</span></td></tr>`
      );
    }
    const comparison = content.comparisons[i];
    const against =
      comparison.baseline && comparison.verdict !== 'baseline'
        ? ` <span class="note">(vs ${escape(content.labels[content.runs.indexOf(comparison.baseline)] ?? comparison.baseline.dir)})</span>`
        : '';
    return (
      `<tr>${name}<td class="text">${escape(s.on_failure)}</td>` +
      `<td>${s.world_initial} → ${s.world_final}</td><td>${s.steps}</td><td>${s.final_loss.toFixed(4)}</td><td>${percent(s.test_accuracy)}${scored[i]}</td>` +
      `<td>${s.wall_s.toFixed(2)} s</td><td>${s.failures.length === 0 ? 0 : `${s.ranks_lost} (${run.recoveries.length} recover${run.recoveries.length === 1 ? 'y' : 'ies'})`}${corruptionText(s.corruptions)}</td>` +
      `<td>${megabytes(s.bytes_read_back)}</td><td class="text"><code title="${s.params_sha256}">${s.params_sha256.slice(0, 16)}</code></td>` +
      `<td class="text">${verdictCell(comparison)}${against}</td></tr>`
    );
  });
  return (
    `<table><thead><tr><th class="text">run</th><th class="text">on failure</th><th>ranks</th><th>steps</th><th>final loss</th>` +
    `<th>test accuracy</th><th>wall time</th><th>ranks lost</th><th>read back</th><th class="text">params_sha256</th><th class="text">vs baseline</th></tr></thead>` +
    `<tbody>${rows.join('\n')}</tbody></table>`
  );
}

/** ", N corrupt" where checks found silent data corruption. */
function corruptionText(count: number | undefined): string {
  return count ? `, ${count} corruption${count === 1 ? '' : 's'} found` : '';
}

function settingText(value: string | number | boolean | null | undefined): string {
  if (value === undefined) return '<span class="note">unknown</span>';
  if (value === null) return '–';
  const text = String(value);
  return /^[0-9a-f]{64}$/.test(text) ? `<code title="${text}">${text.slice(0, 12)}</code>` : escape(text);
}

/** One row per setting, one column per run; a cell that differs from the value most runs have is highlighted. */
function settingsTable(content: ReportContent): string {
  const known = content.runs.map((run) => run.summary?.settings);
  const names = [...new Set(known.flatMap((settings) => (settings ? Object.keys(settings) : [])))];
  if (names.length === 0)
    return '<p class="note">No run\'s summary.json records its settings (written before ft-train recorded them): they are unknown.</p>';
  const rows = names.map((name) => {
    const values = known.map((settings) => settings?.[name]);
    const counts = new Map<unknown, number>();
    for (const value of values) if (value !== undefined) counts.set(value, (counts.get(value) ?? 0) + 1);
    const common = [...counts.entries()].reduce((best, entry) => (entry[1] > best[1] ? entry : best))[0];
    const cells = values.map(
      (value) => `<td class="text${value !== undefined && value !== common ? ' changed' : ''}">${settingText(value)}</td>`,
    );
    return `<tr><th class="text">${escape(name)}</th>${cells.join('')}</tr>`;
  });
  return (
    `<table class="settings"><thead><tr><th class="text">setting</th>${content.labels.map((label) => `<th class="text">${escape(label)}</th>`).join('')}</tr></thead>` +
    `<tbody>${rows.join('\n')}</tbody></table>` +
    '<p class="note">From each summary.json; highlighted: a value other than most runs\'; unknown: a summary written before ft-train recorded its settings, or a run that did not finish.</p>'
  );
}

function recoveryTotal(r: Recovery): number {
  return r.detectMs + r.revokeShrinkMs + r.agreeMs + r.joinMs + r.readbackMs + r.checkpointMs + r.retryMs;
}

function recoveriesTable(content: ReportContent): string {
  const rows = content.runs.flatMap((run, i) =>
    run.recoveries.map(
      (r) =>
        `<tr><td class="text">${escape(content.labels[i])}</td><td>${r.step}</td><td>${escape(r.lost.join(', '))}</td><td>${r.world}</td><td class="text">${escape(r.phase)}</td>` +
        `<td>${ms(r.detectMs)}</td><td>${ms(r.revokeShrinkMs)}</td><td>${ms(r.agreeMs)}</td><td>${escape(r.joined.join(', ') || '-')}</td><td>${ms(r.joinMs)}</td><td>${ms(r.readbackMs)}</td><td>${megabytes(r.readbackBytes)}</td>` +
        `<td>${ms(r.checkpointMs)}</td><td>${ms(r.retryMs)}</td><td><b>${ms(recoveryTotal(r))}</b></td><td>${ms(r.killToCommitMs)}</td></tr>`,
    ),
  );
  if (rows.length === 0) return '<p class="note">No run had a failure.</p>';
  return (
    `<table><thead><tr><th class="text">run</th><th>step</th><th>lost ranks</th><th>ranks left</th><th class="text">seen in</th>` +
    `<th>detect</th><th>revoke+shrink</th><th>agree</th><th>joined</th><th>spawn+join</th><th>readback</th><th>read before retry</th><th>checkpoint</th><th>retry</th><th>total</th><th>kill → next commit</th></tr></thead>` +
    `<tbody>${rows.join('\n')}</tbody></table>` +
    '<p class="note">Milliseconds. Detect: from the call that failed to the error; joined: the spares or spawned ranks that took the lost ranks\' places, and spawn+join the time to start them and send them the state; ' +
    "readback: re-reading what the retried step needs of the lost ranks' shards (the rest follows in the background); " +
    "checkpoint: the just-in-time checkpoint; retry: running the step again; kill → next commit: from launch/drill's kill -9 to the next committed step (drills only).</p>"
  );
}

function seconds(value: number | undefined): string {
  return value === undefined ? '–' : value < 1 ? `${(value * 1000).toFixed(1)} ms` : `${value.toFixed(2)} s`;
}

function share(value: number): string {
  return `${(value * 100).toPrecision(3)}%`;
}

function interval(checkpointsPerSecond: number): string {
  const s = 1 / checkpointsPerSecond;
  return s < 120 ? `${s.toFixed(0)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
}

/** The share of time failures would waste at scale, from each run's measurements, beside the paper's BERT-L rows. */
function costSection(content: ReportContent): string {
  const { ranks, failuresPerDay } = content.projection;
  const f = failuresPerDay / secondsPerDay;
  const rows: string[] = [];
  const missing: string[] = [];
  const restarts: string[] = [];
  content.runs.forEach((run, i) => {
    const m = costMeasurements(run);
    if (m.restarts > 0)
      restarts.push(
        `${escape(content.labels[i])}: ${m.restarts} restart${m.restarts === 1 ? '' : 's'}` +
          (m.restart === undefined
            ? ' (none committed a new step)'
            : `, ${seconds(m.restart)} each on average; were every failure to need one: ${ranks.map((n) => `${share(n * f * (m.step + m.restart!))} at N = ${n}`).join(', ')}`),
      );
    if (m.checkpoint === undefined || m.recovery === undefined) {
      missing.push(`${escape(content.labels[i])} (${m.recovery === undefined ? 'no recovery' : 'no checkpoint'} measured)`);
      return;
    }
    for (const n of ranks) {
      const periodic = periodicWaste(n, f, m.checkpoint, m.recovery);
      rows.push(
        `<tr><td class="text">${escape(content.labels[i])}</td><td>${n}</td><td>${seconds(m.step)}</td>` +
          `<td>${seconds(m.checkpoint)} <span class="note">(${escape(m.checkpointReason!)})</span></td><td>${seconds(m.recovery)} <span class="note">(${escape(m.recoveryFrom!)})</span></td>` +
          `<td>${interval(optimalCheckpointRate(n, f, m.checkpoint))}</td><td>${share(periodic.total)}</td><td><b>${share(ftTrainWaste(n, f, m.step, m.recovery).total)}</b></td><td class="text"></td></tr>`,
      );
    }
  });
  const paper = paperBertLarge;
  for (const row of paper.periodic) {
    const ours = periodicWaste(row.n, paper.failuresPerDay / secondsPerDay, paper.checkpoint, paper.recovery);
    rows.push(
      `<tr class="paper"><td class="text">BERT-L (the paper)</td><td>${row.n}</td><td>–</td><td>${seconds(paper.checkpoint)}</td><td>${seconds(paper.recovery)}</td>` +
        `<td>${interval(optimalCheckpointRate(row.n, paper.failuresPerDay / secondsPerDay, paper.checkpoint))}</td><td>${share(ours.total)}</td><td>–</td>` +
        `<td class="text">paper: ${+(row.wasted * 100).toPrecision(6)}% (without the restart term: ${share(ours.checkpointing)})</td></tr>`,
    );
  }
  return (
    `<table><thead><tr><th class="text">run</th><th>ranks N</th><th>step t</th><th>checkpoint o</th><th>recovery r</th><th>optimal interval</th>` +
    `<th>wasted, periodic checkpoints</th><th>wasted, ft-train</th><th class="text">note</th></tr></thead><tbody>${rows.join('\n')}</tbody></table>` +
    `<p class="note">At ${failuresPerDay} failures per rank per day (--failure-rate; ranks: --project). Periodic checkpointing at its optimal rate c* = sqrt(N f / 2o) ` +
    'wastes sqrt(2 N f o) + N f r of the time (Gupta et al., "Just-In-Time Checkpointing", EuroSys 2024; f per second); ft-train wastes N f (t + r): per failure, one step redone and the recovery, ' +
    'nothing between failures. t: the mean of the steps not retried; o: the mean periodic checkpoint of the run, or else its just-in-time ones; r: kill -9 to the next commit where a drill measured it, ' +
    `or else detect to retry.${missing.length > 0 ? ` Not projected: ${missing.join(', ')}.` : ''}</p>` +
    (restarts.length === 0
      ? ''
      : `<p class="note">Restarts (launch/ft-run --max-restarts, after a job ended without finishing), each from the last step the ended job committed to the first new step after it, less that step's time (start-up, the steps redone from the checkpoint): ${restarts.join('; ')}.</p>`)
  );
}

export function reportHtml(content: ReportContent): string {
  const skipped =
    content.skipped.length === 0
      ? ''
      : `<div class="skipped"><b>Not in this report</b> (${content.skipped.length} run director${content.skipped.length === 1 ? 'y' : 'ies'} could not be read):<ul>` +
        content.skipped.map((line) => `<li><code>${escape(line)}</code></li>`).join('') +
        '</ul></div>';
  const figures = content.charts.map(
    ({ chart, svg }, i) =>
      `<figure data-chart="${i}"><img alt="${escape(chart.title)}" src="data:image/svg+xml;base64,${Buffer.from(svg).toString('base64')}">` +
      `<figcaption><b>${escape(chart.title)}.</b> ${escape(chart.caption)}</figcaption></figure>`,
  );
  return `<!doctype html>
<html lang="en"${content.live === undefined ? '' : ` data-version="${escape(content.live)}"`}>
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'unsafe-inline' 'unsafe-eval'${content.live === undefined ? '' : "; connect-src 'self'"}">
<title>${escape(content.title)}</title>
<style>${style}</style>
</head>
<body>
<h1>${escape(content.title)}</h1>
<p class="meta">${content.runs.length} run${content.runs.length === 1 ? '' : 's'}; written ${escape(content.generated.toISOString())} by ft-report.</p>
${skipped}
<h2>Runs</h2>
${runsTable(content)}
<p class="note">vs baseline: whether the final parameters (params_sha256) are bit-identical to the baseline's, the first run listed
that finished, lost no rank and has the same settings but the failure mode (or the one given with --baseline). Runs with other
settings are not compared; a shrink run that lost ranks is expected to differ; a summary.json written before ft-train recorded
its settings leaves them unknown, and the run is not compared.</p>
<h2>Settings</h2>
${settingsTable(content)}
<h2>Charts</h2>
<p class="note">In a browser: hover a point for its values, drag to pan, scroll to zoom (double-click resets), click a run in a legend to pick it.</p>
<div class="charts">
${figures.join('\n')}
</div>
${samplesSection(content)}<h2>Recoveries</h2>
${recoveriesTable(content)}
<h2>What failures would cost at scale</h2>
${costSection(content)}
<script type="application/json" id="vega-specs">${scriptJson(content.charts.map((c) => c.vega))}</script>
<script>${vegaRuntime()}</script>
<script>${interactive}</script>${content.live === undefined ? '' : `\n<script>${live}</script>`}
</body>
</html>
`;
}
