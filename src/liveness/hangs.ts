// Hangs are failures. Three bounds make every wait finite, all derived from --hang-timeout T:
// - a peer that is stopped (SIGSTOP, a frozen host) stops its heartbeats: ULFM's detector, which
//   the launcher turns on with timeout T, declares it dead and the pending calls fail (the
//   heartbeats go out from MPI's progress, which the idle comm thread drives every T/8);
// - this rank's own main thread stuck (a kernel that never returns, a blocked synchronous write):
//   its detector thread still beats, so the native watchdog kills the process after T without a
//   beat from the event loop, and it becomes an ordinary failure;
// - anything else (a peer alive and beating but never arriving): every wait on the comm thread
//   has a deadline of a few T, after which the thread revokes the communicator itself.
// A rank declared dead may still exist (stopped): the survivors kill it, so it can never come back
// and mpirun ends with the job. ULFM's detector watches only the ranks mpirun started (its ring is
// their MPI_COMM_WORLD): a spawned rank that stops is seen only when a wait on it runs past its
// deadline, and then by the survivors on its host, which find it stopped and kill it.
import { addonPart } from '../base/addon';
import type { HangBounds } from './hang-bounds';
import { rankProcess, signalRanks, stoppedLook } from '../run/pids';

/** The addon's bounds on waiting: the comm thread's deadline and idle progress, the watchdog. */
interface HangGuardPart {
  /** How long any wait on the comm thread may last before it revokes the communicator (0: no limit). */
  setCommTimeout(ms: number): void;
  /** While idle, the comm thread drives MPI's progress this often, for the failure detector's heartbeats (0: never). */
  setIdleProgress(ms: number): void;
  /** (Re)arms the progress watchdog: no beat() for timeoutMs and the process prints `line` and dies (0: off). */
  watchdog(timeoutMs: number, line: string): void;
  beat(): void;
}

const addon = addonPart<HangGuardPart>();

/** Arms the deadlines and the watchdog; returns a function that disarms both (at exit). */
export function guardAgainstHangs(bounds: HangBounds, worldRank: number): () => void {
  const tick = Math.max(10, Math.floor(bounds.watchdogMs / 8));
  addon.setCommTimeout(bounds.commMs);
  // the detector's heartbeats ride on MPI's progress (its thread mode hangs MPI_Finalize in Open MPI 5.0.7)
  addon.setIdleProgress(tick);
  addon.watchdog(
    bounds.watchdogMs,
    `ft-train: rank ${worldRank}: no progress for ${bounds.watchdogMs / 1000} s (stuck in a computation or a blocking call; a step that computes longer needs a larger --hang-timeout); this rank declares itself failed`,
  );
  const timer = setInterval(() => addon.beat(), tick);
  timer.unref();
  return () => {
    clearInterval(timer);
    addon.watchdog(0, '');
    addon.setIdleProgress(0);
    addon.setCommTimeout(0);
  };
}

/** Tells the watchdog that the main thread is alive (call between long synchronous pieces). */
export function beat(): void {
  addon.beat();
}

/** Kills the processes of `worldRanks` that still run on this host: a rank declared dead for hanging is stopped, not gone. */
export function killDeclaredDead(pidsDir: string, worldRanks: readonly number[]): number[] {
  return signalRanks(pidsDir, worldRanks, () => [], 'SIGKILL');
}

/** Waits (polling, at most `ms`) until none of `worldRanks` runs on this host any more. */
export async function peersGone(pidsDir: string, worldRanks: readonly number[], ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (worldRanks.every((rank) => rankProcess(pidsDir, rank, []) === null)) return true;
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * How long a rank must stay stopped without being scheduled once to count as hung: one stopped
 * and continued in turn (launch/drill --slow, every --slow-period, 20 ms by default; job control),
 * each stop shorter than this, is slow, not hung.
 */
const stoppedForGoodMs = 100;

/**
 * Kills the processes of `worldRanks` that run on this host stopped (SIGSTOP, a debugger) and stay
 * so, unscheduled, for stoppedForGoodMs (this thread sleeps that long where any is stopped): hung,
 * whatever the detector saw. The ranks killed.
 */
export function killStopped(pidsDir: string, worldRanks: readonly number[]): number[] {
  const first = worldRanks.map((rank) => [rank, stoppedLook(pidsDir, rank, [])] as const).filter(([, look]) => look !== null);
  if (first.length === 0) return [];
  // slept in pieces with a beat between them: this rank's own watchdog must not take the wait for a hang
  const nap = new Int32Array(new SharedArrayBuffer(4));
  for (let slept = 0; slept < stoppedForGoodMs; slept += 10) {
    Atomics.wait(nap, 0, 0, 10);
    addon.beat();
  }
  return killDeclaredDead(
    pidsDir,
    first.filter(([rank, look]) => stoppedLook(pidsDir, rank, []) === look).map(([rank]) => rank),
  );
}
