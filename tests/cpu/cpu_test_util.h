/* cpu_test_util.h — buffers and random fills shared by the CPU kernel tests. */
#ifndef CPU_TEST_UTIL_H
#define CPU_TEST_UTIL_H

#include "check.h"
#include "lx_kernels.h"

#define TEST_SEED 20240601ull

/* The context the kernels run in: one thread unless a test says otherwise
 * (results never depend on it, and tiny kernels run faster on one). */
static lx_ctx test_ctx = {1};

static uint64_t test_stream_counter = 1000;

/* Uniform in [-scale, scale), a fresh stream per tensor. */
static inline real *random_tensor(size_t n, double scale) {
  real *x = LX_MALLOC(n * sizeof(real));
  uint64_t stream = test_stream_counter++;
  for (size_t i = 0; i < n; i++)
    x[i] = (real)(scale * (2 * lx_rng_uniform(TEST_SEED, stream, i) - 1));
  return x;
}

static inline real *zero_tensor(size_t n) { return LX_CALLOC(n, sizeof(real)); }

/* n NaNs: what a backward under LX_GRAD_WRITE must overwrite without reading. */
static inline real *nan_tensor(size_t n) {
  real *x = LX_MALLOC(n * sizeof(real));
  for (size_t i = 0; i < n; i++)
    x[i] = (real)NAN;
  return x;
}

static inline real *copy_tensor(const real *x, size_t n) {
  real *y = LX_MALLOC(n * sizeof(real));
  memcpy(y, x, n * sizeof(real));
  return y;
}

static inline int *random_tokens(size_t n, int vocab) {
  int *t = LX_MALLOC(n * sizeof(int));
  uint64_t stream = test_stream_counter++;
  for (size_t i = 0; i < n; i++)
    t[i] = (int)(lx_rng_bits(TEST_SEED, stream, i) % (uint64_t)vocab);
  return t;
}

static inline double max_abs_diff(const real *a, const real *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
  return worst;
}

static inline double max_abs(const real *a, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    worst = fmax(worst, fabs((double)a[i]));
  return worst;
}

static inline double weighted_sum(const real *x, const real *w, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)x[i] * w[i];
  return s;
}

#endif
