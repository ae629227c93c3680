/* lx_attention_gemms.h — the materialized attention (lx_cuda_attention_gemm.cuh)
 * as strided-batched matrix products on tensor cores: which products, over
 * which rows and heads, at which offsets. Host code only, valid C11 and
 * C++17: tests/cuda/attention_gemms_test.c runs these products on the CPU
 * (cuBLAS's column-major semantics, lx_gemm_layout.h) with the softmax
 * between them and compares with templates/cpu/lx_attention.h, and the
 * generator's cost model (gen/analysis/cost.c) prices these blocks.
 *
 * Layouts are those of templates/cpu/lx_attention.h: qkv (B, T, W) with
 * W = (H + 2 KVH) D, out (B, T, H D), probs (B, H, T, T); query head
 * h = g R + r (R = H / KVH) reads kv head g.
 *
 * The work is cut into blocks: one batch element b, one offset r inside the
 * groups, kv heads [g0, g0 + heads) (the query heads g R + r: a constant
 * stride, so one batched product covers them) and query rows [i0, i1). A
 * call runs the blocks of a range of kv heads (lx_attn_slices): all of them,
 * or a piece that a recomputation runs on its own.
 * Causality: rows below i1 attend to keys [0, i1) only, so a block's
 * products stop at column i1; with blocks of 256 rows that skips most of
 * the masked upper triangle. A block's scores live in the stream's scratch,
 * in fp32: (heads, rows, T) with row pitch T; the backward puts the bf16
 * dS of the same shape after the fp32 dP. Under dropout the weights, the
 * dropped probs, are a block's too, bf16 in that second place: the forward
 * writes them with the probs, the backward forms them again from the probs
 * and the mask drawn again, before its dV (dS overwrites them later).
 *
 *   product  D (rows x cols)              = op(A)        op(B)    buffers
 *   SCORES   scores (i1-i0 x i1)          = q            k^T      qkv -> scratch, alpha 1/sqrt(D)
 *   OUT      out (i1-i0 x D)              = weights      v        weights, qkv -> out
 *   DV       dv (i1 x D)                 += weights^T    dout     weights, dout -> dqkv
 *   DP       dP (i1-i0 x i1)              = dout         v^T      dout, qkv -> scratch
 *   DQ       dq (i1-i0 x D)              += dS           k        scratch, qkv -> dqkv
 *   DK       dk (i1 x D)                 += dS^T         q        scratch, qkv -> dqkv
 * weights are the probs when p == 0; under dropout the dropped probs in the
 * scratch's second place (lx_attn_weights_at), with the pitches of dS. */
#ifndef LX_ATTENTION_GEMMS_H
#define LX_ATTENTION_GEMMS_H

#include <math.h>

#include "lx_gemm_layout.h"

#define LX_ATTN_BLOCK_ROWS 256
/* The most a stream's attention scratch may take: a block of as many heads
 * as fit, at least one (fp32 dP + bf16 dS: 6 bytes a score). */
#define LX_ATTN_SCRATCH_CAP_BYTES (96LL << 20)
#define LX_ATTN_MOST_SCORE_BYTES 6

typedef struct {
  int B, T, H, KVH, D;
  int dropout; /* p > 0: the weights are the dropped probs, in the scratch */
} lx_attn_sizes;

typedef enum { LX_ATTN_SCORES, LX_ATTN_OUT, LX_ATTN_DV, LX_ATTN_DP, LX_ATTN_DQ, LX_ATTN_DK } lx_attn_product;

/* Batch element b, query heads (g0 + x) R + r for x < heads, rows [i0, i1). */
typedef struct {
  int b, r, g0, heads, i0, i1;
} lx_attn_block;

/* The kv heads [first, end) a call runs, in slices of up to per_block (the
 * heads the scratch holds). */
typedef struct {
  int first, end, per_block;
} lx_attn_slices;

/* A product's shape, and the element offsets of its first A, B and D in
 * the buffers the table above names. */
typedef struct {
  lx_gemm_shape shape;
  long long a_at, b_at, d_at;
  float alpha;
  int accumulate; /* beta = 1: adds into dqkv, as every backward does */
} lx_attn_gemm;

static inline int lx_attn_block_rows(int T) { return T < LX_ATTN_BLOCK_ROWS ? T : LX_ATTN_BLOCK_ROWS; }

