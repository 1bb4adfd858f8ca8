/* Raw MPI_Allreduce timings: the baseline of bench/allreduce. Same sizes, repetitions and method as
 * bench/allreduce-worker.ts: per size, warm up, then `reps` timed rounds of `iters` in-place float
 * sums between barriers; rank 0 prints one JSON line with the per-operation time of each round. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int reps = atoi(argv[1]);
  for (int a = 2; a + 1 < argc; a += 2) {
    long bytes = atol(argv[a]);
    int iters = atoi(argv[a + 1]);
    int count = (int)(bytes / 4);
    float* buf = calloc(count, sizeof(float));
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, comm);
    if (rank == 0) printf("{\"impl\":\"raw\",\"ranks\":%d,\"bytes\":%ld,\"us\":[", size, bytes);
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(comm);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) {
        if (MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, comm) != MPI_SUCCESS) {
          fprintf(stderr, "MPI_Allreduce failed\n");
          MPI_Abort(comm, 1);
        }
      }
      double us = (MPI_Wtime() - t0) * 1e6 / iters;
      if (rank == 0) printf("%s%.3f", r ? "," : "", us);
    }
    if (rank == 0) printf("]}\n");
    fflush(stdout);
    free(buf);
  }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
