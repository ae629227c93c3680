/* lx_matmul.h — linear layers (x W^T + b), their matrix products on OpenBLAS.
 *
 * Weights are row-major (out, in), as in llm.c's checkpoints, so a tied
 * lm_head is lx_linear_forward on the token embedding (V, C) itself.
 * OpenBLAS runs its own threads: the products are called from serial code
 * and only the bias loops use OpenMP, so the two never multiply. */
#ifndef LX_MATMUL_H
#define LX_MATMUL_H

#include <cblas.h>

#include "lx_common.h"
#include "lx_rng.h" /* LoRA's dropout */

/* C = alpha * op(A) op(B) + beta * C, all row-major; op(X) = X or X^T. */
static inline void lx_gemm(int trans_a, int trans_b, int m, int n, int k, real alpha,
                           const real *a, // (m, k), or (k, m) when trans_a
                           const real *b, // (k, n), or (n, k) when trans_b
                           real beta,
                           real *c) { // (m, n)
  enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  int lda = trans_a ? m : k, ldb = trans_b ? k : n;
#ifdef LX_DOUBLE
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
#else
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
#endif
}

/* out = inp W^T + bias; bias may be NULL (linear_nobias, lm_head). */
static inline void lx_linear_forward(const lx_ctx *ctx,
                                     real *out,          // (BT, OC)
                                     const real *inp,    // (BT, C)
                                     const real *weight, // (OC, C)
                                     const real *bias,   // (OC) or NULL
                                     int BT, int C, int OC) {
  /* seeding out with the bias lets the product add onto it (beta = 1) */
  if (bias) {
#pragma omp parallel for num_threads(ctx->threads)
    for (int r = 0; r < BT; r++)
      memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(real));
  }
  lx_gemm(0, 1, BT, OC, C, 1, inp, weight, bias ? 1 : 0, out);
}

/* The bias gradient sums dout over rows. Each task owns a block of channels
 * and walks the rows in order, reading each row's block contiguously (a
 * column-at-a-time walk strides OC floats per row); every channel sums its
 * rows in order, so the result is thread-count free. */
#define LX_BIAS_CHANNEL_BLOCK 256

static inline void lx_bias_backward(const lx_ctx *ctx,
                                    real *dbias,      // (OC)
                                    const real *dout, // (BT, OC)
                                    int BT, int OC) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int o0 = 0; o0 < OC; o0 += LX_BIAS_CHANNEL_BLOCK) {
    int n = OC - o0 < LX_BIAS_CHANNEL_BLOCK ? OC - o0 : LX_BIAS_CHANNEL_BLOCK;
    lx_acc s[LX_BIAS_CHANNEL_BLOCK] = {0};
    for (int r = 0; r < BT; r++) {
      const real *row = dout + (size_t)r * OC + o0;
      for (int o = 0; o < n; o++)
        s[o] += row[o];
    }
    for (int o = 0; o < n; o++)
      dbias[o0 + o] += (real)s[o];
  }
}

/* dinp += dout W (= under LX_GRAD_WRITE); dweight += dout^T inp; dbias +=
 * sum over rows of dout. dinp may be NULL (nothing upstream wants it, or
 * zero bubble's W pass), dweight NULL (zero bubble's B pass: the W pass
 * computes it); dbias is NULL without bias, and in the B pass. */
static inline void lx_linear_backward(const lx_ctx *ctx,
                                      real *dinp,         // (BT, C) or NULL
                                      real *dweight,      // (OC, C) or NULL
                                      real *dbias,        // (OC) or NULL
                                      const real *dout,   // (BT, OC)
                                      const real *inp,    // (BT, C), or NULL when dweight is
                                      const real *weight, // (OC, C)
                                      int BT, int C, int OC, lx_grad_mode dinp_mode) {
  if (dinp) lx_gemm(0, 0, BT, C, OC, 1, dout, weight, dinp_mode == LX_GRAD_ADD ? 1 : 0, dinp);
  if (dweight) lx_gemm(1, 0, OC, C, BT, 1, dout, inp, 1, dweight);
  if (dbias) lx_bias_backward(ctx, dbias, dout, BT, OC);
}

/* ---- LoRA (Hu et al. 2021) ---------------------------------------------------
 * A linear with a low-rank adapter: out = inp W^T + bias + scale (d(inp) A^T) B^T,
 * scale = alpha / R, d LoRA's dropout of the adapter's input (the base product
 * reads inp whole). The forward keeps down = d(inp) A^T (rank R wide) for dB.
 * Dropout keeps element (r, c) of the rank's C columns where lx_dropout_keep
 * of index r c_whole + col0 + c does (the rank's columns start at col0 of the
 * c_whole of the whole input), so every tensor-parallel layout draws the same
 * mask; the backward draws it again. */

/* out = d(inp): the kept elements scaled by 1 / (1 - p), the dropped zero;
 * with `add`, out += d(inp) instead. */
