// Setup and build entry points: a second setup run reuses everything; a build without the ULFM MPI
// stops with one line naming the setup command; the GPU bundle's session refuses a bad time budget
// first, and its usage names it.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { mpiHome } from '../../src/cli/mpirun';

const root = path.resolve(__dirname, '..', '..', '..');

describe('launch/setup', function () {
  this.timeout(60_000);

  it('reuses what is installed on a second run', () => {
    const run = spawnSync('bash', [path.join(root, 'launch', 'setup')], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    const lines = run.stdout.trim().split('\n');
    assert.deepEqual(
      lines.map((l) => l.replace(/\(Open MPI v[^)]+\)/, '(Open MPI)')),
      ['[setup] apt packages: all present', `[setup] ULFM Open MPI: ${mpiHome} (Open MPI)`, '[setup] done'],
    );
  });
});

describe('binding/build.js', () => {
  it('names launch/setup when the ULFM Open MPI is missing', () => {
    const run = spawnSync(process.execPath, [path.join(root, 'binding', 'build.js')], {
      encoding: 'utf8',
      env: { ...process.env, FT_MPI_HOME: '/nonexistent/ompi' },
    });
    assert.equal(run.status, 1);
    assert.equal(run.stderr, 'ft-train: no Open MPI with ULFM at /nonexistent/ompi (FT_MPI_HOME); run launch/setup first\n');
  });
});

describe('launch/gpu-bundle', () => {
  const bundle = (...args: string[]) => spawnSync('bash', [path.join(root, 'launch', 'gpu-bundle'), ...args], { encoding: 'utf8' });

  it('session refuses a time budget that is not whole seconds, before it touches anything', () => {
    const run = bundle('session', '/nonexistent/logs', '9m');
    assert.equal(run.status, 1);
    assert.equal(run.stderr, "[gpu-bundle] error: SECONDS must be a whole number of seconds, got '9m'\n");
    assert.equal(run.stdout, '');
  });

  it('an unknown command prints the usage, session among the commands, and exits 2', () => {
    const run = bundle('sessions');
    assert.equal(run.status, 2);
    assert.match(run.stderr, /^ {2}launch\/gpu-bundle session \[LOG_DIR\] \[SECONDS\]/m);
  });
});
