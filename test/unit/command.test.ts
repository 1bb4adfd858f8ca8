// The nearest known flag that an unknown one is taken for (src/cli/command.ts): a typo, a swap, a
// missing letter or an unambiguous beginning gives one; a name close to nothing, none.
import { strict as assert } from 'node:assert';
import { suggestFlag } from '../../src/cli/command';

const known = [
  'steps',
  'epochs',
  'seed',
  'run-dir',
  'checkpoint-dir',
  'checkpoint-every',
  'optimizer',
  'optimizer-state',
  'lr',
  'lr-schedule',
];

describe('suggestFlag: the nearest known flag', () => {
  const cases: [string, string | undefined][] = [
    ['step', 'steps'], // a letter missing
    ['run-dri', 'run-dir'], // two neighbours swapped
    ['epohcs', 'epochs'],
    ['optimiser', 'optimizer'], // a letter replaced
    ['optimizer-stat', 'optimizer-state'],
    ['checkpoint-evry', 'checkpoint-every'],
    ['lr-sched', 'lr-schedule'], // the one flag it begins
    ['checkpoint', undefined], // the beginning of two flags
    ['bogus', undefined], // close to nothing
    ['x', undefined],
    ['sed', 'seed'], // short: one edit at most
  ];
  for (const [name, expected] of cases) {
    it(`--${name}: ${expected === undefined ? 'none' : `--${expected}`}`, () => assert.equal(suggestFlag(name, known), expected));
  }
});
