// launch/drill: a fault drill from outside. Starts `ft-train` under mpirun, follows the run's
// metrics, and when they reach step K sends a real `kill -9` to the process of world rank R (its
// pid from the run directory). Prints the run directory and a one-line verdict; exit code 0 when
// the job finished with every kill survived.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeAtomically } from '../atomic-write';
import { commandLine, runMain } from './command';
import { mpirunCommand } from './mpirun';
import { lastRecord, runFiles } from './run-dir';

interface Kill {
  rank: number;
  step: number;
  pid?: number;
  time?: number;
}

function parseKill(text: string): Kill {
  const match = /^(\d+)@(\d+)$/.exec(text);
  if (!match) throw new Error(`--kill expects RANK@STEP (e.g. 2@30), got "${text}"`);
  return { rank: Number(match[1]), step: Number(match[2]) };
}

runMain('drill', async () => {
  const args = commandLine('drill', '$0 -n N --kill R@K [--kill R@K ...] -- <ft-train arguments>\n\nRuns ft-train under mpirun and kill -9s world rank R once the metrics reach step K.')
    .option('n', { type: 'number', demandOption: true, describe: 'ranks to start' })
    .option('kill', { type: 'string', array: true, demandOption: true, describe: 'RANK@STEP: kill -9 that rank once step STEP is committed (repeatable)' })
    .check((a) => {
      if (!Number.isSafeInteger(a.n) || a.n < 1) throw new Error(`-n expects an integer >= 1, got ${a.n}`);
      for (const k of a.kill.map(parseKill)) if (k.rank >= a.n) throw new Error(`--kill ${k.rank}@${k.step}: there are only ranks 0..${a.n - 1}`);
      if (a._.length === 0) throw new Error('give the ft-train arguments after --');
      return true;
    })
    .parseSync();
  const trainArgs = args._.map(String);
  const at = trainArgs.indexOf('--run-dir');
  if (at < 0 || at + 1 >= trainArgs.length) throw new Error('the ft-train arguments need --run-dir DIR (the drill follows its metrics)');
  const runDir = trainArgs[at + 1];
  const kills = args.kill.map(parseKill);
  const { command, args: mpirunArgs, env } = mpirunCommand({ ranks: args.n, program: [process.execPath, path.join(__dirname, '..', '..', '..', 'launch', 'ft-train.js'), ...trainArgs] });
  const job = spawn(command, mpirunArgs, { env, stdio: 'inherit' });
  const exited = new Promise<number>((resolve) => job.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1))));

  const metrics = path.join(runDir, runFiles.metrics);
  const follow = setInterval(() => {
    const step = lastRecord<{ step: number }>(metrics)?.step ?? -1;
    for (const kill of kills) {
      if (kill.time !== undefined || step < kill.step) continue;
      const pidFile = path.join(runDir, runFiles.pids, String(kill.rank));
      kill.pid = Number(fs.readFileSync(pidFile, 'utf8'));
      kill.time = Date.now();
      try {
        process.kill(kill.pid, 'SIGKILL');
        console.log(`[drill] kill -9 ${kill.pid} (world rank ${kill.rank}) after step ${step}`);
      } catch (error) {
        console.log(`[drill] kill -9 ${kill.pid} (world rank ${kill.rank}) failed: ${(error as Error).message}`);
      }
    }
  }, 5);
  const code = await exited;
  clearInterval(follow);

  const summaryFile = path.join(runDir, runFiles.summary);
  const summary = fs.existsSync(summaryFile) ? (JSON.parse(fs.readFileSync(summaryFile, 'utf8')) as { steps: number; world_final: number; ranks_lost: number; params_sha256: string }) : null;
  const sent = kills.filter((k) => k.time !== undefined);
  writeAtomically(path.join(runDir, runFiles.drill), JSON.stringify({ ranks: args.n, kills, mpirun_exit: code }, null, 2) + '\n');
  const killed = sent.map((k) => `rank ${k.rank}@${k.step}`).join(', ') || 'nobody (the run ended first)';
  const passed = code === 0 && summary !== null && sent.length === kills.length && summary.ranks_lost >= sent.length;
  console.log(`[drill] run directory: ${runDir}`);
  console.log(passed
    ? `[drill] PASS: killed ${killed}; ${summary!.world_final} of ${args.n} ranks finished ${summary!.steps} steps, params_sha256 ${summary!.params_sha256.slice(0, 16)}`
    : `[drill] FAIL: killed ${killed}; mpirun exit code ${code}; ${summary ? `${summary.ranks_lost} rank(s) lost per summary.json` : 'no summary.json'}`);
  process.exitCode = passed ? 0 : 1;
});
