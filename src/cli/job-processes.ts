// The processes of one job, found by a marker variable in their environment (every process that
// mpirun starts inherits it, and mpirun passes it to the ranks on other hosts). mpirun puts each
// rank in a process group of its own, and when ranks exit non-zero before MPI starts it can return
// at once (under --with-ft ulfm at the second such exit), leaving the others running: a job is over
// only when every process carrying its marker is gone. The MPI tests and the benchmarks use this to
// make sure that nothing of a job is left behind; launch/ft-run, for what mpirun left on its own
// host (ssh to a host it cannot reach any more).
import * as fs from 'node:fs';
import { environOf } from '../run/pids';

/** The UTS namespace of a process: which host it is on, where hosts are namespaces of one machine. */
function hostOf(pid: number | 'self'): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/uts`);
  } catch {
    return null;
  }
}

/** Pids of the live processes whose environment holds `marker` ("NAME=value"), on every host or on this one. */
export function jobProcesses(marker: string, thisHostOnly = false): number[] {
  const here = thisHostOnly ? hostOf('self') : null;
  return fs
    .readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => pid !== process.pid && environOf(pid)?.includes(marker) && (!thisHostOnly || hostOf(pid) === here));
}

/** Sends `signal` (SIGKILL by default) to the processes jobProcesses finds (one that ends meanwhile is passed over); their pids. */
export function killJobProcesses(marker: string, thisHostOnly = false, signal: NodeJS.Signals = 'SIGKILL'): number[] {
  const pids = jobProcesses(marker, thisHostOnly);
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // ended meanwhile
    }
  }
  return pids;
}
