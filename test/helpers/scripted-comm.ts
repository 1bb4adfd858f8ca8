// A scripted MPI world in one process, for unit tests of the fault-tolerance protocol's decisions
// (src/protocol/) without processes or MPI: N simulated ranks, each with its own Communicator, whose
// collectives meet in memory. It follows ULFM as the protocol relies on it, deterministically:
// - a collective (allreduce, bcast, barrier, allgather(v), alltoallv, split) completes once every member has
//   called it; on a communicator with a dead member or a revoked one it rejects on every caller
//   (ProcFailedError, RevokedError), those already waiting included (a kill may name the only
//   waiting ranks that see it: the others wait on, as ULFM's callers waiting on a live peer do);
// - agree ANDs the flags of the live members once all of them have called it, revoked or not, and
//   rejects alike on all of them with ProcFailedError while the communicator has a dead member (the
//   protocol never acknowledges failures); shrink makes a communicator of the live members;
// - revoke, isRevoked, getFailed and free are local;
// - a dead rank's own calls reject with RankDeadError (not an MPI failure: its task just ends).
// Calls match by order within their class (collectives, agreements, shrinks), as MPI matches them;
// two ranks in different collectives at the same place reject with a mismatch error, and a
// rendezvous that cannot complete rejects after a deadline: no test can hang on it.
import type { CommBuffer, Communicator, ReduceOp } from '../../src/comm/communicator';
import { CommTimeoutError, NotSupportedError, ProcFailedError, RevokedError } from '../../src/comm/errors';
import type { StepRecord } from '../../src/run/records';

/** Open MPI's error classes, for the errors the scripted calls reject with. */
export const MPIX_ERR_PROC_FAILED = 75;
export const MPIX_ERR_REVOKED = 77;

/** The call of a rank the script killed (or that made it after its death): its process is gone. */
export class RankDeadError extends Error {
  override name = 'RankDeadError';
}

/** What a script does to a rank at one of its calls. */
export type ScriptAction =
  /** the rank dies as it makes the call */
  | 'kill'
  /** the call rejects with CommTimeoutError on that rank and the communicator is revoked (the comm thread's deadline) */
  | 'timeout';

type Kind = 'collective' | 'agree' | 'shrink';

interface Arrival {
  worldRank: number;
  index: number;
  input: unknown;
  resolve(value: unknown): void;
  reject(error: Error): void;
}

interface Rendezvous {
  key: string;
  kind: Kind;
  op: string;
  arrivals: Map<number, Arrival>;
  timer: NodeJS.Timeout;
  /** the result of each arrival, in rank order (called once every live member has arrived) */
  complete(arrivals: Arrival[]): unknown[];
}

/** One communicator, shared by the handles of its members. */
class Group {
  revoked = false;
  readonly pending = new Map<string, Rendezvous>();
  private readonly counters = new Map<string, number>();

  constructor(
    readonly id: number,
    readonly members: readonly number[],
  ) {}

  /** the next call of `kind` by `worldRank` on this communicator: its place in the matching order */
  next(kind: Kind, worldRank: number): number {
    const key = `${kind}/${worldRank}`;
    const n = this.counters.get(key) ?? 0;
    this.counters.set(key, n + 1);
    return n;
  }
}

interface Script {
  rank: number;
  op: string;
  nth: number;
  action: ScriptAction;
  /** a kill's: the ranks whose waiting calls meet the death (absent: every rank's) */
  seenBy?: readonly number[];
}

export class ScriptedWorld {
  private readonly dead = new Set<number>();
  private readonly groups: Group[] = [];
  private readonly scripts: Script[] = [];
  private readonly callCounts = new Map<string, number>();
  /** every call made, in order: "rank op" (for tests that check what a rank did) */
  readonly calls: string[] = [];
  /** the communicator of every rank, as MpiSession.world hands it out: comms[r] is world rank r's */
  readonly comms: ScriptedComm[];

  constructor(
    readonly size: number,
    readonly deadlineMs = 3000,
  ) {
    const group = this.group(Array.from({ length: size }, (_, r) => r));
    this.comms = group.members.map((r) => new ScriptedComm(this, group, r));
  }

  isDead(rank: number): boolean {
    return this.dead.has(rank);
  }

