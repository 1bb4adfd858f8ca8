// bench/recoverability: the recoverability matrix of sharded state's redundancy, measured. At N = 4
// and 6 ranks it kills every pair of ranks (and at 6 every triple) at the same step with real
// kill -9s, under replicate:2 (group placement), replicate:2:ring, ec:2+1 and ec:2+2, and records
// which runs recovered from memory (exit 0, the bits of the run without failure) and which stopped
// with exit 3. Each placement's measured fraction is printed beside what placement.ts predicts and,
// for group placement, Gemini's closed form Pr(N,m,k) = 1 - N C(N-m, k-m) / (m C(N, k)), m <= k < 2m.
// A run that ends any other way is an error. Prints a table, then one JSON line.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { trainCommand } from '../src/cli/mpirun';
import { geminiRecoveryProbability, parseRedundancy, planRedundancy, unrecoverableChunks } from '../src/sharding/placement';

const root = path.resolve(__dirname, '..', '..');
const specs = ['replicate:2', 'replicate:2:ring', 'ec:2+1', 'ec:2+2'];
const cases = (process.env.BENCH_CASES ?? '4:2,6:2,6:3').split(',').map((c) => c.split(':').map(Number) as [number, number]);
const common = [
  '--model',
  'models/lenet.json',
  '--data',
  'datasets/fashion-mnist',
  '--steps',
  '6',
  '--batch',
  '64',
  '--shards',
  '4',
  '--jit-checkpoint',
  'off',
];

function subsets(n: number, k: number): number[][] {
  if (k === 0) return [[]];
  if (n < k) return [];
  return [...subsets(n - 1, k), ...subsets(n - 1, k - 1).map((s) => [...s, n - 1])];
}

function run(ranks: number, args: string[], scratch: string): { code: number | null; sha?: string } {
  const runDir = path.join(scratch, `run-${Date.now()}-${Math.random().toString(16).slice(2)}`);
  const { command, args: argv, env } = trainCommand(ranks, [...common, '--run-dir', runDir, ...args]);
  const result = spawnSync(command, argv, { env, cwd: root, encoding: 'utf8', timeout: 300_000 });
  const summary = path.join(runDir, 'summary.json');
  const sha = fs.existsSync(summary)
    ? (JSON.parse(fs.readFileSync(summary, 'utf8')) as { params_sha256: string }).params_sha256
    : undefined;
  fs.rmSync(runDir, { recursive: true, force: true });
  if (result.status !== 0 && result.status !== 3)
    throw new Error(`ft-train ${args.join(' ')} on ${ranks} ranks exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  return { code: result.status, sha };
}

function main(): void {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'ft-recoverability-'));
  const rows: { n: number; k: number; spec: string; recovered: number; runs: number; predicted: number; gemini: number | null }[] = [];
  try {
    const reference = run(4, [], scratch).sha;
    for (const [n, k] of cases) {
      for (const spec of specs) {
        const { plan } = planRedundancy(parseRedundancy(spec), n);
        let recovered = 0;
        let predicted = 0;
        const sets = subsets(n, k);
        process.stderr.write(`[bench] N=${n}, ${k} lost at once, ${spec}: ${sets.length} runs `);
        for (const lost of sets) {
          const outcome = run(
            n,
            ['--optimizer-state', 'sharded', '--redundancy', spec, ...lost.flatMap((r) => ['--drill', `rank=${r},step=3,phase=compute`])],
            scratch,
          );
          const expected = unrecoverableChunks(plan, n, lost).length === 0;
          if (outcome.code === 0 && outcome.sha !== reference)
            throw new Error(`N=${n} ${spec} lost ${lost}: recovered with other parameters`);
          if ((outcome.code === 0) !== expected)
            throw new Error(`N=${n} ${spec} lost ${lost}: exit ${outcome.code}, placement.ts predicts ${expected ? 'recovery' : 'a loss'}`);
          recovered += outcome.code === 0 ? 1 : 0;
          predicted += expected ? 1 : 0;
          process.stderr.write(outcome.code === 0 ? '.' : 'x');
        }
        process.stderr.write('\n');
        const gemini = spec === 'replicate:2' && n % 2 === 0 ? geminiRecoveryProbability(n, 2, k) : null;
        rows.push({ n, k, spec, recovered, runs: sets.length, predicted, gemini });
      }
    }
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log('N  lost  redundancy         recovered from memory  predicted  Gemini closed form');
  for (const r of rows)
    console.log(
      `${r.n}  ${r.k}     ${r.spec.padEnd(17)}  ${`${r.recovered}/${r.runs}`.padStart(21)}  ${`${r.predicted}/${r.runs}`.padStart(9)}  ${r.gemini === null ? '' : (r.gemini * r.runs).toFixed(2) + `/${r.runs}`}`,
    );
  console.log(
    JSON.stringify({
      matrix: rows.map((r) => ({
        ranks: r.n,
        lost: r.k,
        redundancy: r.spec,
        recovered: r.recovered,
        runs: r.runs,
        predicted: r.predicted,
        gemini: r.gemini,
      })),
    }),
  );
}

main();
