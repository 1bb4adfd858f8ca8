// A conversion's progress on stderr: a bar (cli-progress) on a terminal, otherwise a plain line
// every few seconds, so that piped output stays readable.
import { SingleBar } from 'cli-progress';

export class ConversionProgress {
  private readonly bar?: SingleBar;
  private lastLine = 0;

  /** `total` units of `unit` (bytes, rows, images) are to be read. */
  constructor(
    private readonly what: string,
    private readonly total: number,
    private readonly unit: string,
    private readonly everyMs = 3000,
  ) {
    if (process.stderr.isTTY) {
      this.bar = new SingleBar({
        stream: process.stderr,
        format: `[ft-data] ${what} [{bar}] {percentage}% {value}/{total} ${unit} eta {eta_formatted}`,
        etaBuffer: 50,
      });
      this.bar.start(total, 0);
    }
  }

  update(done: number): void {
    if (this.bar) this.bar.update(done);
    else if (Date.now() - this.lastLine >= this.everyMs) {
      this.lastLine = Date.now();
      process.stderr.write(`[ft-data] ${this.what}: ${done}/${this.total} ${this.unit}\n`);
    }
  }

  /** A line of its own (the writer's), never mixed into the bar. */
  line(text: string): void {
    if (this.bar) process.stderr.write('\r\x1b[K');
    process.stderr.write(`[ft-data] ${text}\n`);
  }

  stop(): void {
    this.bar?.stop();
  }
}
