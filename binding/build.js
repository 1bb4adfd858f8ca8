// Builds the native addon with cmake-js against the ULFM Open MPI, after checking that it exists,
// so that a machine without it gets one clear line naming the setup command instead of a CMake trace.
'use strict';
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const mpiHome = process.env.FT_MPI_HOME || '/opt/ompi-ulfm';
const ompiInfo = path.join(mpiHome, 'bin', 'ompi_info');

function hasUlfm() {
  try {
    return /FT MPI support:\s*yes/.test(execFileSync(ompiInfo, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  } catch {
    return false;
  }
}

if (!hasUlfm()) {
  console.error(`ft-train: no Open MPI with ULFM at ${mpiHome} (FT_MPI_HOME); run launch/setup first`);
  process.exit(1);
}

// Build against the headers of the running node (Debian's and NodeSource's node ship them under
// <prefix>/include/node), so cmake-js never tries to download them.
const env = { ...process.env, FT_MPI_HOME: mpiHome };
const nodePrefix = path.resolve(path.dirname(process.execPath), '..');
if (!env.npm_config_nodedir && fs.existsSync(path.join(nodePrefix, 'include', 'node', 'node_api.h'))) {
  env.npm_config_nodedir = nodePrefix;
}

const cmakeJs = require.resolve('cmake-js/bin/cmake-js');
const result = spawnSync(process.execPath, [cmakeJs, 'compile', '--directory', path.join(__dirname, '..'),
  '--out', path.join(__dirname, '..', 'build'), '--CDFT_MPI_HOME=' + mpiHome], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
