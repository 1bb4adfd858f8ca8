#!/usr/bin/env node
// Entry point run by every rank: mpirun --with-ft ulfm -n N node launch/ft-train.js --help
// A rank spawned to replace a lost one (--join-id) starts MPI before loading the rest: the ranks
// spawning it wait only until then, and it joins them once it is ready.
if (process.argv.includes('--join-id')) require('../dist/src/comm').initEarly();
require('../dist/src/cli/ft-train').run();