  /**
   * World rank `rank` dies now: what waits on it fails (see the top). `seenBy`: only those ranks'
   * waiting collectives meet the death, as in ULFM, where a call waiting on a live peer does not;
   * the other callers wait on until a revoke or their deadline (calls made later reject at once).
   */
  kill(rank: number, seenBy?: readonly number[]): void {
    if (this.dead.has(rank)) return;
    this.dead.add(rank);
    for (const group of this.groups) {
      if (!group.members.includes(rank)) continue;
      for (const rendezvous of [...group.pending.values()]) {
        const own = rendezvous.arrivals.get(rank);
        if (own) {
          rendezvous.arrivals.delete(rank);
          own.reject(new RankDeadError(`rank ${rank} is dead`));
        }
        if (!seenBy) {
          this.progress(group, rendezvous);
          continue;
        }
        for (const seer of rendezvous.kind === 'collective' ? seenBy : []) {
          const arrival = rendezvous.arrivals.get(seer);
          if (!arrival) continue;
          rendezvous.arrivals.delete(seer);
          arrival.reject(new ProcFailedError(`scripted: ${rendezvous.op}: rank ${rank} failed`, MPIX_ERR_PROC_FAILED));
        }
      }
    }
  }

  /** At its `nth` call of `op` (1: the next), rank `rank` meets `action` (a kill: seen by `seenBy` alone, as kill() says). */
  at(rank: number, op: string, action: ScriptAction, nth = 1, seenBy?: readonly number[]): void {
    this.scripts.push({ rank, op, nth: (this.callCounts.get(`${rank} ${op}`) ?? 0) + nth, action, seenBy });
  }

  private group(members: readonly number[]): Group {
    const group = new Group(this.groups.length, members);
    this.groups.push(group);
    return group;
  }

  /** Revokes a communicator: its pending collectives fail on every member (agreements and shrinks go on). */
  revoke(group: Group): void {
    group.revoked = true;
    for (const rendezvous of [...group.pending.values()]) {
      if (rendezvous.kind === 'collective')
        this.settle(
          group,
          rendezvous,
          () => new RevokedError(`scripted: ${rendezvous.op} on revoked communicator ${group.id}`, MPIX_ERR_REVOKED),
        );
    }
  }

  /**
   * One call of `op` (of `kind`) by `comm`'s rank with `input`; settles with what `complete` gives
   * this rank once the call has met its peers' (every call of one rendezvous passes the same `complete`).
   */
  call<T>(comm: ScriptedComm, kind: Kind, op: string, input: unknown, complete: (arrivals: Arrival[]) => unknown[]): Promise<T> {
    const me = comm.worldRank;
    const group = comm.group;
    this.calls.push(`${me} ${op}`);
    const count = (this.callCounts.get(`${me} ${op}`) ?? 0) + 1;
    this.callCounts.set(`${me} ${op}`, count);
    if (comm.freed) return Promise.reject(new Error(`scripted: rank ${me} called ${op} on freed communicator ${group.id}`));
    const script = this.scripts.find((s) => s.rank === me && s.op === op && s.nth === count);
    if (script?.action === 'kill') this.kill(me, script.seenBy);
    if (this.dead.has(me)) return Promise.reject(new RankDeadError(`rank ${me} is dead (its ${op} was never made)`));
    const n = group.next(kind, me);
    if (script?.action === 'timeout') {
      this.revoke(group);
      return Promise.reject(new CommTimeoutError(`scripted: ${op} did not return: a peer is alive but does not take part`, 0));
    }
    if (kind === 'collective') {
      if (group.revoked) return Promise.reject(new RevokedError(`scripted: ${op} on revoked communicator ${group.id}`, MPIX_ERR_REVOKED));
      const gone = group.members.filter((r) => this.dead.has(r));
      if (gone.length > 0)
        return Promise.reject(new ProcFailedError(`scripted: ${op}: rank(s) ${gone.join(', ')} failed`, MPIX_ERR_PROC_FAILED));
    }
    const key = `${kind}#${n}`;
    let rendezvous = group.pending.get(key);
    if (!rendezvous) {
      const created: Rendezvous = {
        key,
        kind,
        op,
        arrivals: new Map(),
        complete,
        timer: setTimeout(() => {
          const missing = group.members.filter((r) => !this.dead.has(r) && !created.arrivals.has(r));
          this.settle(
            group,
            created,
            () =>
              new Error(
                `scripted: ${op} #${n} on communicator ${group.id} [${group.members.join(', ')}] never completed: ` +
                  `rank(s) ${[...created.arrivals.keys()].join(', ')} waited ${this.deadlineMs} ms for rank(s) ${missing.join(', ')}`,
              ),
          );
        }, this.deadlineMs),
      };
      rendezvous = created;
      group.pending.set(key, rendezvous);
    }
    if (rendezvous.op !== op) {
      const theirs = rendezvous.op;
      this.settle(
        group,
        rendezvous,
        () =>
          new Error(`scripted: ranks in different calls at ${kind} #${n} of communicator ${group.id}: ${theirs} and rank ${me}'s ${op}`),
      );
      return Promise.reject(
        new Error(`scripted: rank ${me} called ${op} where its peers called ${theirs} (${kind} #${n} of communicator ${group.id})`),
      );
    }
    const arrived = rendezvous;
    const promise = new Promise<T>((resolve, reject) => {
      arrived.arrivals.set(me, { worldRank: me, index: comm.rank, input, resolve: resolve as (value: unknown) => void, reject });
    });
    this.progress(group, arrived);
    return promise;
  }

