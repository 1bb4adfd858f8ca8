// A chaos drill from outside: a kill -9 of a random working rank (the leader included) every
// period, for as long as the job runs. The working ranks are followed in the run's events (the
// start's working world, less each repair's lost ranks, plus each join's but those that join as
// spares), so a rank spawned to replace a lost one is a target like the others. A kill falls due
// one period after the first committed step, then one period after the last kill, and waits
// while a recovery is under way (until a step has committed on as many working ranks as the events
// name, and no spawned rank is still on its way): each kill meets a job that has recovered from
// the one before. The last working rank is never killed, and nothing is killed once the last step
// has committed (the start event names the steps): the job is then ending, and a kill there, after
// its results are written, would not be a failure of the run.
import * as path from 'node:path';
import { stream } from '../base/random';
import { runFiles } from '../run/files';
import { JsonlFollower } from '../run/follower';
import type { EventRecord, StepRecord } from '../run/records';
import type { Kill } from './fault-drill';

export interface ChaosPlan {
  /** ms between kills */
  everyMs: number;
  /** picks the ranks (the same seed, the same choices among the same working ranks) */
  seed: number;
}

export class ChaosKills {
  private readonly events: JsonlFollower<EventRecord>;
  private readonly random: () => number;
  private readonly working = new Set<number>();
  /** ranks spawned and not yet joined */
  private readonly coming = new Set<number>();
  private started = false;
  /** the run's last step (the start event's steps less one) */
  private lastStep = Infinity;
  /** the step of the last change of the working ranks: a recovery is over once a later step commits on them */
  private changedAt = -1;
  private due?: number;
  readonly sent: Kill[] = [];

  /** `send` signals a kill's rank, recording its pid and time or the error (fault-drill's sendKill) */
  constructor(
    private readonly plan: ChaosPlan,
    runDir: string,
    private readonly send: (kill: Kill) => void,
  ) {
    this.events = new JsonlFollower<EventRecord>(path.join(runDir, runFiles.events));
    this.random = stream(plan.seed);
  }

  /** Called as the metrics advance (`last`: the last committed step's record): sends the kill that is due, unless a recovery is under way. */
  poll(last: StepRecord | undefined): void {
    for (const event of this.events.read()) this.follow(event);
    if (!this.started || last === undefined) return;
    const now = Date.now();
    this.due ??= now + this.plan.everyMs;
    const { step, world } = last;
    if (
      now < this.due ||
      step >= this.lastStep ||
      step <= this.changedAt ||
      world !== this.working.size ||
      world < 2 ||
      this.coming.size > 0
    )
      return;
    const ranks = [...this.working].sort((a, b) => a - b);
    const rank = ranks[Math.floor(this.random() * ranks.length)];
    const kill: Kill = { rank, step, signal: 'SIGKILL' };
    this.send(kill);
    this.sent.push(kill);
    this.working.delete(rank);
    this.changedAt = step;
    // from the kill's own time, which the send takes after reading the pid file: a period apart as recorded
    this.due = (kill.time ?? Date.now()) + this.plan.everyMs;
  }

  private follow(event: EventRecord): void {
    if (event.event === 'start' && !this.started) {
      this.started = true;
      if (typeof event.steps === 'number') this.lastStep = event.steps - 1;
      for (let rank = 0; rank < (event.world as number); ++rank) this.working.add(rank);
    } else if (event.event === 'revoke+shrink') {
      for (const rank of event.lost as number[]) this.working.delete(rank);
      this.changedAt = Math.max(this.changedAt, event.step ?? -1);
      this.coming.clear(); // a recovery gives up the ranks still on their way (and spawns anew)
    } else if (event.event === 'spawn') {
      for (const rank of event.ranks as number[]) this.coming.add(rank);
    } else if (event.event === 'spawn-lost') {
      this.coming.clear();
    } else if (event.event === 'join') {
      const spares = (event.spares as number[] | undefined) ?? [];
      for (const rank of event.ranks as number[]) {
        if (!spares.includes(rank)) this.working.add(rank);
        this.coming.delete(rank);
      }
      this.changedAt = Math.max(this.changedAt, event.step ?? -1);
    }
  }

  close(): void {
    this.events.close();
  }
}