/* A score's bytes in the scratch: fp32 scores, and under dropout the bf16
 * weights after them (forward); fp32 dP, then the bf16 weights and dS
 * (backward). */
static inline int lx_attn_score_bytes(lx_attn_sizes s, int backward) {
  return backward || s.dropout ? LX_ATTN_MOST_SCORE_BYTES : 4;
}

/* Where the scratch's bf16 place starts, in floats: after the fp32 scores or
 * dP of a block of per_block heads. */
static inline long long lx_attn_weights_at(lx_attn_slices v, int T) {
  return (long long)v.per_block * lx_attn_block_rows(T) * T;
}

/* kv heads per block for a scratch of `bytes`: 0 if not even one fits. */
static inline int lx_attn_heads_per_block(lx_attn_sizes s, long long bytes, int score_bytes) {
  long long one = (long long)lx_attn_block_rows(s.T) * s.T * score_bytes, fit = bytes / one;
  return fit < s.KVH ? (int)fit : s.KVH;
}

/* The scratch (in floats) a stream running attentions of T and up to KVH kv
 * heads needs: one backward block of as many heads as the cap allows. */
static inline long long lx_attn_scratch_floats(int T, int KVH) {
  if (KVH <= 0) return 0;
  long long one = (long long)lx_attn_block_rows(T) * T * LX_ATTN_MOST_SCORE_BYTES;
  long long heads = LX_ATTN_SCRATCH_CAP_BYTES / one;
  if (heads < 1) heads = 1;
  if (heads > KVH) heads = KVH;
  return (heads * one + 3) / 4;
}

/* The share of the T x T square the blocks' products cover: n full blocks,
 * block m up to key m x rows, then the rest up to key T. */
static inline double lx_attn_covered_share(int T) {
  double rows = lx_attn_block_rows(T), n = (double)(T / lx_attn_block_rows(T)), rest = T - n * rows;
  return (rows * rows * n * (n + 1) / 2 + rest * T) / ((double)T * T);
}

/* The blocks a call runs (per_block 0: one kv head at a time). */
static inline double lx_attn_block_count(lx_attn_sizes s, lx_attn_slices v) {
  int rows = lx_attn_block_rows(s.T), per = v.per_block > 0 ? v.per_block : 1;
  return (double)s.B * (s.H / s.KVH) * ((v.end - v.first + per - 1) / per) * ((s.T + rows - 1) / rows);
}

/* The first block, and the next after it (0 when it was the last): rows
 * innermost, then the slices of kv heads, then r, then batch elements. */
static inline lx_attn_block lx_attn_first_block(lx_attn_sizes s, lx_attn_slices v) {
  lx_attn_block k;
  k.b = k.r = k.i0 = 0;
  k.g0 = v.first;
  k.heads = v.end - v.first < v.per_block ? v.end - v.first : v.per_block;
  k.i1 = lx_attn_block_rows(s.T);
  return k;
}

static inline int lx_attn_next_block(lx_attn_sizes s, lx_attn_slices v, lx_attn_block *k) {
  int rows = lx_attn_block_rows(s.T);
  if (k->i1 < s.T) {
    k->i0 = k->i1, k->i1 = k->i1 + rows < s.T ? k->i1 + rows : s.T;
    return 1;
  }
  k->i0 = 0, k->i1 = rows;
  k->g0 += k->heads;
  if (k->g0 >= v.end) k->g0 = v.first, k->r++;
  if (k->r >= s.H / s.KVH) k->r = 0, k->b++;
  k->heads = v.end - k->g0 < v.per_block ? v.end - k->g0 : v.per_block;
  return k->b < s.B;
}

/* ---- offsets of one element (b, i or j, head) in each buffer ------------------- */

