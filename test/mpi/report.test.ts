// Reports: launch/compare runs SGD, FT-SGD exact and shrink (real kill -9s) at 2 and 4 ranks and
// writes the report; the run data read back matches the files; params_sha256 is compared with
// the baseline of the same settings (shrink expected to differ, other settings not compared, a
// summary without settings unknown); the settings table highlights what differs; an unfinished
// run is plotted up to its last step; --csv holds metrics.jsonl's values exactly; broken run
// directories are named and passed over (or refused); and the report opens in headless Chromium
// with no console error and no request, draws its charts interactively and shows a tooltip on
// hover (the screenshot is kept in test-artifacts/); --serve keeps a page current in Chromium as a run
// that started after it opened goes on and loses a rank, and refuses a port in use.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { PNG } from 'pngjs';
import puppeteer from 'puppeteer-core';
import { compareWithBaselines } from '../../src/report/baseline';
import { reportCharts } from '../../src/report/charts';
import { costMeasurements, ftTrainWaste, periodicWaste } from '../../src/report/failure-cost';
import { readRun } from '../../src/report/run-data';
import { RunDirError } from '../../src/run/reader';
import { repoRoot, runCommand } from '../helpers/mpi-job';
import { makeScratch, removeScratch } from '../helpers/scratch';

const scratch = makeScratch('ft-report-');
const compared = path.join(scratch, 'compare');
const artifacts = path.join(repoRoot, 'test-artifacts');
const lines = (file: string): Record<string, unknown>[] =>
  fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
const run = (name: string): string => path.join(compared, name);

function report(args: string[]): ReturnType<typeof runCommand> {
  return runCommand(
    process.execPath,
    [path.join(repoRoot, 'launch', 'ft-report.js'), ...args],
    process.env,
    60_000,
    `ft-report ${args.join(' ')}`,
  );
}

/** A copy of a good run directory, then `damage` applied to it. */
function broken(name: string, damage: (dir: string) => void): string {
  const dir = path.join(scratch, name);
  fs.cpSync(run('n4-exact'), dir, { recursive: true });
  damage(dir);
  return dir;
}

/** Share of pixels that are not (near) white, and how many distinct colours there are. */
function ink(png: Buffer): { share: number; colours: number } {
  const image = PNG.sync.read(png);
  let inked = 0;
  const colours = new Set<number>();
  for (let i = 0; i < image.data.length; i += 4) {
    const [r, g, b] = [image.data[i], image.data[i + 1], image.data[i + 2]];
    if (r < 235 || g < 235 || b < 235) inked++;
    colours.add((r << 16) | (g << 8) | b);
  }
  return { share: inked / (image.width * image.height), colours: colours.size };
}

