/* The raw ULFM floor of bench/recovery: the same repair in C with nothing else around it. Each
 * iteration allreduces `count` floats and agrees on the outcome; at iteration `kill_at` the victim
 * prints the wall time and SIGKILLs itself; the survivors revoke, shrink, agree, and retry. The new
 * lowest rank prints the wall time at which the first allreduce after the repair completed, and how
 * long revoke + shrink took. Times are CLOCK_REALTIME milliseconds, comparable across processes.
 * With VICTIM_MIB, the victim first writes that many MiB of private memory, as much as a rank of
 * ft-train holds: the kernel frees a killed process's memory before its death can be seen, so the
 * floor then includes what the size of the dead process costs.
 * Usage: raw_recovery COUNT ITERATIONS VICTIM KILL_AT [VICTIM_MIB] */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int count = atoi(argv[1]), iterations = atoi(argv[2]), victim = atoi(argv[3]), kill_at = atoi(argv[4]);
  size_t victim_bytes = argc > 5 ? (size_t)atol(argv[5]) << 20 : 0;
  int world_rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank == victim && victim_bytes > 0) {
    volatile char* held = malloc(victim_bytes);
    for (size_t i = 0; i < victim_bytes; i += 4096) held[i] = (char)i; /* every page written: private, resident */
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  float* buf = malloc(sizeof(float) * count);
  int repaired = 0;
  double shrink_ms = 0;
  for (int it = 0; it < iterations;) {
    if (world_rank == victim && it == kill_at) {
      printf("{\"event\":\"kill\",\"time\":%.3f}\n", wall_ms());
      fflush(stdout);
      raise(SIGKILL);
    }
    for (int i = 0; i < count; ++i) buf[i] = 1.0f;
    int ok = MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, comm) == MPI_SUCCESS;
    int rc = MPIX_Comm_agree(comm, &ok);
    if (rc != MPI_SUCCESS || !ok) {
      double t0 = wall_ms();
      MPI_Comm shrunk;
      MPIX_Comm_revoke(comm);
      MPIX_Comm_shrink(comm, &shrunk);
      MPI_Comm_free(&comm);
      comm = shrunk;
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      shrink_ms += wall_ms() - t0;
      int flag = 1;
      MPIX_Comm_agree(comm, &flag);
      repaired = 1;
      continue;
    }
    if (repaired == 1) {
      int rank;
      MPI_Comm_rank(comm, &rank);
      if (rank == 0) printf("{\"event\":\"first_after\",\"time\":%.3f,\"revoke_shrink_ms\":%.3f}\n", wall_ms(), shrink_ms);
      fflush(stdout);
      repaired = 2;
    }
    ++it;
  }
  free(buf);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
