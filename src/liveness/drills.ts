// Drill points, deterministic fault injection for tests and drills: `--drill rank=R,step=K,phase=P,
// action=A` makes world rank R, when it reaches phase P of step K, SIGKILL (kill), SIGSTOP (stop)
// or SIGTERM (term: a preemption notice) itself, spin its main thread forever (hang: a kernel that
// never returns), lose its whole host (host: kill -9 of every rank of the job there and of the
// runtime daemon that started it, and under Slurm of the node's slurmd and slurmstepd), or cut its host off the network (cut: every link of its network
// namespace down, for test hosts such as launch/netns-hosts makes). A real fault of real processes,
// at a point that does not depend on timing. Silent data corruption is drilled too: flip flips one
// bit, once, of what the phase holds (compute: a float of a shard's gradient; collective: of the
// sum received; update: of the parameters), corrupt does so at every step from then on (a faulty
// core); the float and the bit come from the seed, so a drill repeats exactly. A rank is slowed
// too: slow,factor=F makes its compute F times slower from step K on (it sleeps F-1 times what each
// shard took, awake for the watchdog), and factor=1 ends that.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { hashKeys } from '../base/random';
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
  'verify',
  'update',
  'rebalance',
  'evaluation',
  'recovery',
  'repair',
  'spawn',
  'spawning',
  'woken',
  'ready',
  'accept',
  'admit',
  'join',
  'copies',
  'rebuild',
  'readback',
  'checkpoint-stripe',
  'checkpoint-gather',
  'checkpoint-commit',
  'final-write',
] as const;
export type Phase = (typeof phases)[number];

export const actions = ['kill', 'stop', 'term', 'hang', 'host', 'cut', 'flip', 'corrupt', 'slow'] as const;
export type Action = (typeof actions)[number];

/** The phases whose data a flip or corrupt drill changes. */
export const corruptible = ['compute', 'collective', 'update'] as const;
type Corruptible = (typeof corruptible)[number];
const corrupting = (action: Action): boolean => action === 'flip' || action === 'corrupt';

/** A bit to flip: of float `index`, bit `bit` (16..28: high mantissa and low exponent, so the value changes but stays finite). */
export interface BitFlip {
  index: number;
  bit: number;
}

/** Flips `flip` in `data` (its float `index`, bit `bit`). */
export function applyFlip(data: Float32Array, flip: BitFlip): void {
  const bits = new Uint32Array(data.buffer, data.byteOffset + 4 * flip.index, 1);
  bits[0] ^= 1 << flip.bit;
}

const signals = { kill: 'SIGKILL', stop: 'SIGSTOP', term: 'SIGTERM' } as const;

/** What an update-phase flip changes: the parameters (default), or the optimizer state (the replicated slots, or this rank's chunk). */
export type FlipTarget = 'params' | 'state';

export interface Drill {
  rank: number;
  step: number;
  phase: Phase;
  action: Action;
  /** flip and corrupt at update: what they change */
  target?: FlipTarget;
  /** slow: how many times slower the rank computes from this step on (1: as fast as it can) */
  factor?: number;
}