static inline long long lx_attn_width(lx_attn_sizes s) { return (long long)(s.H + 2 * s.KVH) * s.D; }
static inline int lx_attn_query_head(lx_attn_sizes s, lx_attn_block k) { return k.g0 * (s.H / s.KVH) + k.r; }
static inline long long lx_attn_q(lx_attn_sizes s, int b, int i, int h) {
  return ((long long)b * s.T + i) * lx_attn_width(s) + (long long)h * s.D;
}
static inline long long lx_attn_k(lx_attn_sizes s, int b, int j, int g) {
  return lx_attn_q(s, b, j, s.H + g);
}
static inline long long lx_attn_v(lx_attn_sizes s, int b, int j, int g) {
  return lx_attn_q(s, b, j, s.H + s.KVH + g);
}
static inline long long lx_attn_out(lx_attn_sizes s, int b, int i, int h) {
  return ((long long)b * s.T + i) * s.H * s.D + (long long)h * s.D;
}
static inline long long lx_attn_score(lx_attn_sizes s, int b, int h, int i) {
  return (((long long)b * s.H + h) * s.T + i) * s.T;
}

/* ---- the products -------------------------------------------------------------- */

/* D (m x n) += or = op(A) op(B) with the given pitches; strides per head step. */
static inline lx_gemm_shape lx_attn_shape_of(int m, int n, int k, int trans_a, int trans_b, long long lda,
                                             long long stride_a, long long ldb, long long stride_b,
                                             long long ldd, long long stride_d, int batch) {
  lx_gemm_shape g;
  g.m = m, g.n = n, g.k = k, g.trans_a = trans_a, g.trans_b = trans_b;
  g.lda = lda, g.ldb = ldb, g.ldd = ldd;
  g.stride_a = stride_a, g.stride_b = stride_b, g.stride_d = stride_d;
  g.batch = batch;
  return g;
}

static inline lx_attn_gemm lx_attn_gemm_of(lx_attn_product p, lx_attn_sizes s, lx_attn_block k) {
  long long W = lx_attn_width(s), HD = (long long)s.H * s.D, TT = (long long)s.T * s.T;
  long long R = s.H / s.KVH, rows = k.i1 - k.i0, block = rows * s.T; /* a head's scores in the scratch */
  int h = lx_attn_query_head(s, k), n = k.heads;
  long long q = lx_attn_q(s, k.b, k.i0, h), keys = lx_attn_k(s, k.b, 0, k.g0),
            values = lx_attn_v(s, k.b, 0, k.g0);
  long long dout = lx_attn_out(s, k.b, k.i0, h);
  /* the probs' rows of the block, or the scratch's weights (from its bf16 place) */
  long long weights = s.dropout ? 0 : lx_attn_score(s, k.b, h, k.i0),
            weights_stride = s.dropout ? block : R * TT;
  lx_attn_gemm g;
  g.alpha = 1.0f, g.accumulate = 0;
  switch (p) {
  case LX_ATTN_SCORES:
    g.shape = lx_attn_shape_of((int)rows, k.i1, s.D, 0, 1, W, R * s.D, W, s.D, s.T, block, n);
    g.a_at = q, g.b_at = keys, g.d_at = 0;
    g.alpha = (float)(1.0 / sqrt((double)s.D));
    break;
  case LX_ATTN_OUT:
    g.shape = lx_attn_shape_of((int)rows, s.D, k.i1, 0, 0, s.T, weights_stride, W, s.D, HD, R * s.D, n);
    g.a_at = weights, g.b_at = values, g.d_at = dout;
    break;
  case LX_ATTN_DV:
    g.shape = lx_attn_shape_of(k.i1, s.D, (int)rows, 1, 0, s.T, weights_stride, HD, R * s.D, W, s.D, n);
    g.a_at = weights, g.b_at = dout, g.d_at = values, g.accumulate = 1;
    break;
  case LX_ATTN_DP:
    g.shape = lx_attn_shape_of((int)rows, k.i1, s.D, 0, 1, HD, R * s.D, W, s.D, s.T, block, n);
    g.a_at = dout, g.b_at = values, g.d_at = 0;
    break;
  case LX_ATTN_DQ:
    g.shape = lx_attn_shape_of((int)rows, s.D, k.i1, 0, 0, s.T, block, W, s.D, W, R * s.D, n);
    g.a_at = 0, g.b_at = keys, g.d_at = q, g.accumulate = 1;
    break;
  case LX_ATTN_DK:
  default:
    g.shape = lx_attn_shape_of(k.i1, s.D, (int)rows, 1, 0, s.T, block, W, R * s.D, W, s.D, n);
    g.a_at = 0, g.b_at = q, g.d_at = keys, g.accumulate = 1;
    break;
  }
  return g;
}

#endif
