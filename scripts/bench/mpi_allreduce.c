/* Times MPI_Allreduce(MPI_SUM) of N floats: WARMUP untimed runs, then the
 * median of REPS timed runs (barrier before each, max over ranks). Rank 0 prints
 * "mpi_allreduce N=<n> ranks=<p> median_ms=<t> min_ms=<t> cpu_ms=<c>",
 * c being the CPU time (user + system) all ranks used per timed run.
 * Usage: mpi_allreduce N [REPS=5 [WARMUP=1]] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long n = argc > 1 ? atol(argv[1]) : 1048576;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  int warmup = argc > 3 ? atoi(argv[3]) : 1;
  if (n < 1 || reps < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "usage: mpi_allreduce N [REPS [WARMUP]]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  float *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
  double *t = malloc(reps * sizeof *t);
  if (!in || !out || !t) MPI_Abort(MPI_COMM_WORLD, 1);
  for (long i = 0; i < n; i++) in[i] = (float)((i + rank) % 1000);
  for (int w = 0; w < warmup; w++) MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double cpu = 0;
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_s();
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, mx;
    cpu += cpu_s() - c0;
    MPI_Reduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    t[r] = mx;
  }
  double cpu_all = 0;
  MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  /* Check one element against the closed form so a broken run cannot pass. */
  long bad = 0;
  for (long i = 0; i < n; i += 4099) {
    float want = 0;
    for (int k = 0; k < size; k++) want += (float)((i + k) % 1000);
    if (out[i] != want) bad++;
  }
  if (rank == 0) {
    qsort(t, reps, sizeof *t, cmp);
    printf("mpi_allreduce N=%ld ranks=%d median_ms=%.3f min_ms=%.3f cpu_ms=%.1f bad=%ld\n", n, size,
           t[reps / 2] * 1e3, t[0] * 1e3, cpu_all / reps * 1e3, bad);
  }
  free(in); free(out); free(t);
  MPI_Finalize();
  return bad ? 1 : 0;
}
