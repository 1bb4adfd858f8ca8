// Setup and build entry points: a second setup run reuses everything; a build without the ULFM MPI
// stops with one line naming the setup command.
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
