// launch/compare: the FT-SGD experiment at this machine's scale. For each world size N it trains
// the same model three times: SGD with no failure, FT-SGD `exact` and FT-SGD `shrink` each with
// one rank killed (kill -9 from outside) at step K; then writes the report comparing them.
// --policies exact leaves out the shrink run (the README's quick drill).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readRuns, writeReport } from '../report/report';
import { commandLine, last, runMain, UsageError } from './command';
import { runDrill, type Kill } from './fault-drill';
import { makeDirectory } from '../base/make-directory';

/** Flags compare sets itself for every run. */
const ownFlags = ['--run-dir', '--on-failure', '--steps', '--model', '--data', '--batch', '--eval-every', '--resume'];

type Policy = 'exact' | 'shrink';

interface Plan {
  name: string;
  ranks: number;
  onFailure: Policy;
  kills: Kill[];
  describe: string;
}

function parseRanks(text: string): number[] {
  const ranks = text.split(',').map((part) => Number(part.trim()));
  for (const n of ranks)
    if (!Number.isSafeInteger(n) || n < 2)
      throw new UsageError(`compare: --ranks expects world sizes >= 2 separated by commas (e.g. 4,8), got "${text}"`);
  return ranks;
}

function parsePolicies(text: string): Policy[] {
  const policies = text.split(',').map((part) => part.trim());
  for (const p of policies)
    if (p !== 'exact' && p !== 'shrink')
      throw new UsageError(`compare: --policies expects exact and/or shrink separated by commas, got "${text}"`);
  return [...new Set(policies)] as Policy[];
}

function stamp(): string {
  return new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
}

