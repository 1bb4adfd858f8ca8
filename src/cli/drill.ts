// launch/drill: a fault drill from outside. Starts `ft-train` under mpirun, follows the run's
// metrics, and when they reach step K sends a real `kill -9` (--kill) or `kill -STOP` (--stop, a
// hang: the survivors declare the rank dead after --hang-timeout and kill it) to the process of
// world rank R (its pid from the run directory). Prints the run directory and a one-line verdict;
// exit code 0 when the job finished with every such rank lost and survived.
import { commandLine, runMain } from './command';
import { parseKill, runDrill, type Kill } from './fault-drill';
import { trainFlag } from './mpirun';

runMain('drill', async () => {
  const args = commandLine(
    'drill',
    '$0 -n N [--kill R@K ...] [--stop R@K ...] -- <ft-train arguments>\n\nRuns ft-train under mpirun and kill -9s (or SIGSTOPs) world rank R once the metrics reach step K.',
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
    .check((a) => {
      if (!Number.isSafeInteger(a.n) || a.n < 1) throw new Error(`-n expects an integer >= 1, got ${a.n}`);
      if (a.kill.length + a.stop.length === 0) throw new Error('give at least one --kill R@K or --stop R@K');
      for (const k of faults(a.kill, a.stop)) {
        if (k.rank >= a.n)
          throw new Error(`--${k.signal === 'SIGSTOP' ? 'stop' : 'kill'} ${k.rank}@${k.step}: there are only ranks 0..${a.n - 1}`);
      }
      if (a._.length === 0) throw new Error('give the ft-train arguments after --');
      if (trainFlag(a._.map(String), 'run-dir') === undefined)
        throw new Error('the ft-train arguments need --run-dir DIR (the drill follows its metrics)');
      return true;
    })
    .parseSync();
  const { runDir, code, sent, summary, passed } = await runDrill(args.n, faults(args.kill, args.stop), args._.map(String));
  const hit =
    sent.map((k) => `rank ${k.rank}@${k.step}${k.signal === 'SIGSTOP' ? ' (stopped)' : ''}`).join(', ') || 'nobody (the run ended first)';
  console.log(`[drill] run directory: ${runDir}`);
  console.log(
    passed
      ? `[drill] PASS: killed ${hit}; ${summary!.world_final} of ${args.n} ranks finished ${summary!.steps} steps, params_sha256 ${summary!.params_sha256.slice(0, 16)}`
      : `[drill] FAIL: killed ${hit}; mpirun exit code ${code}; ${summary ? `${summary.ranks_lost} rank(s) lost per summary.json` : 'no summary.json'}`,
  );
  // ft-train refusing its arguments is bad input here too
  process.exitCode = passed ? 0 : code === 2 && summary === null && sent.length === 0 ? 2 : 1;
});

function faults(kills: string[], stops: string[]): Kill[] {
  return [...kills.map((k) => parseKill(k, 'SIGKILL')), ...stops.map((s) => parseKill(s, 'SIGSTOP'))];
}