  /** Completes or fails `rendezvous` if it can be decided now. */
  private progress(group: Group, rendezvous: Rendezvous): void {
    if (!group.pending.has(rendezvous.key)) return;
    const gone = group.members.filter((r) => this.dead.has(r));
    if (rendezvous.kind === 'collective') {
      if (group.revoked)
        return this.settle(
          group,
          rendezvous,
          () => new RevokedError(`scripted: ${rendezvous.op} on revoked communicator ${group.id}`, MPIX_ERR_REVOKED),
        );
      if (gone.length > 0)
        return this.settle(
          group,
          rendezvous,
          () => new ProcFailedError(`scripted: ${rendezvous.op}: rank(s) ${gone.join(', ')} failed`, MPIX_ERR_PROC_FAILED),
        );
    }
    const live = group.members.filter((r) => !this.dead.has(r));
    if (!live.every((r) => rendezvous.arrivals.has(r))) return;
    if (rendezvous.kind === 'agree' && gone.length > 0) {
      return this.settle(
        group,
        rendezvous,
        () => new ProcFailedError(`scripted: agree: rank(s) ${gone.join(', ')} failed (not acknowledged)`, MPIX_ERR_PROC_FAILED),
      );
    }
    clearTimeout(rendezvous.timer);
    group.pending.delete(rendezvous.key);
    const arrivals = [...rendezvous.arrivals.values()].sort((a, b) => a.index - b.index);
    let results: unknown[];
    try {
      results = rendezvous.complete(arrivals);
    } catch (error) {
      for (const arrival of arrivals) arrival.reject(error as Error);
      return;
    }
    arrivals.forEach((arrival, i) => arrival.resolve(results[i]));
  }

  /** Every caller of `rendezvous` fails with its own `error()`. */
  private settle(group: Group, rendezvous: Rendezvous, error: () => Error): void {
    clearTimeout(rendezvous.timer);
    group.pending.delete(rendezvous.key);
    for (const arrival of rendezvous.arrivals.values()) arrival.reject(error());
  }

  /** A communicator of `members` (shrink, split), its handles by world rank. */
  handles(members: readonly number[]): Map<number, ScriptedComm> {
    const group = this.group(members);
    return new Map(members.map((r) => [r, new ScriptedComm(this, group, r)]));
  }
}

const same = (a: CommBuffer, b: CommBuffer): boolean => a.constructor === b.constructor;

function reduce(buffers: CommBuffer[], op: ReduceOp): CommBuffer {
  const acc = buffers[0].slice();
  for (const buffer of buffers.slice(1)) {
    if (!same(buffer, acc) || buffer.length !== acc.length)
      throw new Error('scripted: allreduce with buffers of different types or lengths');
    for (let i = 0; i < acc.length; ++i) {
      acc[i] = op === 'sum' ? acc[i] + buffer[i] : op === 'max' ? Math.max(acc[i], buffer[i]) : Math.min(acc[i], buffer[i]);
    }
  }
  return acc;
}

/** One rank's handle of a scripted communicator. */
export class ScriptedComm implements Communicator {
  freed = false;

  constructor(
    private readonly world: ScriptedWorld,
    readonly group: Group,
    readonly worldRank: number,
  ) {}

  get rank(): number {
    return this.group.members.indexOf(this.worldRank);
  }

