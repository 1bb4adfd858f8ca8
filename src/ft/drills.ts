// Drill points, deterministic fault injection for tests and drills: `--drill rank=R,step=K,phase=P,
// action=A` makes world rank R SIGKILL (kill), SIGSTOP (stop) or SIGTERM (term: a preemption
// notice) itself, or spin its main thread forever (hang: a kernel that never returns), when it
// reaches phase P of step K. A real fault of a real process, at a point that does not depend on
// timing.
import * as fs from 'node:fs';

/** Every point where a run can fail, in the order a step, a recovery, a checkpoint and a run pass them. */
export const phases = [
  'startup', 'resume', 'compute', 'collective', 'redundancy', 'agree', 'update', 'evaluation', 'recovery', 'spawn', 'join', 'rebuild', 'readback',
  'checkpoint-stripe', 'checkpoint-gather', 'checkpoint-commit', 'final-write',
] as const;
export type Phase = (typeof phases)[number];

export const actions = ['kill', 'stop', 'term', 'hang'] as const;
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
    if (value === undefined || rest.length > 0 || fields.has(key)) throw new Error(`--drill expects rank=R,step=K[,phase=P][,action=kill|stop|term|hang], got "${text}"`);
    fields.set(key, value);
  }
  const unknown = [...fields.keys()].filter((k) => !['rank', 'step', 'phase', 'action'].includes(k));
  if (unknown.length > 0) throw new Error(`--drill: unknown field "${unknown[0]}" in "${text}" (rank, step, phase, action)`);
  const integer = (key: string): number => {
    const value = Number(fields.get(key));
    if (!fields.has(key) || !Number.isSafeInteger(value) || value < 0) throw new Error(`--drill: ${key} expects an integer >= 0 in "${text}"`);
    return value;
  };
  const phase = (fields.get('phase') ?? 'compute') as Phase;
  if (!phases.includes(phase)) throw new Error(`--drill: phase expects one of ${phases.join('|')}, got "${phase}"`);
  const action = (fields.get('action') ?? 'kill') as Action;
  if (!actions.includes(action)) throw new Error(`--drill: action expects one of ${actions.join('|')}, got "${action}"`);
  return { rank: integer('rank'), step: integer('step'), phase, action };
}

export class FaultInjector {
  /** `note` is a file that gets one line before the signal (logs may not be flushed by then). */
  constructor(private readonly drills: readonly Drill[], private readonly worldRank: number, private readonly note: string) {}

  /** Injects the fault if a drill names this rank, step and phase. */
  at(step: number, phase: Phase): void {
    const drill = this.drills.find((d) => d.rank === this.worldRank && d.step === step && d.phase === phase);
    if (!drill) return;
    const fault = drill.action === 'hang' ? 'spins its main thread forever' : `sends itself ${signals[drill.action]}`;
    fs.appendFileSync(this.note, `${new Date().toISOString()} drill: rank ${this.worldRank} ${fault} at step ${step}, phase ${phase}\n`);
    if (drill.action === 'hang') for (;;);
    process.kill(process.pid, signals[drill.action]);
  }
}
