// The launcher's watch for ranks stopped for good (SIGSTOP, a debugger left attached). A stopped
// rank is hung: the others' failure detector declares it dead within --hang-timeout T and they kill
// it. Where no rank is left to do so (every rank of the job stopped, or the last one as a newcomer
// joins), nothing inside the job can end it and mpirun would wait for good; the launcher (ft-run,
// launch/drill), outside it, kills a rank of its job on this host that has stayed stopped,
// unscheduled, for longer than the job's ranks take to find one (frozenRankMs). A rank stopped
// and continued in turn (launch/drill --slow) is scheduled between its stops and never counts;
// nor does a stop that the launcher itself was stopped through (a suspended job).
import { rankList, signalRanks, stoppedLook } from '../run/pids';

/** Longer than this between two looks: the launcher itself did not run, and what it saw before counts no more. */
const lookGapMs = 1000;

export class FrozenRanks {
  /** each rank found stopped: its look then (stoppedLook), and since when */
  private readonly stopped = new Map<number, { look: string; since: number }>();
  private lastLook = -Infinity;

  constructor(
    private readonly pidsDir: string,
    /** the job's marks in its ranks' environment, if it has any (a pid file left by an earlier job names no live rank anyway) */
    private readonly marks: readonly string[],
    /** how long a rank must stay stopped, unscheduled, to count as hung */
    readonly boundMs: number,
  ) {}

  /** One look (see look) that kills the ranks stopped for good for boundMs; the line that says so, or null. */
  killHung(now: number): string | null {
    const hung = signalRanks(this.pidsDir, this.look(now), () => this.marks, 'SIGKILL');
    return hung.length > 0
      ? `rank(s) ${hung.join(', ')} stopped (SIGSTOP? a debugger?) and not scheduled once for ${this.boundMs / 1000} s, past the job's own deadlines: killed them as hung`
      : null;
  }

  /** One look at the job's ranks on this host, at `now` (ms); the ranks stopped for good for boundMs. */
  look(now: number): number[] {
    if (now - this.lastLook > lookGapMs) this.stopped.clear();
    this.lastLook = now;
    const hung: number[] = [];
    for (const rank of rankList(this.pidsDir)) {
      const look = stoppedLook(this.pidsDir, rank, this.marks);
      if (look === null) {
        this.stopped.delete(rank);
        continue;
      }
      const seen = this.stopped.get(rank);
      if (seen?.look !== look) this.stopped.set(rank, { look, since: now });
      else if (now - seen.since >= this.boundMs) hung.push(rank);
    }
    return hung;
  }
}