runMain('compare', async () => {
  const args = commandLine(
    'compare',
    '$0 [--ranks 4,8] [--steps 600] [--kill-step K] [--kill-rank R] [-- <more ft-train arguments>]\n\n' +
      'For each world size N: SGD with no failure, FT-SGD exact and FT-SGD shrink with world rank R killed (kill -9) at step K; then the report.\n' +
      'The no-failure run uses the exact summation order, so it is the baseline an exact recovery must match bit for bit.',
  )
    .option('ranks', { type: 'string', default: '4,8', describe: 'world sizes to run, comma-separated' })
    .option('steps', { type: 'number', default: 600, describe: 'steps per run' })
    .option('kill-step', { type: 'number', describe: 'kill once this step is committed (default: half of --steps)' })
    .option('kill-rank', { type: 'number', default: 1, describe: 'the world rank killed' })
    .option('batch', { type: 'number', default: 64, describe: 'global batch (shrink needs it divisible by every N)' })
    .option('eval-every', { type: 'number', default: 100, describe: 'evaluate on the test split every this many steps' })
    .option('model', { type: 'string', default: 'models/lenet.json', describe: 'model spec' })
    .option('data', { type: 'string', default: 'datasets/fashion-mnist', describe: 'dataset directory' })
    .option('out', {
      type: 'string',
      describe: 'directory for the runs and the report (default: runs/compare-<time>); must be new or empty',
    })
    .option('policies', { type: 'string', default: 'exact,shrink', describe: 'the FT-SGD policies run with a kill, comma-separated' })
    .option('png', { type: 'boolean', default: true, describe: 'also write report.png (--no-png: not)' })
    .parseSync();
  const ranks = parseRanks(last(args.ranks));
  const policies = parsePolicies(last(args.policies));
  const steps = last(args.steps);
  const killStep = last(args['kill-step'] ?? Math.floor(steps / 2));
  const killRank = last(args['kill-rank']);
  const batch = last(args.batch);
  const [model, data] = [last(args.model), last(args.data)];
  const extra = args._.map(String);
  if (!Number.isSafeInteger(steps) || steps < 2) throw new UsageError(`compare: --steps expects an integer >= 2, got ${steps}`);
  if (!Number.isSafeInteger(killStep) || killStep < 0 || killStep >= steps - 1)
    throw new UsageError(`compare: --kill-step expects a step in 0..${steps - 2} (the run must go on after it), got ${killStep}`);
  if (!Number.isSafeInteger(killRank) || killRank < 0 || killRank >= Math.min(...ranks))
    throw new UsageError(`compare: --kill-rank expects a world rank in 0..${Math.min(...ranks) - 1}, got ${killRank}`);
  if (!Number.isSafeInteger(batch) || batch < 1) throw new UsageError(`compare: --batch expects an integer >= 1, got ${batch}`);
  if (policies.includes('shrink'))
    for (const n of ranks)
      if (batch % n !== 0)
        throw new UsageError(`compare: --batch ${batch}: shrink mode needs it divisible by every world size (${n} is not a divisor)`);
  // yargs takes --runDir for --run-dir and --run-dir=x for --run-dir x
  const flagName = (arg: string) => arg.split('=')[0].replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  const clash = extra.find((arg) => ownFlags.includes(flagName(arg)));
  if (clash) throw new UsageError(`compare: ${flagName(clash)} is set by compare itself; use its own flag (see --help)`);
  const out = last(args.out ?? path.join('runs', `compare-${stamp()}`));
  if (fs.existsSync(out) && (!fs.statSync(out).isDirectory() || fs.readdirSync(out).length > 0))
    throw new UsageError(`compare: ${out}: --out exists and is not an empty directory`);

  const plans: Plan[] = ranks.flatMap((n) => [
    { name: `n${n}-sgd`, ranks: n, onFailure: 'exact' as const, kills: [], describe: `${n} ranks, SGD, no failure` },
    ...policies.map((policy) => ({
      name: `n${n}-${policy}`,
      ranks: n,
      onFailure: policy,
      kills: [{ rank: killRank, step: killStep, signal: 'SIGKILL' as const }],
      describe: `${n} ranks, FT-SGD ${policy}, kill -9 of rank ${killRank} after step ${killStep}`,
    })),
  ]);
  makeDirectory(out);
  console.log(`[compare] ${plans.length} runs of ${model} on ${data}, ${steps} steps each, into ${out}`);
  const started = Date.now();
  const failed = new Map<string, string>();
  try {
    for (const [i, plan] of plans.entries()) {
      const runDir = path.join(out, plan.name);
      console.log(`[compare] run ${i + 1}/${plans.length} ${plan.name}: ${plan.describe}`);
      const t0 = Date.now();
      const outcome = await runDrill(plan.ranks, plan.kills, [
        '--model',
        model,
        '--data',
        data,
        '--run-dir',
        runDir,
        '--steps',
        String(steps),
        '--batch',
        String(batch),
        '--eval-every',
        String(last(args['eval-every'])),
        '--on-failure',
        plan.onFailure,
        ...extra,
      ]);
      const seconds = ((Date.now() - t0) / 1000).toFixed(1);
      if (outcome.passed)
        console.log(
          `[compare] run ${i + 1}/${plans.length} ${plan.name}: done in ${seconds} s, ${outcome.summary!.world_final} of ${plan.ranks} ranks left, params_sha256 ${outcome.summary!.params_sha256.slice(0, 16)}`,
        );
      else {
        // ft-train's exit code for bad input: the other runs would be refused the same way
        if (outcome.code === 2)
          throw new UsageError(`compare: ft-train refused the arguments of ${plan.name} (its error is above); nothing else run`);
        const why = `mpirun exit code ${outcome.code}, ${outcome.sent.length} of ${plan.kills.length} kills sent, ${outcome.summary ? `${outcome.summary.ranks_lost} rank(s) lost per summary.json` : 'no summary.json'}`;
        failed.set(plan.name, why);
        console.log(`[compare] run ${i + 1}/${plans.length} ${plan.name}: FAILED (${why})`);
      }
    }
  } catch (error) {
    if (fs.readdirSync(out).length === 0) fs.rmdirSync(out); // nothing ran: leave nothing behind
    throw error;
  }

  // a run that did not go as planned (e.g. its kill missed) would pass for a clean one
  const { runs, skipped: unreadable } = readRuns(plans.filter((plan) => !failed.has(plan.name)).map((plan) => path.join(out, plan.name)));
  const skipped = [...[...failed].map(([name, why]) => `${path.join(out, name)}: the run failed (${why})`), ...unreadable];
  if (runs.length === 0) throw new Error(`every run failed; no report (see ${out})`);
  const input = {
    title: `FT-SGD at ${ranks.join(' and ')} ranks: ${path.basename(model, '.json')} on ${path.basename(data)}, kill -9 of rank ${killRank} after step ${killStep}`,
    runs,
    skipped,
  };
  const report = path.join(out, 'report.html');
  await writeReport(input, report, args.png ? path.join(out, 'report.png') : undefined);
  console.log(
    `[compare] ${plans.length - failed.size} of ${plans.length} runs finished in ${((Date.now() - started) / 1000).toFixed(0)} s${failed.size ? `; failed: ${[...failed.keys()].join(', ')}` : ''}`,
  );
  console.log(`[compare] report: ${report}`);
  if (failed.size > 0) process.exitCode = 1;
});