  get size(): number {
    return this.group.members.length;
  }

  get worldRanks(): number[] {
    return [...this.group.members];
  }

  allreduce(buffer: CommBuffer, op: ReduceOp = 'sum'): Promise<void> {
    return this.world.call(this, 'collective', 'allreduce', buffer, (arrivals) => {
      const result = reduce(
        arrivals.map((a) => a.input as CommBuffer),
        op,
      );
      for (const a of arrivals) (a.input as CommBuffer).set(result as never);
      return arrivals.map(() => undefined);
    });
  }

  bcast(buffer: CommBuffer, root: number): Promise<void> {
    return this.world.call(this, 'collective', 'bcast', { buffer, root }, (arrivals) => {
      const inputs = arrivals.map((a) => a.input as { buffer: CommBuffer; root: number });
      if (inputs.some((x) => x.root !== root)) throw new Error('scripted: bcast with different roots');
      const source = inputs[root].buffer;
      for (const { buffer: b } of inputs) {
        if (!same(b, source) || b.length !== source.length)
          throw new Error(`scripted: bcast of ${source.length} elements into a buffer of ${b.length}`);
        if (b !== source) b.set(source as never);
      }
      return arrivals.map(() => undefined);
    });
  }

  barrier(): Promise<void> {
    return this.world.call(this, 'collective', 'barrier', null, (arrivals) => arrivals.map(() => undefined));
  }

  allgather(sendbuf: CommBuffer, recvbuf: CommBuffer): Promise<void> {
    return this.world.call(this, 'collective', 'allgather', { sendbuf, recvbuf }, (arrivals) => {
      const inputs = arrivals.map((a) => a.input as { sendbuf: CommBuffer; recvbuf: CommBuffer });
      const n = inputs[0].sendbuf.length;
      for (const { recvbuf: out } of inputs) {
        if (out.length !== n * inputs.length) throw new Error('scripted: allgather into a buffer of the wrong length');
        inputs.forEach(({ sendbuf: x }, r) => out.set(x as never, r * n));
      }
      return arrivals.map(() => undefined);
    });
  }

  allgatherv(sendbuf: CommBuffer, recvbuf: CommBuffer, counts: ArrayLike<number>): Promise<void> {
    return this.world.call(this, 'collective', 'allgatherv', { sendbuf, recvbuf }, (arrivals) => {
      const inputs = arrivals.map((a) => a.input as { sendbuf: CommBuffer; recvbuf: CommBuffer });
      inputs.forEach(({ sendbuf: x }, r) => {
        if (x.length !== counts[r]) throw new Error(`scripted: allgatherv: rank ${r} sent ${x.length} elements, counts say ${counts[r]}`);
      });
      for (const { recvbuf: out } of inputs) {
        let at = 0;
        for (const { sendbuf: x } of inputs) {
          out.set(x as never, at);
          at += x.length;
        }
      }
      return arrivals.map(() => undefined);
    });
  }

  alltoallv(...[sendbuf, sendCounts, recvbuf, recvCounts, sendDispls, recvDispls]: Parameters<Communicator['alltoallv']>): Promise<void> {
    const packed = (counts: ArrayLike<number>): number[] =>
      Array.from(counts, (_, r) =>
        Array.from(counts)
          .slice(0, r)
          .reduce((a, b) => a + b, 0),
      );
    const input = {
      sendbuf,
      sendCounts: Array.from(sendCounts),
      sendDispls: sendDispls ? Array.from(sendDispls) : packed(sendCounts),
      recvbuf,
      recvCounts: Array.from(recvCounts),
      recvDispls: recvDispls ? Array.from(recvDispls) : packed(recvCounts),
    };
    return this.world.call(this, 'collective', 'alltoallv', input, (arrivals) => {
      const inputs = arrivals.map((a) => a.input as typeof input);
      inputs.forEach((to, d) =>
        inputs.forEach((from, s) => {
          if (from.sendCounts[d] !== to.recvCounts[s])
            throw new Error(
              `scripted: alltoallv: rank ${s} sends ${from.sendCounts[d]} elements to rank ${d}, which expects ${to.recvCounts[s]}`,
            );
          const block = from.sendbuf.subarray(from.sendDispls[d], from.sendDispls[d] + from.sendCounts[d]);
          to.recvbuf.set(block as never, to.recvDispls[s]);
        }),
      );
      return arrivals.map(() => undefined);
    });
  }

