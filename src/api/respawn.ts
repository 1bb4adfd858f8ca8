// A rank spawned to replace a lost one (--respawn) runs the same program again: the command the
// job's ranks spawn, and how the spawned rank learns its place from the arguments appended to it.
// A reserve (--reserves) is told the same arguments when woken.
import { awaitWake, CommTimeoutError, connectWoken, exitNow, finalize, startsAsReserve } from '../comm';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { withDeadline } from '../liveness/deadline';
import { FaultInjector } from '../liveness/drills';
import { hangBounds } from '../liveness/hang-bounds';
import type { CpuLevel } from '../nn/backend';
import { launcherWorldRank, launcherWorldSize } from '../rank/launcher-env';
import { runFiles } from '../run/files';
import { pidFileText, wasGivenUp } from '../run/pids';
import { leaveUnjoined } from '../rank/job';
import type { TrainOptions } from './train-settings';

/**
 * What a rank spawned to replace a lost one runs: this program with this rank's arguments, minus
 * --resume (it receives the run's state from the ranks instead), with the shard count and the
 * kernels' level fixed and its id given (it joins under ids that no rank had).
 */
export function respawnCommand(shards: number, level: CpuLevel): { command: string; args(firstId: number, step: number): string[] } {
  const flags: string[] = [];
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; ++i) {
    const [flag] = argv[i].split('=');
    if (['--resume', '--shards', '--isa', '--join-id', '--join-step'].includes(flag)) {
      if (!argv[i].includes('=')) i += 1;
      continue;
    }
    flags.push(argv[i]);
  }
  return {
    command: process.execPath,
    args: (firstId, step) => [
      ...process.execArgv,
      process.argv[1],
      ...flags,
      '--shards',
      String(shards),
      '--isa',
      level,
      '--join-id',
      String(firstId),
      '--join-step',
      String(step),
    ],
  };
}

/** Where a spawned or woken rank joins: the run's shard count and kernels' level, its id, the step its job's ranks were at. */
export interface JoinPlace {
  shards: number;
  isa: CpuLevel;
  joinId: number;
  joinStep: number;
}

/** `--shards S --isa L --join-id J --join-step K` as respawnCommand appends them, if present: this rank was spawned. */
export function spawnedAs(argv: string[]): JoinPlace | undefined {
  const at = argv.lastIndexOf('--join-id');
  const stepAt = argv.lastIndexOf('--join-step');
  const shardsAt = argv.lastIndexOf('--shards');
  const isaAt = argv.lastIndexOf('--isa');
  if (at < 0 || stepAt < 0 || shardsAt < 0 || isaAt < 0) return undefined;
  return {
    shards: Number(argv[shardsAt + 1]),
    isa: argv[isaAt + 1] as CpuLevel,
    joinId: Number(argv[at + 1]),
    joinStep: Number(argv[stepAt + 1]),
  };
}

/**
 * On one of the launch's last `reserves` processes: starts MPI (within the start-up bound, as the
 * others do; past it they report the job's failed start, and this one leaves quietly), then sleeps
 * until woken, and returns where it joins. Dismissed (the run ended), it calls `close` (its open
 * files), finalizes and exits 0; abandoned (every process before it in the launch failed), it
 * exits 0 without finalizing, so that a reserve after it sees it gone too. Undefined on the other
 * processes.
 */
export async function wokenAs(
  options: Pick<TrainOptions, 'reserves' | 'hangTimeout' | 'drills' | 'runDir' | 'seed'>,
  close: () => Promise<void>,
): Promise<JoinPlace | undefined> {
  const { reserves } = options;
  if (reserves === 0 || launcherWorldRank() < launcherWorldSize() - reserves) return undefined;
  const bounds = hangBounds(options.hangTimeout);
  const reserve = await withDeadline(startsAsReserve(reserves), bounds.startupMs, 'MPI start-up').catch(() => exitNow(0));
  if (!reserve) throw new Error(`launch rank ${launcherWorldRank()} is no reserve of ${reserves}`);
  const wake = await awaitWake();
  if (wake === 'abandoned') return exitNow(0);
  if (wake === 'dismissed') {
    await close();
    await withDeadline(finalize(), bounds.commMs, 'MPI_Finalize').catch(() => undefined);
    return exitNow(0);
  }
  const place = spawnedAs(wake.args);
  if (!place) throw new Error(`woken without a place to join: ${wake.args.join(' ')}`);
  // its pid file under the id it joins as, at once: the waking ranks kill it by that if they give it
  // up, and one that gave it up before finds it marked
  const pidsDir = path.join(options.runDir, runFiles.pids);
  fs.writeFileSync(path.join(pidsDir, String(place.joinId)), pidFileText());
  if (wasGivenUp(pidsDir, place.joinId))
    leaveUnjoined(options.runDir, place.joinId, 'woken', 'the ranks that woke it gave it up before it connected', false);
  // a drill names a reserve by its launch rank, at the step it is woken at (phase woken)
  const note = path.join(options.runDir, runFiles.logs, `reserve-${launcherWorldRank()}.log`);
  new FaultInjector(options.drills, launcherWorldRank(), note, pidsDir, options.seed).at(place.joinStep, 'woken');
  // the waking ranks accept it at a step's end, or give it up (their failure, or a deadline of
  // theirs): it then leaves as failed, as a spawned rank that cannot join does
  await withDeadline(connectWoken(wake.port), bounds.commMs, 'MPI_Comm_connect').catch((error: Error) =>
    leaveUnjoined(options.runDir, place.joinId, 'woken', error.message, error instanceof CommTimeoutError),
  );
  return place;
}
