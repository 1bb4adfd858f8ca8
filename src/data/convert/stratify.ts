// The seeded, class-stratified train/test split that a converter decides row by row while it
// streams its input once, without knowing the class counts in advance. Each class's rows (in input
// order) are cut into consecutive windows of about 1/f rows, the window edges at floor((j + u) / f)
// for j = -1, 0, 1, ... with a seeded phase u per class; one seeded-random row of each window goes
// to test (in the first and last windows, cut by the ends of the class, only if the chosen row is
// there). A class of n rows thus gets n f test rows on average and always within two of it,
// spread over the whole input, in one pass and with memory per class only.
import { hashKeys, uniform } from '../../base/random';

/** The largest test fraction: windows need at least two rows (one train row each). */
export const maxTestFraction = 0.5;

interface ClassState {
  key: number;
  phase: number;
  seen: number;
  /** the current window's index, end and chosen row */
  window: number;
  end: number;
  chosen: number;
}

export class StratifiedSplit {
  private readonly classes = new Map<string, ClassState>();

  constructor(
    readonly fraction: number,
    readonly seed: number,
  ) {
    if (!(fraction > 0 && fraction <= maxTestFraction))
      throw new RangeError(`test fraction: expected a number in (0, ${maxTestFraction}], got ${fraction}`);
  }

  /** Whether the next row of class `label` goes to test. */
  isTest(label: string): boolean {
    let state = this.classes.get(label);
    if (!state) {
      const key = hashText(label);
      state = { key, phase: uniform(this.seed, key), seen: 0, window: -2, end: 0, chosen: -1 };
      this.classes.set(label, state);
      state.end = this.edge(state, -1);
    }
    const row = state.seen++;
    while (row >= state.end) {
      state.window += 1;
      const start = state.end;
      state.end = this.edge(state, state.window + 1);
      state.chosen = start + Math.floor(uniform(this.seed, state.key, state.window + 1) * (state.end - start));
    }
    return row === state.chosen;
  }

  private edge(state: ClassState, window: number): number {
    return Math.floor((window + state.phase) / this.fraction);
  }
}

/** A 32-bit key of a class name, so that the split of a class does not depend on which class came first. */
function hashText(text: string): number {
  return hashKeys(...Array.from(Buffer.from(text, 'utf8')), text.length);
}
