#!/usr/bin/env node
// Entry point run by every rank: mpirun --with-ft ulfm -n N node launch/ft-train.js --help
require('../dist/src/cli/ft-train').run();
