// Deterministic fault injection for tests and drills: `--drill rank=R,step=K,phase=P` makes world
// rank R SIGKILL itself when it reaches phase P of step K (phase recovery: when it enters a
// recovery during step K). A real kill -9 of a real process, at a point that does not depend on timing.
import * as fs from 'node:fs';

export const phases = ['compute', 'collective', 'agree', 'update', 'recovery'] as const;
export type Phase = (typeof phases)[number];

export interface Drill {
  rank: number;
  step: number;
  phase: Phase;
}

/** "rank=R,step=K[,phase=P]" (phase defaults to compute). */
export function parseDrill(text: string): Drill {
  const fields = new Map<string, string>();
  for (const part of text.split(',')) {
    const [key, value, ...rest] = part.split('=');
    if (value === undefined || rest.length > 0 || fields.has(key)) throw new Error(`--drill expects rank=R,step=K[,phase=P], got "${text}"`);
    fields.set(key, value);
  }
  const unknown = [...fields.keys()].filter((k) => !['rank', 'step', 'phase'].includes(k));
  if (unknown.length > 0) throw new Error(`--drill: unknown field "${unknown[0]}" in "${text}" (rank, step, phase)`);
  const integer = (key: string): number => {
    const value = Number(fields.get(key));
    if (!fields.has(key) || !Number.isSafeInteger(value) || value < 0) throw new Error(`--drill: ${key} expects an integer >= 0 in "${text}"`);
    return value;
  };
  const phase = (fields.get('phase') ?? 'compute') as Phase;
  if (!phases.includes(phase)) throw new Error(`--drill: phase expects one of ${phases.join('|')}, got "${phase}"`);
  return { rank: integer('rank'), step: integer('step'), phase };
}

export class FaultInjector {
  /** `note` is a file that gets one line before the kill (logs may not be flushed by then). */
  constructor(private readonly drills: readonly Drill[], private readonly worldRank: number, private readonly note: string) {}

  /** Kills this process if a drill names this rank, step and phase. */
  at(step: number, phase: Phase): void {
    if (this.drills.some((d) => d.rank === this.worldRank && d.step === step && d.phase === phase)) {
      fs.appendFileSync(this.note, `${new Date().toISOString()} drill: rank ${this.worldRank} SIGKILLs itself at step ${step}, phase ${phase}\n`);
      process.kill(process.pid, 'SIGKILL');
    }
  }
}
