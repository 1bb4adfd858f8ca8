// What a rank learns from its launcher before MPI starts: Open MPI's mpirun gives every rank its
// world rank and size in the environment, and `--with-ft ulfm` turns MPI's fault tolerance on
// through an MCA parameter it exports to the ranks. Without mpirun (a singleton) there is one rank.

/** Started by Open MPI's mpirun (not a singleton). */
export function underMpirun(): boolean {
  return process.env.OMPI_COMM_WORLD_SIZE !== undefined;
}

/** The launch's own name (its PMIx namespace: the same on every rank it started), or undefined without one (a singleton). */
export function launcherNamespace(): string | undefined {
  return process.env.PMIX_NAMESPACE || undefined;
}

/** The world size MPI will report. */
export function launcherWorldSize(): number {
  return Number(process.env.OMPI_COMM_WORLD_SIZE ?? '1');
}

/** The world rank MPI will report. */
export function launcherWorldRank(): number {
  return Number(process.env.OMPI_COMM_WORLD_RANK ?? '0');
}

/** `mpirun --with-ft ulfm` sets OMPI_MCA_mpi_ft_enable=1 in the ranks' environment. */
export function mpiFaultToleranceOn(): boolean {
  const value = process.env.OMPI_MCA_mpi_ft_enable;
  return value === '1' || value === 'true';
}

/** The rank's place among the launch's ranks on its host (without it: as if every rank shared one). */
export function launcherLocalRank(): number {
  return Number(process.env.OMPI_COMM_WORLD_LOCAL_RANK ?? launcherWorldRank());
}
