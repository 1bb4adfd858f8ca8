// Learning-rate schedules: a pure function of the step, so a retried or resumed step gets the same
// rate. Spelled on the command line as constant | step:EVERY:GAMMA | cosine, with an optional
// linear warm-up (--warmup-steps W): step s < W runs at lr (s + 1) / W, and the schedule runs over
// the steps after the warm-up as if they were all (step s at s - W of totalSteps - W).

export type LrSchedule = ({ kind: 'constant' } | { kind: 'step'; every: number; gamma: number } | { kind: 'cosine' }) & {
  /** steps of linear warm-up; absent: none */
  warmup?: number;
};

/** The schedule with `steps` of warm-up first (0: as it is, so that its identity is too). */
export function withWarmup(schedule: LrSchedule, steps: number): LrSchedule {
  return steps > 0 ? { ...schedule, warmup: steps } : schedule;
}

export function parseLrSchedule(text: string): LrSchedule {
  const [kind, ...rest] = text.split(':');
  if (kind === 'constant' && rest.length === 0) return { kind };
  if (kind === 'cosine' && rest.length === 0) return { kind };
  if (kind === 'step' && rest.length === 2) {
    const [every, gamma] = rest.map(Number);
    if (Number.isSafeInteger(every) && every >= 1 && gamma > 0 && gamma <= 1) return { kind, every, gamma };
  }
  throw new Error(`--lr-schedule expects constant, cosine or step:EVERY:GAMMA (EVERY >= 1, 0 < GAMMA <= 1), got "${text}"`);
}

/** The rate at `step` of `totalSteps`, from base rate `lr`. */
export function learningRate(schedule: LrSchedule, lr: number, step: number, totalSteps: number): number {
  const warmup = schedule.warmup ?? 0;
  if (step < warmup) return (lr * (step + 1)) / warmup;
  return scheduled(schedule, lr, step - warmup, Math.max(0, totalSteps - warmup));
}

function scheduled(schedule: LrSchedule, lr: number, step: number, totalSteps: number): number {
  switch (schedule.kind) {
    case 'constant':
      return lr;
    case 'step':
      return lr * schedule.gamma ** Math.floor(step / schedule.every);
    case 'cosine':
      return 0.5 * lr * (1 + Math.cos((Math.PI * Math.min(step, totalSteps)) / Math.max(1, totalSteps)));
  }
}
