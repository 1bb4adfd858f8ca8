// Progress of a training run on the leader's console: on a terminal, one bar that fits the
// terminal's width and is redrawn in place, with every other line (evaluation, failure, recovery)
// printed above it; otherwise a plain line every few seconds, without control codes.
// Steps are named as everywhere else (README, "Step numbers"): step K is the step whose metrics
// record has "step": K, from 0; a run of N steps ends with step N-1, shown as `step N-1/N-1`.
import * as fs from 'node:fs';
import * as tty from 'node:tty';
import { Format } from 'cli-progress';
import type { StepRecord } from '../run/records';

/**
 * Under mpirun a rank's stdout is always a pty, whatever mpirun's own stdout is; so the answer is
 * mpirun's (the parent's) stdout.
 */
function isTerminal(out: NodeJS.WriteStream): boolean {
  if (!out.isTTY) return false;
  if (process.env.OMPI_COMM_WORLD_SIZE === undefined) return true;
  try {
    return /^\/dev\/(pts\/|tty)/.test(fs.readlinkSync(`/proc/${process.ppid}/fd/1`));
  } catch {
    return true;
  }
}

/** The width of the terminal the user sees: under mpirun mpirun's (the rank's own pty has no size of its own). */
function terminalColumns(out: NodeJS.WriteStream): number {
  if (process.env.OMPI_COMM_WORLD_SIZE !== undefined) {
    try {
      const fd = fs.openSync(`/proc/${process.ppid}/fd/1`, 'w');
      try {
        const columns = tty.isatty(fd) ? new tty.WriteStream(fd).columns : 0;
        if (columns > 0) return columns;
      } finally {
        fs.closeSync(fd);
      }
    } catch {
      // not readable: the fallbacks below
    }
  }
  return out.columns || Number(process.env.COLUMNS) || 80;
}

/** Seconds as cli-progress writes them (5s, 1m05s, 1h02m). */
function time(seconds: number): string {
  return Format.TimeFormat(Math.round(seconds), { autopaddingChar: '0' } as never, 1);
}

export class Progress {
  private lastLine = 0;
  /** when the first step this process saw began, and its number (a resumed or joined run starts later) */
  private firstStart?: number;
  private firstStep = 0;
  private samples = 0;
  /** the bar's line is on screen (not yet ended with a newline) */
  private barShown = false;
  private lastBar = '';
  /** the terminal's width and when it was looked up: at most once a second, not at every step */
  private width = { columns: 0, at: -Infinity };
  private readonly terminal: boolean;

  constructor(
    private total: number | undefined,
    private readonly out: NodeJS.WriteStream = process.stdout,
    private readonly everyMs = 2000,
    private readonly columns = () => terminalColumns(out),
  ) {
    this.terminal = isTerminal(out);
  }

  /** The run's length in steps, once known (with --epochs: when the data plan exists). */
  setTotal(total: number): void {
    this.total = total;
  }

  step(record: StepRecord, isLeader: boolean): void {
    const now = Date.now();
    if (this.firstStart === undefined) {
      this.firstStart = record.time - record.step_ms;
      this.firstStep = record.step;
    }
    this.samples += record.samples;
    if (!isLeader) return;
    const last = this.total !== undefined && record.step + 1 >= this.total;
    if (this.terminal) {
      const { stepOf, percent, elapsed, eta, world, rate } = this.parts(record, now);
      this.drawBar(
        [percent, stepOf, `${elapsed}${eta ? `<${eta}` : ''}`, `loss ${record.loss.toFixed(4)}`, rate, world],
        this.total !== undefined ? (record.step + 1) / this.total : undefined,
      );
      if (last) this.endBar();
    } else if (last || now - this.lastLine >= this.everyMs) {
      // formatted only when printed: most steps cost a few counters
      this.lastLine = now;
      const { stepOf, percent, elapsed, eta, world, rate } = this.parts(record, now);
      this.out.write(
        `[ft-train] ${[
          stepOf,
          percent,
          `epoch ${record.epoch}`,
          `loss ${record.loss.toFixed(4)}`,
          `lr ${record.lr.toPrecision(3)}`,
          world,
          `${record.step_ms.toFixed(1)} ms/step`,
          rate,
          `elapsed ${elapsed}`,
          eta && `ETA ${eta}`,
        ]
          .filter((part) => part !== undefined)
          .join(' ')}\n`,
      );
    }
    if (record.test_accuracy !== undefined) {
      this.line(
        `step ${record.step}: test accuracy ${(record.test_accuracy * 100).toFixed(1)}%${record.test_loss !== undefined ? `, test loss ${record.test_loss.toFixed(4)}` : ''}`,
      );
    }
  }

  /** What a line or the bar says of `record`, shown at `now`. */
  private parts(
    record: StepRecord,
    now: number,
  ): { stepOf: string; percent?: string; elapsed: string; eta?: string; world: string; rate: string } {
    const elapsed = Math.max(1e-3, (now - this.firstStart!) / 1000);
    const done = record.step + 1;
    const average = Math.round(this.samples / elapsed);
    const instant = Math.round(record.samples / Math.max(1e-3, record.step_ms / 1000));
    return {
      stepOf: this.total !== undefined ? `step ${record.step}/${this.total - 1}` : `step ${record.step}`,
      percent: this.total !== undefined ? `${Math.floor((Math.min(done, this.total) / this.total) * 100)}%` : undefined,
      elapsed: time(elapsed),
      eta: this.total !== undefined ? time(Math.max(0, this.total - done) * (elapsed / (done - this.firstStep))) : undefined,
      world: `world ${record.world}${record.spares ? ` (+${record.spares} spare${record.spares > 1 ? 's' : ''})` : ''}`,
      rate: `${instant} samples/s (avg ${average})`,
    };
  }

  /** A line of its own (an evaluation, a failure, a recovery), printed above the bar, which is then redrawn. */
  line(text: string): void {
    if (this.barShown) this.out.write(`\r\x1b[K[ft-train] ${text}\n${this.lastBar}`);
    else this.out.write(`[ft-train] ${text}\n`);
  }

  /** The bar ends with a newline: what follows prints below it (a stop, the end of the run). */
  endBar(): void {
    if (this.barShown) this.out.write('\n');
    this.barShown = false;
  }

  /**
   * One line of at most the terminal's width less one (no wrap at the last column): the bar takes
   * what the text leaves (5 to 30 cells); when both do not fit, the text's last parts go.
   */
  private drawBar(parts: (string | undefined)[], fraction: number | undefined): void {
    const now = Date.now();
    if (now - this.width.at >= 1000) this.width = { columns: this.columns(), at: now };
    const width = Math.max(20, this.width.columns) - 1;
    const kept = parts.filter((part): part is string => part !== undefined);
    const barMin = fraction !== undefined ? 8 : 0; // "[#####] "
    while (kept.length > 1 && kept.join(' ').length + barMin > width) kept.pop();
    const text = kept.join(' ').slice(0, width - barMin);
    const room = Math.min(30, width - text.length - 3);
    const bar =
      fraction !== undefined
        ? `[${Format.BarFormat(fraction, { barsize: room, barCompleteString: '#'.repeat(room), barIncompleteString: '.'.repeat(room), barGlue: '' } as never)}] `
        : '';
    this.lastBar = `\r${bar}${text}\x1b[K`;
    this.barShown = true;
    this.out.write(this.lastBar);
  }
}