/** "rank=R,step=K[,phase=P][,action=A][,target=T][,factor=F]" (phase defaults to compute, action to kill). */
export function parseDrill(text: string): Drill {
  const fields = new Map<string, string>();
  for (const part of text.split(',')) {
    const [key, value, ...rest] = part.split('=');
    if (value === undefined || rest.length > 0 || fields.has(key))
      throw new Error(`--drill expects rank=R,step=K[,phase=P][,action=${actions.join('|')}][,target=T][,factor=F], got "${text}"`);
    fields.set(key, value);
  }
  const unknown = [...fields.keys()].filter((k) => !['rank', 'step', 'phase', 'action', 'target', 'factor'].includes(k));
  if (unknown.length > 0)
    throw new Error(`--drill: unknown field "${unknown[0]}" in "${text}" (rank, step, phase, action, target, factor)`);
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
  if (corrupting(action) && !(corruptible as readonly string[]).includes(phase))
    throw new Error(`--drill: action ${action} needs phase ${corruptible.join('|')}, got "${phase}"`);
  const target = fields.get('target');
  if (target !== undefined && !(corrupting(action) && phase === 'update' && (target === 'params' || target === 'state')))
    throw new Error(`--drill: target expects params|state, with action flip|corrupt at phase update, in "${text}"`);
  const factor = fields.get('factor');
  if ((action === 'slow') !== (factor !== undefined))
    throw new Error(`--drill: action slow takes factor=F (and only it does), in "${text}"`);
  if (action === 'slow' && phase !== 'compute') throw new Error(`--drill: action slow applies at phase compute, got "${phase}"`);
  if (factor !== undefined && !(Number(factor) >= 1 && Number(factor) <= 1000))
    throw new Error(`--drill: factor expects a number in [1, 1000], got "${factor}" in "${text}"`);
  return {
    rank: integer('rank'),
    step: integer('step'),
    phase,
    action,
    ...(target ? { target: target as FlipTarget } : {}),
    ...(factor !== undefined ? { factor: Number(factor) } : {}),
  };
}

/** What each action does, for the note. */
const faults: Record<Action, string> = {
  kill: 'sends itself SIGKILL',
  stop: 'sends itself SIGSTOP',
  term: 'sends itself SIGTERM',
  hang: 'spins its main thread forever',
  host: "kills every rank of the job on its host, the runtime daemon (and under Slurm the node's slurmd) and itself",
  cut: 'takes every network link of its host down',
  flip: 'flips a bit',
  corrupt: 'flips a bit (a faulty core, from now on)',
  slow: 'computes slower',
};

/** What a flip changes in each phase, for the note. */
const flipped: Record<Corruptible, string> = {
  compute: "of shard {salt}'s gradient",
  collective: 'of the sum it received',
  update: 'of its {target}',
};

/** The pids of slurmd and slurmstepd on this host: those in this process's network namespace (test hosts share one machine). */
function slurmDaemonsHere(): number[] {
  const netOf = (pid: string) => {
    try {
      return fs.readlinkSync(`/proc/${pid}/ns/net`);
    } catch {
      return undefined;
    }
  };
  const here = netOf('self');
  return fs
    .readdirSync('/proc')
    .filter((pid) => /^\d+$/.test(pid))
    .filter((pid) => {
      try {
        return ['slurmd', 'slurmstepd'].includes(fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()) && netOf(pid) === here;
      } catch {
        return false;
      }
    })
    .map(Number);
}

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
    /** the run's seed: which float and bit a flip changes */
    private readonly seed: number,
  ) {}

  /** flip drills already done (a flip happens once, even in a retried or replayed step) */
  private readonly done = new Set<Drill>();

  /**
   * The bit a flip or corrupt drill changes now in what `phase` holds at `step`: `length` floats
   * (the first `length` of the data), `salt` telling apart what the phase holds several of (the
   * shard of a gradient), `target` what an update-phase drill names; undefined when no such drill
   * applies. Called by the code that holds the data.
   */
  flipAt(step: number, phase: Corruptible, length: number, salt = 0, target: FlipTarget = 'params'): BitFlip | undefined {
    const drill = this.drills.find(
      (d) =>
        d.rank === this.worldRank &&
        d.phase === phase &&
        (d.target ?? 'params') === target &&
        ((d.action === 'flip' && d.step === step && !this.done.has(d)) || (d.action === 'corrupt' && step >= d.step)),
    );
    if (!drill || length === 0) return undefined;
    if (drill.action === 'flip') this.done.add(drill);
    const h = hashKeys(this.seed, this.worldRank, step, salt);
    const flip = { index: h % length, bit: 16 + (hashKeys(h) % 13) };
    const what = flipped[phase].replace('{salt}', String(salt)).replace('{target}', target === 'state' ? 'optimizer state' : 'parameters');
    this.noteFired(step, phase, faults[drill.action], `: bit ${flip.bit} of float ${flip.index} ${what}`);
    return flip;
  }

  /** How many times slower this rank computes at `step`: the factor of its latest slow drill up to then (1: none). */
  slowFactor(step: number): number {
    const latest = this.drills
      .filter((d) => d.rank === this.worldRank && d.action === 'slow' && d.step <= step)
      .reduce<Drill | undefined>((last, d) => (last === undefined || d.step >= last.step ? d : last), undefined);
    return latest?.factor ?? 1;
  }

  /** Injects the fault if a drill names this rank, step and phase (flip and corrupt drills: see flipAt). */
  at(step: number, phase: Phase): void {
    const drill = this.drills.find((d) => d.rank === this.worldRank && d.step === step && d.phase === phase && !corrupting(d.action));
    if (!drill) return;
    if (drill.action === 'slow') {
      this.noteFired(step, phase, `computes ${drill.factor} times slower from here on`);
      return;
    }
    this.noteFired(step, phase, faults[drill.action]);
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
        // under Slurm the node's own daemons go too (slurmd, and the step's slurmstepd): a lost node
        if (process.env.SLURM_JOB_ID !== undefined) for (const pid of slurmDaemonsHere()) process.kill(pid, 'SIGKILL');
        process.kill(process.ppid, 'SIGKILL'); // mpirun's daemon on this host (mpirun itself on the first host)
        process.kill(process.pid, 'SIGKILL');
        return;
      case 'cut':
        for (const link of links()) execFileSync('ip', ['link', 'set', 'dev', link, 'down']);
        return;
      case 'kill':
      case 'stop':
      case 'term':
        process.kill(process.pid, signals[drill.action]);
    }
  }

  /** The note's line for a drill that fires now (firedDrill reads it back). */
  private noteFired(step: number, phase: Phase, what: string, detail = ''): void {
    fs.appendFileSync(
      this.note,
      `${new Date().toISOString()} drill: rank ${this.worldRank} ${what} at step ${step}, phase ${phase}${detail}\n`,
    );
  }
}

