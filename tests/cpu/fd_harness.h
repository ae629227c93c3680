/* fd_harness.h — central differences for the double-precision kernel tests
 * (cpu_kernels_test.c, cpu_attention_test.c). Built with -DLX_DOUBLE: in
 * double a central difference is accurate to ~1e-10, so any backward that
 * disagrees with its forward by more than FD_TOL has a real bug.
 *
 * Each op test takes a scalar loss L = sum(out * W) with a fixed random W:
 * dL/dout = W, so the backward run with dout = W must give dL/d(every input
 * and every parameter), which central differences of L measure directly. */
#ifndef FD_HARNESS_H
#define FD_HARNESS_H

#include "cpu_test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the finite-difference harness ------------------------------------------ */

typedef double (*loss_fn)(void *ctx);

#define FD_STEP 1e-5
#define FD_FLOOR 1e-3 /* gradients here are O(0.01..1); below the floor, absolute error */
#define FD_TOL 1e-6

static double worst_fd_error;

/* max over elements of |analytic - numeric| / max(|analytic|, |numeric|, floor) */
static inline double fd_max_rel_error(loss_fn loss, void *ctx, real *x, const real *grad, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    real saved = x[i];
    x[i] = saved + FD_STEP;
    double up = loss(ctx);
    x[i] = saved - FD_STEP;
    double down = loss(ctx);
    x[i] = saved;
    double numeric = (up - down) / (2 * FD_STEP);
    double scale = fmax(fmax(fabs(numeric), fabs((double)grad[i])), FD_FLOOR);
    worst = fmax(worst, fabs(numeric - grad[i]) / scale);
  }
  return worst;
}

static inline void check_gradient(const char *op, const char *wrt, loss_fn loss, void *ctx, real *x,
                                  const real *grad, size_t n) {
  double err = fd_max_rel_error(loss, ctx, x, grad, n);
  worst_fd_error = fmax(worst_fd_error, err);
  CHECK(err < FD_TOL, "%s: d/d(%s) matches central differences (max rel err %.1e)", op, wrt, err);
}

/* A backward's input gradient under LX_GRAD_WRITE over NaNs (`written`)
 * against the same kernel adding to zeros (`added`): the same bits. */
static inline void check_written(const char *name, real *written, const real *added, size_t n) {
  CHECK(!memcmp(written, added, n * sizeof(real)),
        "%s backward with LX_GRAD_WRITE over NaNs equals it added to zeros, bit for bit", name);
  free(written);
}

/* Finite differences run thousands of tiny forwards, where starting a
 * thread team costs more than the work, and a busy machine makes spinning
 * teams far worse. Results do not depend on the thread count, which
 * cpu_kernels_test's test_tiny_gpt_gradient checks with 1, 2 and 3 threads. */
static inline void fd_single_thread(void) {
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
}

static inline void fd_report(void) {
  printf("# worst finite-difference relative error over all backwards: %.2e\n", worst_fd_error);
}

#endif
