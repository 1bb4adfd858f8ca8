// The processes of one job, found by a marker variable in their environment (every process that
// mpirun starts inherits it). mpirun puts each rank in a process group of its own, and when one rank
// exits non-zero before MPI starts it returns at once, leaving the others running: a job is over
// only when every process carrying its marker is gone. The MPI tests and the benchmarks use this
// to make sure that nothing of a job is left behind.
import * as fs from 'node:fs';
import { environOf } from '../run/pids';

/** Pids of the live processes whose environment holds `marker` ("NAME=value"). */
export function jobProcesses(marker: string): number[] {
  return fs.readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number).filter((pid) => environOf(pid)?.includes(marker));
}
