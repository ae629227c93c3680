/* lx_common.h — what every CPU kernel header shares: the scalar type, the
 * math functions that follow it, and small helpers; the error checks that say
 * where they fired are lx_check.h's, shared with the host runtime.
 *
 * The emitted CPU program is built in float. The kernel tests build the same
 * headers with -DLX_DOUBLE so that central finite differences are accurate
 * enough to check every backward to ~1e-8.
 *
 * Conventions of all lx_*.h kernels:
 *   - an op's kernel is lx_<op>_<forward|backward>(ctx, outputs..., inputs...,
 *     sizes..., op parameters...), the name and argument order of its CUDA
 *     twin (templates/cuda): ctx is the target's context, here the thread
 *     pool every `omp parallel for` of the kernel runs on;
 *   - every function takes its shapes explicitly; a comment beside each
 *     pointer gives its shape, e.g. `real *out, // (B, T, C)`;
 *   - a _forward writes (=) its outputs; a _backward ADDS (+=) into every
 *     gradient it produces, activations and parameters alike, so that a
 *     tensor used twice (a residual stream) and parameters shared by
 *     micro-batches accumulate naturally: the caller zeroes gradients once;
 *   - outputs never alias inputs unless a function says so;
 *   - results do not depend on the number of OpenMP threads: where several
 *     rows add into one parameter gradient, they do so in a fixed order, so
 *     a recomputed step reproduces the first bit for bit (the OpenBLAS
 *     products are deterministic for a fixed OPENBLAS_NUM_THREADS; keep it
 *     fixed across a run);
 *   - random numbers (dropout, init) come from lx_rng.h, a pure function of
 *     (seed, stream, index), never from hidden state. */
#ifndef LX_COMMON_H
#define LX_COMMON_H

#include "lx_check.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LX_DOUBLE
typedef double real;
#define lx_exp exp
#define lx_log log
#define lx_sqrt sqrt
#define lx_tanh tanh
#define lx_fabs fabs
#else
typedef float real;
#define lx_exp expf
#define lx_log logf
#define lx_sqrt sqrtf
#define lx_tanh tanhf
#define lx_fabs fabsf
#endif

/* Reductions over a row (norm statistics, softmax sums, losses) run in
 * double even in the float build: they are cheap next to the matmuls and
 * keep long rows (a 50k vocabulary) accurate. */
typedef double lx_acc;

/* What every op kernel takes first. The pool is OpenMP's: `threads` wide
 * (the emitted program gives it omp_get_max_threads(); results never depend
 * on it). */
typedef struct lx_ctx {
  int threads;
} lx_ctx;

/* How a backward kernel that can makes its input gradient (lynxgen's
 * lx_writes_input_gradient): added to what the buffer holds, or written
 * where it is the gradient's only contribution and nothing zeroed the buffer. */
typedef enum { LX_GRAD_ADD, LX_GRAD_WRITE } lx_grad_mode;

/* A gradient element's new value: *old + grad, or grad alone (old not read). */
static inline real lx_grad_into(const real *old, real grad, lx_grad_mode mode) {
  return mode == LX_GRAD_ADD ? *old + grad : grad;
}

/* ---- small helpers -------------------------------------------------------- */

static inline real lx_dot(const real *a, // (n)
                          const real *b, // (n)
                          int n) {
  real s = 0;
  for (int i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

/* y += alpha * x */
static inline void lx_axpy(real *y, // (n)
                           real alpha,
                           const real *x, // (n)
                           int n) {
  for (int i = 0; i < n; i++)
    y[i] += alpha * x[i];
}

static inline void lx_zero(real *x, // (n)
                           size_t n) {
  memset(x, 0, n * sizeof(real));
}

#endif