/** Where a drill fires: its rank, step and phase. */
export type DrillPoint = Pick<Drill, 'rank' | 'step' | 'phase'>;

/** `drill` as --drill takes it. */
export function drillText(drill: Drill): string {
  const { rank, step, phase, action, target, factor } = drill;
  return [`rank=${rank}`, `step=${step}`, `phase=${phase}`, `action=${action}`]
    .concat(target !== undefined ? [`target=${target}`] : [], factor !== undefined ? [`factor=${factor}`] : [])
    .join(',');
}

/**
 * The drill points that the notes in the logs under `logsDir` say fired, reading each log from
 * byte `from.get(name)` on (from its start where absent).
 */
export function firedPoints(logsDir: string, from: ReadonlyMap<string, number> = new Map()): DrillPoint[] {
  if (!fs.existsSync(logsDir)) return [];
  return fs
    .readdirSync(logsDir)
    .sort()
    .flatMap((name) =>
      fs
        .readFileSync(path.join(logsDir, name))
        .subarray(from.get(name) ?? 0)
        .toString('utf8')
        .split('\n')
        .map(firedDrill)
        .filter((point): point is DrillPoint => point !== undefined),
    );
}

/** The drills of which `fired` holds no firing (a corrupt drill's is at its step or any later one). */
export function unfired(drills: readonly Drill[], fired: readonly DrillPoint[]): Drill[] {
  return drills.filter(
    (drill) =>
      !fired.some(
        (point) =>
          point.rank === drill.rank &&
          point.phase === drill.phase &&
          (drill.action === 'corrupt' ? point.step >= drill.step : point.step === drill.step),
      ),
  );
}

/**
 * The drill point a note line says fired (FaultInjector writes it into the rank's log before the
 * fault), or undefined for any other line: how ft-run leaves the drills that fired out of a restart.
 */
export function firedDrill(line: string): DrillPoint | undefined {
  const fired = /^\S+ drill: rank (\d+) .* at step (\d+), phase ([a-z-]+)(?::|$)/.exec(line);
  if (!fired || !(phases as readonly string[]).includes(fired[3])) return undefined;
  return { rank: Number(fired[1]), step: Number(fired[2]), phase: fired[3] as Phase };
}
