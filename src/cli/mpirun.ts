// How ft-train starts MPI jobs: the ULFM Open MPI's mpirun, with fault tolerance turned on.
import * as path from 'node:path';

/** Prefix of the Open MPI build with ULFM (launch/setup makes it). */
export const mpiHome = process.env.FT_MPI_HOME ?? '/opt/ompi-ulfm';

export interface MpirunOptions {
  /** Number of ranks. */
  ranks: number;
  /** The command each rank runs, e.g. [process.execPath, script, ...args]. */
  program: string[];
  /** Extra mpirun options (placed before the program). */
  mpirunArgs?: string[];
}

export interface Command {
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
}

/**
 * `mpirun --with-ft ulfm --oversubscribe -n N <program>`: without --with-ft a dead rank ends
 * the whole job; oversubscription lets more ranks than cores run (tests, drills on a laptop).
 */
export function mpirunCommand(options: MpirunOptions): Command {
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (process.getuid?.() === 0) {
    env.OMPI_ALLOW_RUN_AS_ROOT = '1';
    env.OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = '1';
  }
  return {
    command: path.join(mpiHome, 'bin', 'mpirun'),
    args: ['--with-ft', 'ulfm', '--oversubscribe', '-n', String(options.ranks),
      ...(options.mpirunArgs ?? []), ...options.program],
    env,
  };
}
