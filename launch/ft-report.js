#!/usr/bin/env node
// The report of one or more runs: node launch/ft-report.js runs/a runs/b -o report.html [--png report.png]
require('../dist/src/cli/ft-report');