static inline void lx_lora_dropout(const lx_ctx *ctx,
                                   real *out,       // (BT, C)
                                   const real *inp, // (BT, C)
                                   int BT, int C, double p, uint64_t seed, uint64_t stream, long long col0,
                                   long long c_whole, int add) {
  uint32_t threshold = lx_dropout_threshold(p);
  real keep_scale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < BT; r++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)r * C + c;
      uint64_t index = (uint64_t)r * (uint64_t)c_whole + (uint64_t)(col0 + c);
      real kept = lx_dropout_keep(seed, stream, index, threshold) ? inp[i] * keep_scale : 0;
      out[i] = add ? out[i] + kept : kept;
    }
}

/* The adapter's input as its A sees it: inp itself, or (p > 0) d(inp) in a
 * buffer the caller frees (*dropped). */
static inline const real *lx_lora_input(const lx_ctx *ctx, real **dropped, const real *inp, int BT, int C, double p,
                                        uint64_t seed, uint64_t stream, long long col0, long long c_whole) {
  *dropped = NULL;
  if (p == 0) return inp;
  *dropped = (real *)LX_MALLOC(sizeof(real) * (size_t)BT * (size_t)C);
  lx_lora_dropout(ctx, *dropped, inp, BT, C, p, seed, stream, col0, c_whole, 0);
  return *dropped;
}

static inline void lx_lora_linear_forward(const lx_ctx *ctx,
                                          real *out,          // (BT, OC)
                                          real *down,         // (BT, R)
                                          const real *inp,    // (BT, C)
                                          const real *weight, // (OC, C)
                                          const real *bias,   // (OC) or NULL
                                          const real *lora_a, // (R, C)
                                          const real *lora_b, // (OC, R)
                                          int BT, int C, int OC, int R, real scale, double p, uint64_t seed,
                                          uint64_t stream, long long col0, long long c_whole) {
  lx_linear_forward(ctx, out, inp, weight, bias, BT, C, OC);
  real *dropped;
  const real *x = lx_lora_input(ctx, &dropped, inp, BT, C, p, seed, stream, col0, c_whole);
  lx_gemm(0, 1, BT, R, C, 1, x, lora_a, 0, down);
  lx_gemm(0, 1, BT, OC, R, scale, down, lora_b, 1, out);
  free(dropped);
}

/* With du = scale dout B (BT, R): dinp += dout W + d(du A) (the base part =
 * under LX_GRAD_WRITE; d the forward's dropout, drawn again),
 * dlora_a += du^T d(inp), dlora_b += scale dout^T down; the base weights'
 * gradients as lx_linear_backward's. Fine-tuning freezes W and the bias
 * (their gradients NULL, and inp with them), LoRA-FA A too (dlora_a NULL,
 * inp NULL). */
static inline void lx_lora_linear_backward(const lx_ctx *ctx,
                                           real *dinp,         // (BT, C) or NULL
                                           real *dweight,      // (OC, C) or NULL
                                           real *dbias,        // (OC) or NULL
                                           real *dlora_a,      // (R, C) or NULL
                                           real *dlora_b,      // (OC, R) or NULL
                                           const real *dout,   // (BT, OC)
                                           const real *inp,    // (BT, C), or NULL when dweight and dlora_a are
                                           const real *down,   // (BT, R)
                                           const real *weight, // (OC, C)
                                           const real *lora_a, // (R, C)
                                           const real *lora_b, // (OC, R)
                                           int BT, int C, int OC, int R, real scale, double p, uint64_t seed,
                                           uint64_t stream, long long col0, long long c_whole,
                                           lx_grad_mode dinp_mode) {
  lx_linear_backward(ctx, dinp, dweight, dbias, dout, inp, weight, BT, C, OC, dinp_mode);
  if (dlora_b) lx_gemm(1, 0, OC, R, BT, scale, dout, down, 1, dlora_b);
  if (!dinp && !dlora_a) return;
  real *du = (real *)LX_MALLOC(sizeof(real) * (size_t)BT * (size_t)R);
  lx_gemm(0, 0, BT, R, OC, scale, dout, lora_b, 0, du);
  if (dlora_a) {
    real *dropped;
    const real *x = lx_lora_input(ctx, &dropped, inp, BT, C, p, seed, stream, col0, c_whole);
    lx_gemm(1, 0, R, C, BT, 1, du, x, 1, dlora_a);
    free(dropped);
  }
  if (dinp && p == 0) lx_gemm(0, 0, BT, C, R, 1, du, lora_a, 1, dinp);
  if (dinp && p > 0) { /* d(du A): the dropped columns pass nothing back */
    real *grad = (real *)LX_MALLOC(sizeof(real) * (size_t)BT * (size_t)C);
    lx_gemm(0, 0, BT, C, R, 1, du, lora_a, 0, grad);
    lx_lora_dropout(ctx, dinp, grad, BT, C, p, seed, stream, col0, c_whole, 1);
    free(grad);
  }
  free(du);
}

#endif
