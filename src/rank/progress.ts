// Progress of a training run on the leader's console: a bar redrawn in place on a terminal,
// otherwise a plain line every few seconds.
import * as fs from 'node:fs';
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

export class Progress {
  private lastLine = 0;
  private readonly started = Date.now();
  private samples = 0;
  private readonly terminal: boolean;

  constructor(
    private readonly total: number | undefined,
    private readonly out: NodeJS.WriteStream = process.stdout,
    private readonly everyMs = 2000,
  ) {
    this.terminal = isTerminal(out);
  }

  step(record: StepRecord, isLeader: boolean): void {
    this.samples += record.samples;
    if (!isLeader) return;
    const tty = this.terminal;
    const last = this.total !== undefined && record.step + 1 >= this.total;
    const tested = record.test_accuracy !== undefined;
    if (!tty && !last && !tested && Date.now() - this.lastLine < this.everyMs) return;
    this.lastLine = Date.now();
    const rate = this.samples / Math.max(1e-3, (Date.now() - this.started) / 1000);
    const of = this.total !== undefined ? ` (${record.step + 1}/${this.total})` : '';
    const test = record.test_accuracy !== undefined ? ` test ${(record.test_accuracy * 100).toFixed(1)}%` : '';
    const text = `step ${record.step}${of} epoch ${record.epoch} loss ${record.loss.toFixed(4)} lr ${record.lr.toPrecision(3)} world ${record.world}${record.spares ? ` (+${record.spares} spare${record.spares > 1 ? 's' : ''})` : ''} ${record.step_ms.toFixed(1)} ms/step ${Math.round(rate)} samples/s${test}`;
    if (tty && this.total !== undefined) {
      const width = 24;
      const done = Math.round(((record.step + 1) / this.total) * width);
      this.out.write(`\r[${'#'.repeat(done)}${'.'.repeat(width - done)}] ${text}\x1b[K${last ? '\n' : ''}`);
    } else {
      this.out.write(`[ft-train] ${text}\n`);
    }
  }

  /** A line of its own (a failure, a recovery), never mixed into the bar. */
  line(text: string): void {
    this.out.write(`${this.terminal ? '\r\x1b[K' : ''}[ft-train] ${text}\n`);
  }
}
