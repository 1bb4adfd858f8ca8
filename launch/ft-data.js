#!/usr/bin/env node
// Converts your data into a dataset directory: node launch/ft-data.js csv FILE --label COLUMN --out DIR (see --help)
require('../dist/src/cli/ft-data');