describe('reports', function () {
  this.timeout(120_000);

  before(async function () {
    this.timeout(300_000);
    const job = await runCommand(
      path.join(repoRoot, 'launch', 'compare'),
      ['--ranks', '2,4', '--steps', '40', '--kill-step', '20', '--eval-every', '20', '--out', compared],
      process.env,
      280_000,
      'launch/compare',
    );
    assert.equal(job.code, 0, job.stdout + job.stderr);
    assert.equal(job.stdout.trim().split('\n').at(-1), `[compare] report: ${path.join(compared, 'report.html')}`);
  });
  after(() => removeScratch(scratch));

  it('launch/compare: no failure, exact and shrink at each world size, one kill -9 each, and the report', () => {
    for (const n of [2, 4]) {
      for (const policy of ['sgd', 'exact', 'shrink']) {
        const summary = JSON.parse(fs.readFileSync(path.join(run(`n${n}-${policy}`), 'summary.json'), 'utf8'));
        assert.equal(summary.steps, 40);
        assert.equal(summary.on_failure, policy === 'shrink' ? 'shrink' : 'exact');
        assert.deepEqual(
          summary.failures.map((f: { lost: number[] }) => f.lost),
          policy === 'sgd' ? [] : [[1]],
        );
      }
    }
    assert.ok(fs.statSync(path.join(compared, 'report.html')).size > 10_000);
    const png = ink(fs.readFileSync(path.join(compared, 'report.png')));
    assert.ok(png.share > 0.03 && png.colours > 50, JSON.stringify(png));
  });

  it('reads back what the run wrote: every step, the recovery phase by phase, the kill time', () => {
    const dir = run('n4-exact');
    const data = readRun(dir);
    const metrics = lines(path.join(dir, 'metrics.jsonl'));
    const events = lines(path.join(dir, 'events.jsonl'));
    assert.deepEqual(
      data.steps.map((s) => s.step),
      [...Array(40).keys()],
    );
    assert.deepEqual(
      data.steps.map((s) => s.loss),
      metrics.map((m) => m.loss),
    );
    assert.equal(data.startTime, events[0].time);
    assert.equal(data.recoveries.length, 1);
    const [recovery] = data.recoveries;
    const of = (kind: string) => events.filter((e) => e.event === kind && e.step === recovery.step);
    assert.deepEqual(recovery.lost, [1]);
    assert.equal(recovery.world, 3);
    assert.equal(recovery.step, data.summary!.failures[0].step);
    assert.equal(recovery.detectMs, of('failure')[0].detect_ms);
    assert.equal(recovery.revokeShrinkMs, of('revoke+shrink')[0].duration_ms);
    assert.equal(recovery.readbackBytes, of('readback')[0].bytes_before_retry);
    assert.equal(recovery.readbackMs, of('readback')[0].duration_ms);
    assert.equal(recovery.checkpointMs, events.find((e) => e.event === 'checkpoint' && e.reason === 'jit')!.duration_ms);
    assert.equal(recovery.retryMs, of('retry')[0].duration_ms);
    const kill = JSON.parse(fs.readFileSync(path.join(dir, 'drill.json'), 'utf8')).kills[0];
    const commit = metrics.find((m) => (m.step as number) >= recovery.step && (m.time as number) >= kill.time)!;
    assert.equal(recovery.killToCommitMs, (commit.time as number) - kill.time);
    assert.ok(recovery.killToCommitMs! > 0 && recovery.killToCommitMs! < 5000);
    assert.deepEqual(readRun(run('n4-sgd')).recoveries, []);
  });

  it('compares params_sha256 with the baseline of the same setup, or with the one named', async () => {
    const names = ['n2-sgd', 'n2-exact', 'n2-shrink', 'n4-sgd', 'n4-exact', 'n4-shrink'];
    const runs = names.map((name) => readRun(run(name)));
    const comparisons = compareWithBaselines(runs);
    assert.deepEqual(
      comparisons.map((c) => c.verdict),
      ['baseline', 'equal', 'differs', 'baseline', 'equal', 'differs'],
    );
    assert.deepEqual(
      comparisons.map((c) => c.expected),
      [undefined, undefined, 'shrink mode', undefined, undefined, 'shrink mode'],
    );
    assert.deepEqual(
      comparisons.map((c) => c.baseline),
      [runs[0], runs[0], runs[0], runs[3], runs[3], runs[3]],
    );
    assert.deepEqual(
      compareWithBaselines(runs.slice(1)).map((c) => c.verdict),
      ['no baseline', 'no baseline', 'baseline', 'equal', 'differs'],
    );
    assert.deepEqual(
      compareWithBaselines(runs, runs[5]).map((c) => c.verdict),
      ['other settings', 'other settings', 'other settings', 'differs', 'differs', 'baseline'],
    );
    assert.deepEqual(
      compareWithBaselines(runs, runs[5]).map((c) => c.expected),
      [undefined, undefined, undefined, undefined, undefined, undefined],
    );
    const settings = runs[4].summary!.settings!;
    assert.deepEqual(Object.keys(settings), [
      'model',
      'model_sha256',
      'data_train_sha256',
      'data_test_sha256',
      'batch',
      'lr',
      'optimizer',
      'momentum',
      'weight_decay',
      'lr_schedule',
      'seed',
      'shards',
      'on_failure',
      'lr_rescale',
      'steps',
      'epochs',
      'threads',
      'isa',
    ]);
    assert.deepEqual(
      [
        settings.model,
        settings.batch,
        settings.lr,
        settings.momentum,
        settings.weight_decay,
        settings.lr_schedule,
        settings.shards,
        settings.on_failure,
        settings.steps,
        settings.epochs,
        settings.threads,
      ],
      ['lenet', 64, 0.01, 0.9, 0.0005, 'constant', 4, 'exact', 40, null, 1],
    );
    const manifest = JSON.parse(fs.readFileSync(path.join(repoRoot, 'datasets', 'fashion-mnist', 'manifest.json'), 'utf8'));
    assert.equal(settings.data_train_sha256, manifest.splits.train.sha256);
    assert.equal(settings.data_test_sha256, manifest.splits.test.sha256);
    // a summary written before ft-train recorded its settings: not compared, and said so
    const old = broken('old-summary', (dir) => {
      const file = path.join(dir, 'summary.json');
      const { settings: _, ...rest } = JSON.parse(fs.readFileSync(file, 'utf8'));
      fs.writeFileSync(file, JSON.stringify(rest));
    });
    assert.deepEqual(
      compareWithBaselines([runs[3], readRun(old)]).map((c) => c.verdict),
      ['baseline', 'settings unknown'],
    );

    const output = path.join(scratch, 'sha.html');
    const job = await report([...names.slice(3).map(run), run('n2-sgd'), old, '-o', output]);
    assert.equal(job.code, 0, job.stderr);
    assert.equal(job.stderr, '');
    const html = fs.readFileSync(output, 'utf8');
    const row = (name: string) => new RegExp(`<tr><td class="text"[^>]*>${name}</td>.*</tr>`).exec(html)?.[0] ?? '';
    assert.match(row('n4-sgd'), /<td class="text">baseline<\/td><\/tr>$/);
    assert.match(row('n4-exact'), /class="equal">equal<\/span> <span class="note">\(vs n4-sgd\)/);
    assert.match(row('n4-shrink'), /<span class="expected">differs<\/span> \(expected: shrink mode\) <span class="note">\(vs n4-sgd\)/);
    assert.match(row('n2-sgd'), /<td class="text">baseline<\/td><\/tr>$/);
    assert.match(row('old-summary'), /<td class="text">settings unknown \(not compared\)<\/td><\/tr>$/);
    // the settings table: a column per run, the cells that differ from most runs highlighted
    const setting = (name: string) => new RegExp(`<tr><th class="text">${name}</th>.*?</tr>`).exec(html)?.[0];
    const unknown = '<td class="text"><span class="note">unknown</span></td>';
    assert.equal(
      setting('shards'),
      `<tr><th class="text">shards</th><td class="text">4</td><td class="text">4</td><td class="text">4</td><td class="text changed">2</td>${unknown}</tr>`,
    );
    assert.equal(
      setting('on_failure'),
      `<tr><th class="text">on_failure</th><td class="text">exact</td><td class="text">exact</td><td class="text changed">shrink</td><td class="text">exact</td>${unknown}</tr>`,
    );
    assert.equal(
      setting('lr'),
      `<tr><th class="text">lr</th><td class="text">0.01</td><td class="text">0.01</td><td class="text">0.01</td><td class="text">0.01</td>${unknown}</tr>`,
    );
  });

  it('plots an unfinished run up to its last committed step, marked as such and not compared', async () => {
    const dir = broken('unfinished', (d) => {
      fs.rmSync(path.join(d, 'summary.json'));
      const file = path.join(d, 'metrics.jsonl');
      fs.writeFileSync(file, fs.readFileSync(file, 'utf8').split('\n').slice(0, 30).join('\n') + '\n');
    });
    const data = readRun(dir);
    assert.equal(data.summary, undefined);
    assert.deepEqual(
      data.steps.map((s) => s.step),
      [...Array(30).keys()],
    );
    assert.deepEqual(
      data.recoveries.map((r) => r.lost),
      [[1]],
    );
    assert.deepEqual(
      compareWithBaselines([readRun(run('n4-sgd')), data]).map((c) => c.verdict),
      ['baseline', 'unfinished'],
    );
    const output = path.join(scratch, 'unfinished.html');
    const job = await report([run('n4-sgd'), dir, '-o', output]);
    assert.equal(job.code, 0, job.stderr);
    assert.equal(job.stderr, '');
    const html = fs.readFileSync(output, 'utf8');
    assert.match(
      html,
      /<tr><td class="text"[^>]*>unfinished<\/td><td class="text">–<\/td><td>4 → 3<\/td><td>30<\/td>.*<td class="text">unfinished \(not compared\): <span class="unfinished">last committed step 29<\/span><\/td><\/tr>/,
    );
    const [lossByStep] = reportCharts([data], ['unfinished'], [{ verdict: 'unfinished' }]);
    const plotted = (lossByStep.spec.layer as { data: { values: { step: number }[] } }[])[0].data.values.map((p) => p.step);
    assert.deepEqual(plotted, [...Array(30).keys()]);
  });

  it('says how many test samples each accuracy is over where the runs scored different numbers (--eval-samples)', async () => {
    const fewer = broken('fewer-samples', (d) => {
      const file = path.join(d, 'summary.json');
      fs.writeFileSync(file, JSON.stringify({ ...JSON.parse(fs.readFileSync(file, 'utf8')), test_samples: 500 }));
    });
    const scored = (html: string) =>
      [...html.matchAll(/<td>\d+\.\d{4}<\/td><td>\d+\.\d\d%( <span class="note">\((\d+) samples\)<\/span>)?<\/td>/g)].map((m) => m[2]);
    const output = path.join(scratch, 'samples.html');
    assert.equal((await report([run('n4-sgd'), run('n4-exact'), '-o', output])).code, 0);
    assert.deepEqual(scored(fs.readFileSync(output, 'utf8')), [undefined, undefined], 'the same samples: no note');
    assert.equal((await report([run('n4-sgd'), fewer, '-o', output])).code, 0);
    assert.deepEqual(scored(fs.readFileSync(output, 'utf8')), ['10000', '500']);
  });

  it("charts each run's loss minus its baseline's: zero at every step for an exact recovery, not for shrink", () => {
    const runs = ['n4-sgd', 'n4-exact', 'n4-shrink'].map((name) => readRun(run(name)));
    const charts = reportCharts(runs, ['sgd', 'exact', 'shrink'], compareWithBaselines(runs));
    const chart = charts.find((c) => c.title === "Loss minus the baseline's")!;
    const values = (chart.spec.layer as { data: { values: { run: string; step: number; difference: number }[] } }[])[1].data.values;
    const of = (name: string) => values.filter((v) => v.run === name);
    assert.deepEqual(of('sgd'), []);
    assert.deepEqual(
      of('exact').map((v) => v.difference),
      Array(40).fill(0),
    );
    const failed = runs[2].summary!.failures[0].step;
    const shrink = of('shrink');
    // before the failure, shrink mode sums the gradient and loss with MPI's allreduce, not in shard
    // order: the parameters drift apart by float32 rounding from step to step (by how much depends on
    // the values, so on the kernels' level), far below what another gradient would change
    for (const v of shrink.slice(0, failed))
      assert.ok(Math.abs(v.difference) <= 1e-5 * runs[0].steps[v.step].loss, `step ${v.step}: ${v.difference}`);
    assert.equal(shrink[39].difference, runs[2].steps[39].loss - runs[0].steps[39].loss);
    assert.ok(shrink.slice(failed).some((v) => v.difference !== 0));
  });

  it("projects what failures would cost at the --project world sizes from the run's own measurements", async () => {
    const output = path.join(scratch, 'cost.html');
    const job = await report([run('n4-exact'), '-o', output, '--project', '4,1024', '--failure-rate', '0.01']);
    assert.equal(job.code, 0, job.stderr);
    const html = fs.readFileSync(output, 'utf8');
    const data = readRun(run('n4-exact'));
    const m = costMeasurements(data);
    const retried = data.recoveries[0].step;
    const steps = data.steps.filter((s) => s.step !== retried);
    assert.equal(m.step, steps.reduce((sum, s) => sum + s.step_ms, 0) / steps.length / 1000);
    const jit = lines(path.join(run('n4-exact'), 'events.jsonl')).filter((e) => e.event === 'checkpoint' && e.reason === 'jit');
    assert.equal(jit.length, 1);
    assert.equal(m.checkpoint, (jit[0].duration_ms as number) / 1000);
    assert.equal(m.recovery, data.recoveries[0].killToCommitMs! / 1000);
    const f = 0.01 / 86_400;
    for (const n of [4, 1024]) {
      const periodic = `${(periodicWaste(n, f, m.checkpoint!, m.recovery!).total * 100).toPrecision(3)}%`;
      const ours = `${(ftTrainWaste(n, f, m.step, m.recovery!).total * 100).toPrecision(3)}%`;
      assert.match(
        html,
        new RegExp(
          `<tr><td class="text">n4-exact</td><td>${n}</td>.*<td>${periodic.replace('.', '\\.')}</td><td><b>${ours.replace('.', '\\.')}</b></td>`,
        ),
      );
    }
    assert.match(
      html,
      /<tr class="paper"><td class="text">BERT-L \(the paper\)<\/td><td>1024<\/td>.*<td>1\.56%<\/td><td>–<\/td><td class="text">paper: 1\.54% \(without the restart term: 1\.54%\)<\/td><\/tr>/,
    );
    const refused = await report([run('n4-exact'), '-o', output, '--project', '4,0']);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /--project expects world sizes N1,N2,\.\.\. \(positive integers\), got "4,0"/);
  });

  it("--csv writes one tidy table with metrics.jsonl's values exactly, empty cells where absent", async () => {
    const file = path.join(scratch, 'steps.csv');
    const job = await report([run('n2-sgd'), run('n4-exact'), '--csv', file]);
    assert.equal(job.code, 0, job.stderr);
    assert.equal(job.stdout, `ft-report: 2 runs; wrote ${file}\n`);
    const [header, ...rows] = fs
      .readFileSync(file, 'utf8')
      .trimEnd()
      .split('\n')
      .map((line) => line.split(','));
    assert.deepEqual(header, ['run', 'step', 'time', 'loss', 'lr', 'world', 'step_ms', 'test_accuracy', 'test_loss']);
    const expected = ['n2-sgd', 'n4-exact'].flatMap((name) =>
      lines(path.join(run(name), 'metrics.jsonl')).map((m) => [
        name,
        ...header.slice(1).map((column) => (m[column] === undefined ? '' : String(m[column]))),
      ]),
    );
    assert.equal(rows.length, 80);
    assert.deepEqual(rows, expected);
    const evaluated = rows.filter((r) => r[7] !== '');
    assert.deepEqual(
      evaluated.map((r) => [r[0], r[1]]),
      [
        ['n2-sgd', '19'],
        ['n4-exact', '19'],
      ],
    );
    for (const r of evaluated) assert.equal(Number(r[7]), lines(path.join(run(r[0]), 'metrics.jsonl'))[19].test_accuracy);
  });

  it('--baseline names the run to compare with; --png writes the charts; what comes from run directories is escaped', async () => {
    const hostile = broken('<b>run</b>&', (dir) => {
      const file = path.join(dir, 'events.jsonl');
      fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('"phase":"', '"phase":"<i>p</i>'));
    });
    const [output, png] = [path.join(scratch, 'named.html'), path.join(scratch, 'named.png')];
    const job = await report([run('n4-sgd'), hostile, '-o', output, '--png', png, '--baseline', run('n4-shrink'), '--title', 'A <title>']);
    assert.equal(job.code, 0, job.stderr);
    const html = fs.readFileSync(output, 'utf8');
    assert.doesNotMatch(html, /<b>run|<i>p|<title>A <title>/);
    assert.match(html, /&#60;b&#62;run&#60;\/b&#62;&#38;/);
    assert.match(html, /<td class="text">&#60;i&#62;p&#60;\/i&#62;collective<\/td>/);
    const row = (name: string) => new RegExp(`<tr><td class="text"[^>]*>${name}</td>.*</tr>`).exec(html)?.[0] ?? '';
    assert.match(row('n4-sgd'), /class="differs">differs<\/span> <span class="note">\(vs .*n4-shrink\)/);
    const drawn = ink(fs.readFileSync(png));
    assert.ok(drawn.share > 0.03 && drawn.colours > 50, JSON.stringify(drawn));
  });

  it('names a broken run directory in one line and passes over it; --strict refuses; nothing is written when no run is left', async () => {
    const cases: [string, (dir: string) => void, RegExp][] = [
      [
        'half-line',
        (d) => fs.appendFileSync(path.join(d, 'metrics.jsonl'), '{"step":40,"lo'),
        /metrics\.jsonl: half-written \(its last line has no end\)$/,
      ],
      ['half-summary', (d) => fs.truncateSync(path.join(d, 'summary.json'), 100), /summary\.json: not JSON$/],
      [
        'gap',
        (d) => {
          const file = path.join(d, 'metrics.jsonl');
          fs.writeFileSync(
            file,
            fs
              .readFileSync(file, 'utf8')
              .split('\n')
              .filter((l) => !l.startsWith('{"step":11,'))
              .join('\n'),
          );
        },
        /metrics\.jsonl: step 12 follows step 10$/,
      ],
      [
        'no-recovery',
        (d) => {
          const file = path.join(d, 'events.jsonl');
          fs.writeFileSync(
            file,
            fs
              .readFileSync(file, 'utf8')
              .split('\n')
              .filter((l) => !l.includes('"revoke+shrink"'))
              .join('\n'),
          );
        },
        /events\.jsonl: no recovery at step 2\d, where summary\.json has a failure$/,
      ],
      [
        'bad-sha',
        (d) => {
          const file = path.join(d, 'summary.json');
          fs.writeFileSync(file, JSON.stringify({ ...JSON.parse(fs.readFileSync(file, 'utf8')), params_sha256: 'abc' }));
        },
        /summary\.json: "params_sha256" is not a sha256$/,
      ],
      ['no-metrics', (d) => fs.rmSync(path.join(d, 'metrics.jsonl')), /metrics\.jsonl: missing$/],
      ['null-summary', (d) => fs.writeFileSync(path.join(d, 'summary.json'), 'null\n'), /summary\.json: not a JSON object$/],
      [
        'headless',
        (d) => {
          const file = path.join(d, 'metrics.jsonl');
          fs.writeFileSync(file, fs.readFileSync(file, 'utf8').split('\n').slice(1).join('\n'));
        },
        /metrics\.jsonl: starts at step 1, not 0$/,
      ],
      [
        'bad-lost',
        (d) => {
          const file = path.join(d, 'events.jsonl');
          fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace(/"lost":\[\d+\]/, '"lost":["<b>1</b>"]'));
        },
        /events\.jsonl: a revoke\+shrink event at step 2\d whose "lost" is not a list of ranks$/,
      ],
    ];
    for (const [name, damage, message] of cases) {
      const dir = broken(name, damage);
      assert.throws(
        () => readRun(dir),
        (error: Error) => error instanceof RunDirError && message.test(error.message) && error.message.startsWith(dir),
        name,
      );
    }

    const output = path.join(scratch, 'skipped.html');
    const skipped = await report([run('n4-sgd'), path.join(scratch, 'half-summary'), '-o', output]);
    assert.equal(skipped.code, 0, skipped.stderr);
    assert.equal(skipped.stderr, `ft-report: skipped ${path.join(scratch, 'half-summary', 'summary.json')}: not JSON\n`);
    assert.match(skipped.stdout, /^ft-report: 1 run \(1 skipped\); wrote /);
    assert.match(fs.readFileSync(output, 'utf8'), /Not in this report.*half-summary\/summary\.json: not JSON/s);

    const strict = path.join(scratch, 'strict.html');
    const refused = await report([run('n4-sgd'), path.join(scratch, 'gap'), '-o', strict, '--strict']);
    assert.equal(refused.code, 1);
    assert.equal(refused.stderr, `ft-report: ${path.join(scratch, 'gap', 'metrics.jsonl')}: step 12 follows step 10\n`);
    assert.ok(!fs.existsSync(strict));

    const none = path.join(scratch, 'none.html');
    const empty = await report([path.join(scratch, 'bad-sha'), path.join(scratch, 'nowhere'), '-o', none]);
    assert.equal(empty.code, 1);
    assert.equal(empty.stderr.trim().split('\n').at(-1), 'ft-report: no readable run directory (2 skipped); nothing written');
    assert.ok(!fs.existsSync(none));
  });

  it('opens in headless Chromium with no console error and no request; draws its charts interactively; a hovered point shows a tooltip', async () => {
    const profile = makeScratch('ft-chromium-');
    const browser = await puppeteer.launch({
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      headless: true,
      args: ['--no-sandbox', '--disable-gpu'],
      userDataDir: profile,
      timeout: 60_000,
    });
    try {
      const page = await browser.newPage();
      const problems: string[] = [];
      const requests: string[] = [];
      page.on('console', (message) => {
        if (message.type() === 'error' || message.type() === 'warn') problems.push(`console ${message.type()}: ${message.text()}`);
      });
      page.on('pageerror', (error) => problems.push(`page error: ${String(error)}`));
      await page.setRequestInterception(true);
      page.on('request', (request) => {
        if (!request.url().startsWith('data:') && request.url() !== `file://${path.join(compared, 'report.html')}`)
          requests.push(request.url());
        void request.continue();
      });
      await page.setViewport({ width: 1280, height: 900 });
      await page.goto(`file://${path.join(compared, 'report.html')}`, { waitUntil: 'load' });
      // exact mode rebalances by measured speed (--rebalance auto), so whether shards moved depends on the machine:
      // the chart of shard counts is expected exactly where a run's events record a rebalance
      const rebalanced = fs
        .readdirSync(compared)
        .filter((name) => fs.existsSync(path.join(compared, name, 'summary.json')))
        .some((name) => readRun(run(name)).rebalances.length > 0);
      const expected = [
        'Loss against step',
        "Loss minus the baseline's",
        'Loss against wall time',
        'Step time',
        'Throughput',
        'World size over time',
        'Learning rate',
        ...(rebalanced ? ['Shards per rank'] : []),
        'Test accuracy',
        'Test loss',
      ];
      const titles = await page.evaluate(
        'Array.from(document.querySelectorAll("figure img")).map((img) => img.complete && img.naturalWidth > 0 && img.alt)',
      );
      assert.deepEqual(titles, expected);
      // the inlined vega draws each chart again, live, in place of its image
      await page.waitForFunction(`document.querySelectorAll("figure.interactive svg.marks").length === ${expected.length}`, {
        timeout: 30_000,
      });
      const figures = await page.$$('figure');
      for (const figure of figures) {
        const drawn = ink(Buffer.from(await figure.screenshot({ type: 'png' })));
        assert.ok(drawn.share > 0.02 && drawn.colours > 20, `a chart looks blank: ${JSON.stringify(drawn)}`);
      }
      assert.equal(await page.$('.vg-tooltip'), null);
      const accuracyPoints = await figures[expected.indexOf('Test accuracy')].$$('svg g.mark-symbol.role-mark path');
      assert.equal(accuracyPoints.length, 12); // 6 runs evaluated after steps 19 and 39
      await accuracyPoints[0].hover();
      const tooltip = await page.waitForSelector('.vg-tooltip', { visible: true, timeout: 5000 });
      const shown = /^run(n[24]-\w+)step(19|39)test accuracy(\d\d\.\d\d)%$/.exec(
        await tooltip!.evaluate((element) => element.textContent ?? ''),
      );
      assert.ok(shown, 'the tooltip names the run, the step and the accuracy');
      const accuracy =
        shown[2] === '19'
          ? (lines(path.join(run(shown[1]), 'metrics.jsonl'))[19].test_accuracy as number)
          : readRun(run(shown[1])).summary!.test_accuracy!;
      assert.equal(shown[3], (accuracy * 100).toFixed(2));
      fs.mkdirSync(artifacts, { recursive: true });
      await page.screenshot({ path: path.join(artifacts, 'report.png'), fullPage: true });
      assert.deepEqual(problems, []);
      assert.deepEqual(requests, []);
    } finally {
      await browser.close();
      removeScratch(profile);
    }
  });

  it('--serve: the page shows a run that started after it opened, its steps and its failure as they come, without a reload and with no other request; SIGINT stops the server', async () => {
    const live = path.join(scratch, 'live');
    const server = spawn(process.execPath, [path.join(repoRoot, 'launch', 'ft-report.js'), run('n2-sgd'), live, '--serve', '--port', '0'], {
      env: { ...process.env, FT_TEST_JOB: `${process.pid}-serve` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    server.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    server.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => server.on('exit', (code) => resolve(code)));
    const profile = makeScratch('ft-chromium-');
    let browser: Awaited<ReturnType<typeof puppeteer.launch>> | undefined;
    try {
      for (const started = Date.now(); !stdout.includes('\n'); await new Promise((r) => setTimeout(r, 50)))
        if (Date.now() - started > 30_000 || server.exitCode !== null) assert.fail(`ft-report --serve did not start: ${stdout}${stderr}`);
      const url =
        /^ft-report: serving the report of 1 run on (http:\/\/127\.0\.0\.1:\d+\/) \(kept current as the runs go on; Ctrl-C stops\)\n$/.exec(
          stdout,
        )?.[1];
      assert.ok(url, stdout);
      assert.equal(stderr, `ft-report: skipped ${live}: no such run directory\n`);

      browser = await puppeteer.launch({
        executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
        headless: true,
        args: ['--no-sandbox', '--disable-gpu'],
        userDataDir: profile,
        timeout: 60_000,
      });
      const page = await browser.newPage();
      const problems: string[] = [];
      const elsewhere: string[] = [];
      page.on('console', (message) => {
        if (message.type() === 'error' || message.type() === 'warn') problems.push(`console ${message.type()}: ${message.text()}`);
      });
      page.on('pageerror', (error) => problems.push(`page error: ${String(error)}`));
      page.on('request', (request) => {
        if (!request.url().startsWith('data:') && !request.url().startsWith(url)) elsewhere.push(request.url());
      });
      await page.goto(url, { waitUntil: 'load' });
      await page.evaluate('window.openedOnce = true');
      // the rows of the table under the heading `title`
      const rowsUnder = (title: string) =>
        `Array.from(document.querySelectorAll("h2")).find((h) => h.textContent === ${JSON.stringify(title)}).nextElementSibling.querySelectorAll("tbody tr").length`;
      const runRows = rowsUnder('Runs');
      assert.equal(await page.evaluate(runRows), 1);
      // the loss chart's failure triangles (its other symbols are the points of each step, circles)
      const failureMarks =
        'Array.from(document.querySelectorAll("figure")[0].querySelectorAll("svg g.mark-symbol.role-mark path")).filter((p) => !p.getAttribute("d").includes("A")).length';
      await page.waitForFunction('document.querySelectorAll("figure.interactive").length > 0', { timeout: 30_000 });
      assert.equal(await page.evaluate(failureMarks), 0);

      // the run starts now, after the page opened; its rank 1 is killed at step 40 of 80
      const job = await runCommand(
        path.join(repoRoot, 'launch', 'ft-run'),
        [
          '-n',
          '2',
          '--',
          '--model',
          'models/lenet.json',
          '--data',
          'datasets/fashion-mnist',
          '--steps',
          '80',
          '--run-dir',
          live,
          '--drill',
          'rank=1,step=40',
        ],
        process.env,
        120_000,
        'the live run',
      );
      assert.equal(job.code, 0, job.stdout + job.stderr);
      const liveRun = readRun(live);
      // the page caught up: two runs, the live one finished with its 80 steps and its failure at step 40, in the table and on the loss chart
      await page.waitForFunction(
        `${runRows} === 2 && document.body.textContent.includes(${JSON.stringify(liveRun.summary!.params_sha256.slice(0, 16))}) && document.querySelectorAll("figure.interactive svg.marks").length === document.querySelectorAll("figure").length`,
        { timeout: 60_000 },
      );
      assert.equal(await page.evaluate('window.openedOnce'), true, 'the page was reloaded');
      assert.equal(liveRun.recoveries.length, 1);
      assert.equal(await page.evaluate(rowsUnder('Recoveries')), readRun(run('n2-sgd')).recoveries.length + 1);
      assert.equal(await page.evaluate(failureMarks), 1);
      assert.deepEqual(problems, []);
      assert.deepEqual(elsewhere, []);
    } finally {
      await browser?.close();
      removeScratch(profile);
      server.kill('SIGINT');
    }
    assert.equal(await exited, 0);
    assert.match(stdout, /\nft-report: SIGINT: stopped serving http:\/\/127\.0\.0\.1:\d+\/\n$/);
  });

  it('--serve refuses a port in use, files to write beside it, and --port without it: one line each, exit 2, nothing served', async () => {
    const busy = http.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const port = (busy.address() as { port: number }).port;
    try {
      const cases: [string[], string][] = [
        [
          ['--serve', '--port', String(port)],
          `ft-report: --port ${port}: in use on 127.0.0.1 (choose another, or --port 0 for any free one)`,
        ],
        [
          ['--serve', '-o', path.join(scratch, 'served.html')],
          'ft-report: --serve shows the report in a browser, -o, --png and --csv write it to files: give one or the other (see --help)',
        ],
        [['--port', '8808', '-o', path.join(scratch, 'served.html')], 'ft-report: --port goes with --serve (see --help)'],
        [['--serve', '--port', '65536'], 'ft-report: --port expects an integer in [0, 65535], got 65536 (see --help)'],
      ];
      for (const [args, line] of cases) {
        const job = await report([run('n2-sgd'), ...args]);
        assert.deepEqual([job.code, job.stdout, job.stderr], [2, '', `${line}\n`]);
      }
      assert.ok(!fs.existsSync(path.join(scratch, 'served.html')));
    } finally {
      busy.close();
    }
  });
});
