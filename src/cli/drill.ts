// launch/drill: a fault drill from outside. Starts `ft-train` under mpirun, follows the run's
// metrics, and when they reach step K sends a real `kill -9` (--kill) or `kill -STOP` (--stop, a
// hang: the survivors declare the rank dead after --hang-timeout and kill it) to the process of
// world rank R (its pid from the run directory). --flip and --corrupt drill silent data corruption:
// a bit flipped in what rank R holds at step K (once, or at every step from K on: a faulty core),
// injected inside the rank at that point (ft-train's --drill action=flip|corrupt), since no signal
// can flip a chosen bit of another process. --slow slows rank R from step K on, by SIGSTOP/SIGCONT
// duty cycling: a real slow process, for --rebalance to find. --chaos S kill -9s a random working
// rank every S seconds for as long as the job runs (see chaos.ts). Prints the run directory and a
// one-line verdict; exit code 0 when the job finished with every killed rank lost, and every
// corrupting rank that a check must catch evicted.
import { commandLine, runMain } from './command';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { corruptible } from '../liveness/drills';
import { runFiles } from '../run/files';
import { readLines, type Json } from '../run/reader';
import { parseKill, parseSlow, runDrill, type Kill } from './fault-drill';
import { trainFlag } from './mpirun';

runMain('drill', async () => {
  const args = commandLine(
    'drill',
    '$0 -n N [--kill R@K ...] [--stop R@K ...] [--slow R@K:F ...] [--flip R@K[:PHASE] ...] [--corrupt R@K[:PHASE] ...] [--chaos S] -- <ft-train arguments>\n\nRuns ft-train under mpirun and kill -9s (or SIGSTOPs, or slows) world rank R once the metrics reach step K, or has it flip a bit at step K, or kill -9s a random working rank every S seconds.',
  )
    .option('n', { type: 'number', demandOption: true, describe: 'ranks to start' })
    .option('kill', {
      type: 'string',
      array: true,
      default: [] as string[],
      describe: 'RANK@STEP: kill -9 that rank once step STEP is committed (repeatable)',
    })
    .option('stop', {
      type: 'string',
      array: true,
      default: [] as string[],
      describe: 'RANK@STEP: kill -STOP that rank once step STEP is committed (repeatable)',
    })
    .option('slow', {
      type: 'string',
      array: true,
      default: [] as string[],
      describe:
        'RANK@STEP:F: from step STEP on, that rank runs 1/F of every --slow-period (SIGSTOP, then SIGCONT): F times slower; F = 1 ends it (repeatable)',
    })
    .option('slow-period', { type: 'number', default: 20, describe: 'ms: the duty cycle of --slow' })
    .option('flip', {
      type: 'string',
      array: true,
      default: [] as string[],
      describe: `RANK@STEP[:PHASE]: that rank flips one bit, once, at step STEP of what PHASE holds (${corruptible.join('|')}: a gradient, the sum received, the parameters; default update) (repeatable)`,
    })
    .option('corrupt', {
      type: 'string',
      array: true,
      default: [] as string[],
      describe: `RANK@STEP[:PHASE]: the same at every step from STEP on, a faulty core (default phase compute) (repeatable)`,
    })
    .option('chaos', {
      type: 'number',
      describe:
        'seconds: kill -9 a random working rank (the leader included) every S seconds, from one period after the first step, each once the job has recovered from the last',
    })
    .option('chaos-seed', { type: 'number', default: 1, describe: 'picks the ranks --chaos kills' })
    .check((a) => {
      if (!Number.isSafeInteger(a.n) || a.n < 1) throw new Error(`-n expects an integer >= 1, got ${a.n}`);
      if (a.kill.length + a.stop.length + a.slow.length + a.flip.length + a.corrupt.length === 0 && a.chaos === undefined)
        throw new Error('give at least one --kill R@K, --stop R@K, --slow R@K:F, --flip R@K, --corrupt R@K or --chaos S');
      if (a.chaos !== undefined && !(a.chaos >= 0.1 && a.chaos <= 86_400))
        throw new Error(`--chaos expects seconds in [0.1, 86400], got ${a.chaos}`);
      if (!Number.isSafeInteger(a['chaos-seed'])) throw new Error(`--chaos-seed expects an integer, got ${a['chaos-seed']}`);
      if (!(a['slow-period'] >= 2 && a['slow-period'] <= 10_000))
        throw new Error(`--slow-period expects ms in [2, 10000], got ${a['slow-period']}`);
      for (const s of a.slow.map(parseSlow))
        if (s.rank >= a.n) throw new Error(`--slow ${s.rank}@${s.step}: there are only ranks 0..${a.n - 1}`);
      for (const k of faults(a.kill, a.stop)) {
        if (k.rank >= a.n)
          throw new Error(`--${k.signal === 'SIGSTOP' ? 'stop' : 'kill'} ${k.rank}@${k.step}: there are only ranks 0..${a.n - 1}`);
      }
      for (const c of corruptions(a.flip, a.corrupt))
        if (c.rank >= a.n) throw new Error(`--${c.action} ${c.rank}@${c.step}: there are only ranks 0..${a.n - 1}`);
      if (a._.length === 0) throw new Error('give the ft-train arguments after --');
      if (trainFlag(a._.map(String), 'run-dir') === undefined)
        throw new Error('the ft-train arguments need --run-dir DIR (the drill follows its metrics)');
      return true;
    })
    .parseSync();
  const flips = corruptions(args.flip, args.corrupt);
  const drills = flips.flatMap((c) => ['--drill', `rank=${c.rank},step=${c.step},phase=${c.phase},action=${c.action}`]);
  const kills = faults(args.kill, args.stop);
  const { runDir, code, sent, chaos, slowed, summary, passed } = await runDrill(
    args.n,
    kills,
    [...args._.map(String), ...drills],
    args.slow.map(parseSlow),
    args['slow-period'],
    args.chaos === undefined ? undefined : { everyMs: args.chaos * 1000, seed: args['chaos-seed'] },
  );
  const lost = new Set(summary?.failures.flatMap((f) => f.lost));
  const events = runEvents(runDir);
  const named = namedForCorruption(events);
  // a one-off flip of a gradient is caught only where the check recomputes it: the others must be
  const missed = flips.filter((c) => !lost.has(c.rank) && (c.action === 'corrupt' || c.phase !== 'compute'));
  const hit = [
    ...sent.map((k) => `killed rank ${k.rank}@${k.step}${k.signal === 'SIGSTOP' ? ' (stopped)' : ''}`),
    ...(args.chaos !== undefined ? [`${chaos.length} chaos kill(s), one every ${args.chaos} s`] : []),
    ...slowed.map((s) => (s.factor > 1 ? `slowed rank ${s.rank}@${s.step} ${s.factor}x` : `rank ${s.rank} at full speed @${s.step}`)),
    ...(slowed.length > 0 ? [`${events.filter((e) => e.event === 'rebalance').length} rebalance(s)`] : []),
    ...flips.map(
      (c) =>
        `${c.action} of rank ${c.rank}@${c.step} ${c.phase} ${!named.has(c.rank) ? 'not caught' : lost.has(c.rank) ? 'caught, rank evicted' : 'caught'}`,
    ),
  ];
  const what = hit.join(', ') || (kills.length > 0 ? 'killed nobody (the run ended first)' : 'nothing');
  console.log(`[drill] run directory: ${runDir}`);
  console.log(
    passed && missed.length === 0
      ? `[drill] PASS: ${what}; ${summary!.world_final} of ${args.n} ranks finished ${summary!.steps} steps, params_sha256 ${summary!.params_sha256.slice(0, 16)}`
      : `[drill] FAIL: ${what}; mpirun exit code ${code}; ${summary ? `${summary.ranks_lost} rank(s) lost per summary.json` : 'no summary.json'}`,
  );
  // ft-train refusing its arguments is bad input here too
  process.exitCode = passed && missed.length === 0 ? 0 : code === 2 && summary === null && sent.length + chaos.length === 0 ? 2 : 1;
});

