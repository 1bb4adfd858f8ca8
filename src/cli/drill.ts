// launch/drill: a fault drill from outside. Starts `ft-train` under mpirun, follows the run's
// metrics, and when they reach step K sends a real `kill -9` (--kill) or `kill -STOP` (--stop: a
// hang) to the process of world rank R (its pid from the run directory). Prints the run directory
// and a one-line verdict; exit code 0 when the job finished with every fault survived.
import { commandLine, runMain } from './command';
import { parseKill, runDrill, signalName } from './fault-drill';

runMain('drill', async () => {
  const args = commandLine('drill', '$0 -n N (--kill R@K | --stop R@K) ... -- <ft-train arguments>\n\nRuns ft-train under mpirun and kill -9s (or kill -STOPs) world rank R once the metrics reach step K.\nA stopped rank is declared dead after ft-train\'s --hang-timeout and killed by the survivors.')
    .option('n', { type: 'number', demandOption: true, describe: 'ranks to start' })
    .option('kill', { type: 'string', array: true, default: [] as string[], describe: 'RANK@STEP: kill -9 that rank once step STEP is committed (repeatable)' })
    .option('stop', { type: 'string', array: true, default: [] as string[], describe: 'RANK@STEP: kill -STOP that rank (a hang) once step STEP is committed (repeatable)' })
    .check((a) => {
      if (!Number.isSafeInteger(a.n) || a.n < 1) throw new Error(`-n expects an integer >= 1, got ${a.n}`);
      if (a.kill.length + a.stop.length === 0) throw new Error('give at least one --kill R@K or --stop R@K');
      for (const k of [...a.kill.map((t) => parseKill(t)), ...a.stop.map((t) => parseKill(t, 'SIGSTOP'))]) {
        if (k.rank >= a.n) throw new Error(`--${k.signal === 'SIGKILL' ? 'kill' : 'stop'} ${k.rank}@${k.step}: there are only ranks 0..${a.n - 1}`);
      }
      if (a._.length === 0) throw new Error('give the ft-train arguments after --');
      return true;
    })
    .parseSync();
  const faults = [...args.kill.map((t) => parseKill(t)), ...args.stop.map((t) => parseKill(t, 'SIGSTOP'))];
  const { runDir, code, sent, summary, passed } = await runDrill(args.n, faults, args._.map(String));
  const killed = sent.map((k) => `${signalName(k)} of rank ${k.rank}@${k.step}`).join(', ') || 'no fault (the run ended first)';
  console.log(`[drill] run directory: ${runDir}`);
  console.log(passed
    ? `[drill] PASS: ${killed}; ${summary!.world_final} of ${args.n} ranks finished ${summary!.steps} steps, params_sha256 ${summary!.params_sha256.slice(0, 16)}`
    : `[drill] FAIL: ${killed}; mpirun exit code ${code}; ${summary ? `${summary.ranks_lost} rank(s) lost per summary.json` : 'no summary.json'}`);
  process.exitCode = passed ? 0 : 1;
});
