// How a job launch/ft-run started ended, judged by its run directory rather than by mpirun's exit
// code alone: PRRTE counts the death of a rank the job spawned (--respawn) against the job, and a
// SIGTERM stop asked for is a clean end.
import { stopEventExitCode } from '../liveness/stop';

/** A `stop` event of events.jsonl, as far as ft-run reads it. */
export type StopRecord = Partial<{ event: string; reason: string; spawned_given_up: number[] }>;

/**
 * How a job ended, judged by its run directory: `unfinished` says how it did not finish (undefined:
 * it completed or stopped cleanly on a SIGTERM asked for), `code` ft-run's exit code for it. From
 * mpirun's exit `code`, whether ft-run asked for a stop (SIGTERM), why the run did not finish
 * (`why`; undefined: it completed or stopped on SIGTERM), whether the job wrote a summary, its
 * last stop event, and whether it spawned ranks (--respawn).
 */
export function outcome(
  code: number,
  stopAsked: boolean,
  why: string | undefined,
  summary: boolean,
  stop: StopRecord | undefined,
  spawned: boolean,
): { code: number; unfinished?: string } {
  const complete = why === undefined && summary;
  // PRRTE counts the death of a rank that the job spawned (--respawn) against the job, though the
  // survivors recovered and finished: the complete summary, written last and atomically, decides
  if (code !== 0 && complete) {
    console.error(
      `ft-run: mpirun exited ${code} (it counts a --respawn rank that died or could not start, or a host it lost, against the job), but the run completed: exit 0`,
    );
    return { code: 0 };
  }
  // the ranks killed the spawned ranks not yet joined at the stop: mpirun counts their deaths too
  const givenUp = stop?.spawned_given_up ?? [];
  const counted =
    givenUp.length > 0 ? ` (it counts the --respawn rank(s) ${givenUp.join(', ')}, given up at the stop, against the job)` : '';
  // the stop asked for here was clean (mpirun also counts a newcomer lost earlier)
  if (code !== 0 && stopAsked && why === undefined && !summary) {
    console.error(`ft-run: mpirun exited ${code}${counted}, but the ranks stopped cleanly on the SIGTERM asked for: exit 0`);
    return { code: 0 };
  }
  // a stop on SIGTERM that nobody here asked for: mpirun ending the job, as PRRTE does when it loses a host's daemon
  if (code !== 0 && !stopAsked && why === undefined)
    return {
      code,
      unfinished: `mpirun ended the job (exit ${code}; it does so when it loses a host or its daemon)${counted} and the ranks stopped cleanly`,
    };
  // a stop of the ranks' own with a newcomer on its way: it leaves by SIGKILL, which mpirun counts
  const stopCode = stop?.reason === undefined ? undefined : stopEventExitCode(stop.reason);
  if (code !== 0 && spawned && stopCode !== undefined && stopCode !== 0 && stopCode !== code)
    return {
      code: stopCode,
      unfinished: `mpirun exited ${code} (it counts a --respawn rank that left at the stop against the job) and the run did not finish: the ranks stopped (${stop!.reason}), exit ${stopCode}`,
    };
  if (code !== 0) return { code, unfinished: `mpirun exited ${code} and the run did not finish: ${why ?? 'stopped'}` };
  if (why === undefined) return { code: 0 };
  return { code: 1, unfinished: `the job ended without finishing: ${why} (mpirun exit 0)` };
}
