// Every program's command line keeps the same conventions (src/cli/command.ts), each tried as a
// real process: an unknown flag is named with the nearest known one (a misspelled required flag
// too, rather than reported missing), --version prints the program and the package version, a
// number flag given no number says what it got, `--flag=value` is `--flag value`, and bad usage
// exits 2 with one line. ft-train runs alone (a singleton), refused before MPI starts.
import { execFile } from 'node:child_process';
import { strict as assert } from 'node:assert';
import * as path from 'node:path';
import { promisify } from 'node:util';

const launch = path.join(__dirname, '..', '..', '..', 'launch');
const version = '0.1.0';

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs launch/`program` with `args`; resolves to its exit code and output. */
async function run(program: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<Outcome> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [path.join(launch, program), ...args], { env });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failure = error as Outcome;
    return { code: failure.code, stdout: failure.stdout, stderr: failure.stderr };
  }
}

/** Exit code 2, nothing on stdout, and `line` alone on stderr. */
async function refused(program: string, args: string[], line: string): Promise<void> {
  assert.deepEqual(await run(program, args), { code: 2, stdout: '', stderr: `${line}\n` });
}

const trainFlags = ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--run-dir', 'runs/never'];

/** Per program: its launch script, a flag misspelled and the line naming it, a bad number, and `--flag=value` reaching the program's own check. */
const programs: { name: string; script: string; typo: [string[], string]; number?: [string[], string]; equals: [string[], string] }[] = [
  {
    name: 'ft-train',
    script: 'ft-train.js',
    typo: [[...trainFlags, '--step', '5'], 'ft-train: unknown flag --step; did you mean --steps? (see --help)'],
    number: [[...trainFlags, '--lr=abc'], 'ft-train: --lr: expected a number, got "abc"'],
    equals: [
      ['--model=models/lenet.json', '--data=datasets/nowhere', '--run-dir=runs/never'],
      'ft-train: datasets/nowhere: no such dataset directory',
    ],
  },
  {
    name: 'ft-run',
    script: 'ft-run',
    typo: [['-n', '2', '--dyr-run', '--', ...trainFlags], 'ft-run: unknown flag --dyr-run; did you mean --dry-run? (see --help)'],
    number: [['-n', 'two', '--', ...trainFlags], 'ft-run: -n: expected a number, got "two"'],
    equals: [['-n=0', '--dry-run', '--', ...trainFlags], 'ft-run: -n expects an integer >= 1, got 0'],
  },
  {
    name: 'drill',
    script: 'drill',
    typo: [['-n', '2', '--kil', '1@3', '--', ...trainFlags], 'drill: unknown flag --kil; did you mean --kill? (see --help)'],
    number: [['-n=two', '--kill', '1@3', '--', ...trainFlags], 'drill: -n: expected a number, got "two"'],
    equals: [['-n=2', '--kill=5@3', '--', ...trainFlags], 'drill: --kill 5@3: there are only ranks 0..1 (see --help)'],
  },
  {
    name: 'compare',
    script: 'compare',
    typo: [['--step', '40'], 'compare: unknown flag --step; did you mean --steps? (see --help)'],
    number: [['--kill-step=half'], 'compare: --kill-step: expected a number, got "half"'],
    equals: [['--ranks=1'], 'compare: --ranks expects world sizes >= 2 separated by commas (e.g. 4,8), got "1"'],
  },
  {
    name: 'ft-report',
    script: 'ft-report.js',
    typo: [['runs/a', '-o', 'report.html', '--titel', 'x'], 'ft-report: unknown flag --titel; did you mean --title? (see --help)'],
    equals: [['runs/a', '--output=report.txt'], 'ft-report: -o report.txt: expected a .html file name'],
  },
  {
    name: 'ft-data',
    script: 'ft-data.js',
    typo: [
      ['csv', 'x.csv', '--out', 'o', '--test-fractio', '0.1'],
      'ft-data: unknown flag --test-fractio; did you mean --test-fraction? (see --help)',
    ],
    number: [['csv', 'x.csv', '--out', 'o', '--seed=one'], 'ft-data: --seed: expected a number, got "one"'],
    equals: [
      ['csv', 'x.csv', '--out=o', '--test-fraction=0.7'],
      'ft-data: --test-fraction expects a number in (0, 0.5], got 0.7 (see --help)',
    ],
  },
];

describe("the programs' command lines", function () {
  this.timeout(30_000);

  for (const program of programs) {
    describe(program.name, () => {
      it('an unknown flag: named with the nearest known one, exit 2', () => refused(program.script, ...program.typo));
      it('a flag close to nothing: named alone', () =>
        refused(program.script, ['--bogus', ...program.typo[0]], `${program.name}: unknown flag --bogus (see --help)`));
      it('--version', async () =>
        assert.deepEqual(await run(program.script, ['--version']), { code: 0, stdout: `${program.name} ${version}\n`, stderr: '' }));
      if (program.number) it('a number flag given no number', () => refused(program.script, ...program.number!));
      it('--flag=value as --flag value', () => refused(program.script, ...program.equals));
    });
  }

  it('ft-train: a misspelled required flag is unknown, not missing', () =>
    refused(
      'ft-train.js',
      ['--model', 'models/lenet.json', '--data', 'datasets/fashion-mnist', '--run-dri', 'runs/never'],
      'ft-train: unknown flag --run-dri; did you mean --run-dir? (see --help)',
    ));
});
