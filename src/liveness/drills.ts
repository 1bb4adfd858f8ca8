// Drill points, deterministic fault injection for tests and drills: `--drill rank=R,step=K,phase=P,
// action=A` makes world rank R, when it reaches phase P of step K, SIGKILL (kill), SIGSTOP (stop)
// or SIGTERM (term: a preemption notice) itself, spin its main thread forever (hang: a kernel that
// never returns), lose its whole host (host: kill -9 of every rank of the job there and of the
// runtime daemon that started it), or cut its host off the network (cut: every link of its network
// namespace down, for test hosts such as launch/netns-hosts makes). A real fault of real processes,
// at a point that does not depend on timing.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { rankList, signalRanks } from '../run/pids';

/** Every point where a run can fail, in the order a step, a recovery, a checkpoint and a run pass them. */
export const phases = [
  'startup',
  'kernels',
  'resume',
  'compute',
  'collective',
  'redundancy',
  'agree',
  'update',
  'evaluation',
  'recovery',
  'spawn',
  'join',
  'rebuild',
  'readback',
  'checkpoint-stripe',
  'checkpoint-gather',
  'checkpoint-commit',
  'final-write',
] as const;
export type Phase = (typeof phases)[number];

export const actions = ['kill', 'stop', 'term', 'hang', 'host', 'cut'] as const;
export type Action = (typeof actions)[number];

const signals = { kill: 'SIGKILL', stop: 'SIGSTOP', term: 'SIGTERM' } as const;

export interface Drill {
  rank: number;
  step: number;
  phase: Phase;
  action: Action;
}

/** "rank=R,step=K[,phase=P][,action=A]" (phase defaults to compute, action to kill). */
export function parseDrill(text: string): Drill {
  const fields = new Map<string, string>();
  for (const part of text.split(',')) {
    const [key, value, ...rest] = part.split('=');
    if (value === undefined || rest.length > 0 || fields.has(key))
      throw new Error(`--drill expects rank=R,step=K[,phase=P][,action=kill|stop|term|hang|host|cut], got "${text}"`);
    fields.set(key, value);
  }
  const unknown = [...fields.keys()].filter((k) => !['rank', 'step', 'phase', 'action'].includes(k));
  if (unknown.length > 0) throw new Error(`--drill: unknown field "${unknown[0]}" in "${text}" (rank, step, phase, action)`);
  const integer = (key: string): number => {
    const value = Number(fields.get(key));
    if (!fields.has(key) || !Number.isSafeInteger(value) || value < 0)
      throw new Error(`--drill: ${key} expects an integer >= 0 in "${text}"`);
    return value;
  };
  const phase = (fields.get('phase') ?? 'compute') as Phase;
  if (!phases.includes(phase)) throw new Error(`--drill: phase expects one of ${phases.join('|')}, got "${phase}"`);
  const action = (fields.get('action') ?? 'kill') as Action;
  if (!actions.includes(action)) throw new Error(`--drill: action expects one of ${actions.join('|')}, got "${action}"`);
  return { rank: integer('rank'), step: integer('step'), phase, action };
}

/** What each action does, for the note. */
const faults: Record<Action, string> = {
  kill: 'sends itself SIGKILL',
  stop: 'sends itself SIGSTOP',
  term: 'sends itself SIGTERM',
  hang: 'spins its main thread forever',
  host: 'kills every rank of the job on its host, the runtime daemon and itself',
  cut: 'takes every network link of its host down',
};

/** Every network link of this process's network namespace but loopback. */
function links(): string[] {
  return execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /^\d+: ([^:@]+)/.exec(line)?.[1])
    .filter((name): name is string => name !== undefined && name !== 'lo');
}

export class FaultInjector {
  /**
   * `note` is a file that gets one line before the fault (logs may not be flushed by then);
   * `pidsDir` finds the job's other ranks on this host.
   */
  constructor(
    private readonly drills: readonly Drill[],
    private readonly worldRank: number,
    private readonly note: string,
    private readonly pidsDir: string,
  ) {}

  /** Injects the fault if a drill names this rank, step and phase. */
  at(step: number, phase: Phase): void {
    const drill = this.drills.find((d) => d.rank === this.worldRank && d.step === step && d.phase === phase);
    if (!drill) return;
    fs.appendFileSync(
      this.note,
      `${new Date().toISOString()} drill: rank ${this.worldRank} ${faults[drill.action]} at step ${step}, phase ${phase}\n`,
    );
    switch (drill.action) {
      case 'hang':
        for (;;);
      case 'host':
        signalRanks(
          this.pidsDir,
          rankList(this.pidsDir).filter((rank) => rank !== this.worldRank),
          () => [],
          'SIGKILL',
        );
        process.kill(process.ppid, 'SIGKILL'); // mpirun's daemon on this host (mpirun itself on the first host)
        process.kill(process.pid, 'SIGKILL');
        return;
      case 'cut':
        for (const link of links()) execFileSync('ip', ['link', 'set', 'dev', link, 'down']);
        return;
      default:
        process.kill(process.pid, signals[drill.action]);
    }
  }
}