/** The run's events (none where ft-train wrote no run directory). */
function runEvents(runDir: string): Json[] {
  const file = path.join(runDir, runFiles.events);
  return fs.existsSync(file) ? readLines(file).map(({ value }) => value) : [];
}

/** The ranks the run's corruption events name (suspects, or the ranks nobody could tell apart). */
function namedForCorruption(events: Json[]): Set<number> {
  return new Set(events.filter((e) => e.event === 'corruption' && Array.isArray(e.ranks)).flatMap((e) => e.ranks as number[]));
}

interface Corruption {
  rank: number;
  step: number;
  phase: string;
  action: 'flip' | 'corrupt';
}

/** --flip and --corrupt's "R@K[:PHASE]". */
function corruptions(flips: string[], corrupts: string[]): Corruption[] {
  const parse = (text: string, action: Corruption['action']): Corruption => {
    const match = /^(\d+)@(\d+)(?::(\w+))?$/.exec(text);
    const phase = match?.[3] ?? (action === 'flip' ? 'update' : 'compute');
    if (!match || !(corruptible as readonly string[]).includes(phase))
      throw new Error(`--${action} expects RANK@STEP[:PHASE] with PHASE ${corruptible.join('|')} (e.g. 2@30:update), got "${text}"`);
    return { rank: Number(match[1]), step: Number(match[2]), phase, action };
  };
  return [...flips.map((f) => parse(f, 'flip')), ...corrupts.map((c) => parse(c, 'corrupt'))];
}

function faults(kills: string[], stops: string[]): Kill[] {
  return [...kills.map((k) => parseKill(k, 'SIGKILL')), ...stops.map((s) => parseKill(s, 'SIGSTOP'))];
}
