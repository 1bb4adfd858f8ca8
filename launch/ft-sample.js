#!/usr/bin/env node
// Text from a trained language model: node launch/ft-sample.js --model RUN_DIR/model.safetensors --prompt "..." (see --help)
require('../dist/src/cli/ft-sample');
