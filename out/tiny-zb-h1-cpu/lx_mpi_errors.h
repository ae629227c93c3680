/* lx_mpi_errors.h — MPI failures and exits, for the host code of both
 * targets: a failed call takes the whole job down with its name, file and
 * line, and a decision every rank reaches alike (a bad flag, --help) ends
 * the job with MPI finalised. Valid C11 and C++17. */
#ifndef LX_MPI_ERRORS_H
#define LX_MPI_ERRORS_H

#include "lx_errors.h" /* first: it sets _POSIX_C_SOURCE */

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* C++: Open MPI's C++ bindings do not compile with every warning */
#endif
#include <mpi.h>

/* Prints the failed call, where it was made and MPI's explanation, then
 * takes the whole job down: one rank stopping silently would leave its peers
 * blocked in a receive forever. */
static inline LX_NORETURN void lx_mpi_fail(const char *call, const char *file, int line, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0, rank = -1;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error code %d", code);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "lynx: MPI error on rank %d at %s:%d: %s: %s\n", rank, file, line, call, text);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(LX_EXIT_ERROR); /* not reached */
}

#define LX_MPI_CHECK(call)                                                                                   \
  do {                                                                                                       \
    int lx_mpi_rc_ = (call);                                                                                 \
    if (lx_mpi_rc_ != MPI_SUCCESS) lx_mpi_fail(#call, __FILE__, __LINE__, lx_mpi_rc_);                       \
  } while (0)

/* Exits with `code`; inside MPI, finalises first so that mpirun reports the
 * status rather than an abnormal termination. Every rank must call it (as all
 * ranks do when they reach the same decision from the same arguments). */
static inline LX_NORETURN void lx_mpi_exit(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  fflush(stdout);
  if (initialized && !finalized) MPI_Finalize();
  exit(code);
}

#endif