  revoke(): Promise<void> {
    this.world.calls.push(`${this.worldRank} revoke`);
    if (this.freed) return Promise.reject(new Error(`scripted: revoke on freed communicator ${this.group.id}`));
    this.world.revoke(this.group);
    return Promise.resolve();
  }

  isRevoked(): Promise<boolean> {
    return Promise.resolve(this.group.revoked);
  }

  shrink(): Promise<Communicator> {
    return this.world.call(this, 'shrink', 'shrink', null, (arrivals) => {
      const handles = this.world.handles(arrivals.map((a) => a.worldRank));
      return arrivals.map((a) => handles.get(a.worldRank));
    });
  }

  split(color: number, key: number): Promise<Communicator | null> {
    return this.world.call(this, 'collective', 'split', { color, key }, (arrivals) => {
      const byColor = new Map<number, Arrival[]>();
      for (const a of arrivals) {
        const { color: c } = a.input as { color: number };
        if (c >= 0) byColor.set(c, [...(byColor.get(c) ?? []), a]);
      }
      const handle = new Map<number, ScriptedComm>();
      for (const part of byColor.values()) {
        const ordered = [...part].sort((a, b) => (a.input as { key: number }).key - (b.input as { key: number }).key || a.index - b.index);
        for (const [r, h] of this.world.handles(ordered.map((a) => a.worldRank))) handle.set(r, h);
      }
      return arrivals.map((a) => handle.get(a.worldRank) ?? null);
    });
  }

  spawn(): Promise<string> {
    return Promise.reject(new NotSupportedError('scripted: spawn is not scripted', 0));
  }

  spawnedUp(): Promise<boolean> {
    return Promise.reject(new NotSupportedError('scripted: spawn is not scripted', 0));
  }

  accept(): Promise<Communicator> {
    return Promise.reject(new NotSupportedError('scripted: spawn is not scripted', 0));
  }

  spawnedReady(): Promise<boolean> {
    return Promise.reject(new NotSupportedError('scripted: spawn is not scripted', 0));
  }

  merge(): Promise<Communicator> {
    return Promise.reject(new NotSupportedError('scripted: spawn is not scripted', 0));
  }

  agree(flag: number): Promise<number> {
    return this.world.call(this, 'agree', 'agree', flag, (arrivals) => {
      const all = arrivals.reduce((acc, a) => acc & (a.input as number), ~0);
      return arrivals.map(() => all);
    });
  }

  getFailed(): Promise<number[]> {
    return Promise.resolve(this.group.members.filter((r) => this.world.isDead(r)));
  }

  free(): Promise<void> {
    if (this.freed) return Promise.reject(new Error(`scripted: communicator ${this.group.id} freed twice by rank ${this.worldRank}`));
    this.freed = true;
    return Promise.resolve();
  }
}

/** The protocol's observer, kept: events, leader calls, log lines. */
export class RecordingObserver {
  readonly steps: StepRecord[] = [];
  readonly events: Record<string, unknown>[] = [];
  readonly leaders: boolean[] = [];
  readonly lines: string[] = [];

  step(record: StepRecord): void {
    this.steps.push(record);
  }

  event(record: Record<string, unknown>): void {
    this.events.push(record);
  }

  leader(isLeader: boolean): void {
    this.leaders.push(isLeader);
  }

  log(message: string): void {
    this.lines.push(message);
  }

  /** The events named `name`, each without the fields `drop` (timings). */
  named(name: string, drop: string[] = ['duration_ms', 'detect_ms']): Record<string, unknown>[] {
    return this.events.filter((e) => e.event === name).map((e) => Object.fromEntries(Object.entries(e).filter(([k]) => !drop.includes(k))));
  }
}

/**
 * Runs `work(r)` for each live rank of `ranks` at once and waits for all of them: each one's result or
 * error, by world rank (a rank's error does not stop the others).
 */
export async function onRanks<T>(
  ranks: readonly number[],
  work: (rank: number) => Promise<T>,
): Promise<Map<number, { value?: T; error?: unknown }>> {
  const settled = await Promise.allSettled(ranks.map((r) => Promise.resolve().then(() => work(r))));
  return new Map(settled.map((s, i) => [ranks[i], s.status === 'fulfilled' ? { value: s.value } : { error: s.reason as unknown }]));
}
