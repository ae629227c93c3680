/* lx_attention.h — causal multi-head attention with grouped-query heads, and
 * rotary position embeddings.
 *
 * q, k and v arrive packed along the width: each row of qkv is
 *   [ q head 0 .. q head H-1 | k head 0 .. k head KVH-1 | v head 0 .. KVH-1 ]
 * each head D wide, so qkv is (B, T, (H + 2*KVH) * D); query head h reads kv
 * head h / (H / KVH), consecutive query heads sharing one kv head.
 *
 * Two implementations with different saved memory (gen/analysis/analyze.c):
 *   lx_attention_*        saves qkv and the softmax probabilities (B, H, T, T);
 *                         the backward draws the dropout mask again and
 *                         forms the dropped probabilities from them.
 *   lx_flash_attention_*  saves qkv, its output and the log-sum-exp (B, H, T);
 *                         the backward recomputes the probabilities.
 * Both draw attention dropout from lx_dropout_keep(seed, stream, index) with
 * index = ((b * H + h) * T + i) * T + j, so they compute the same function and
 * the same gradients; the draw is a function of its counter, so a backward
 * that draws again sees the forward's mask without storing it. Under tensor parallelism a rank holds heads
 * [head_base, head_base + H) of heads_total and draws with the whole model's
 * head numbers, so every tensor-parallel degree drops the same weights. */
#ifndef LX_ATTENTION_H
#define LX_ATTENTION_H

#include "lx_common.h"
#include "lx_rng.h"

typedef struct {
  int B, T, H, KVH, D;
  int head_base, heads_total; /* this rank's heads in the whole model's numbering */
} lx_attn_dims;

static inline lx_attn_dims lx_attn_dims_checked(int B, int T, int H, int KVH, int D) {
  LX_CHECK(B > 0 && T > 0 && D > 0 && KVH > 0 && H % KVH == 0);
  return (lx_attn_dims){B, T, H, KVH, D, 0, H};
}

static inline lx_attn_dims lx_attn_dims_of_rank(int B, int T, int H, int KVH, int D, int head_base, int heads_total) {
  lx_attn_dims a = lx_attn_dims_checked(B, T, H, KVH, D);
  LX_CHECK(head_base >= 0 && head_base + H <= heads_total);
  a.head_base = head_base, a.heads_total = heads_total;
  return a;
}

static inline size_t lx_qkv_width(lx_attn_dims a) { return (size_t)(a.H + 2 * a.KVH) * a.D; }

static inline size_t lx_qkv_row(lx_attn_dims a, int b, int t) {
  return ((size_t)b * a.T + t) * lx_qkv_width(a);
}
static inline size_t lx_q_at(lx_attn_dims a, int b, int t, int h) {
  return lx_qkv_row(a, b, t) + (size_t)h * a.D;
}
static inline size_t lx_k_at(lx_attn_dims a, int b, int t, int g) {
  return lx_qkv_row(a, b, t) + (size_t)(a.H + g) * a.D;
}
static inline size_t lx_v_at(lx_attn_dims a, int b, int t, int g) {
  return lx_qkv_row(a, b, t) + (size_t)(a.H + a.KVH + g) * a.D;
}
static inline size_t lx_out_at(lx_attn_dims a, int b, int t, int h) {
  return ((size_t)b * a.T + t) * a.H * a.D + (size_t)h * a.D;
}
/* start of the score row (b, h, i, :) of a (B, H, T, T) tensor */
static inline size_t lx_score_row(lx_attn_dims a, int b, int h, int i) {
  return (((size_t)b * a.H + h) * a.T + i) * a.T;
}
/* the dropout counter of score (b, h, i, 0), in the whole model's heads */
static inline uint64_t lx_dropout_row(lx_attn_dims a, int b, int h, int i) {
  return (((uint64_t)b * a.heads_total + a.head_base + h) * a.T + i) * a.T;
}
static inline int lx_kv_head(lx_attn_dims a, int h) { return h / (a.H / a.KVH); }
static inline real lx_attn_scale(lx_attn_dims a) { return (real)(1.0 / sqrt((double)a.D)); }

/* ---- materialized: keeps the T x T probabilities --------------------------- */

/* prow[j] = softmax_j(scale * q_i . k_j) for j <= i, 0 beyond (causal). */
static inline void lx_attention_probs_row(real *prow,      // (T)
                                          const real *qkv, // (B, T, (H + 2*KVH) * D)
                                          lx_attn_dims a, int b, int h, int i) {
  const real *q = qkv + lx_q_at(a, b, i, h);
  int g = lx_kv_head(a, h);
  real scale = lx_attn_scale(a), max = -INFINITY;
  for (int j = 0; j <= i; j++) {
    prow[j] = scale * lx_dot(q, qkv + lx_k_at(a, b, j, g), a.D);
    if (prow[j] > max) max = prow[j];
  }
  lx_acc sum = 0;
  for (int j = 0; j <= i; j++) {
    prow[j] = lx_exp(prow[j] - max);
    sum += prow[j];
  }
  for (int j = 0; j <= i; j++)
    prow[j] = (real)(prow[j] / sum);
  for (int j = i + 1; j < a.T; j++)
    prow[j] = 0;
}

/* Whether dropout keeps score (b, h, i, j): the forward and the backward draw
 * it alike (p == 0: threshold 0, always). Its weight in out_i is then
 * P_ij / (1 - p), and 0 where dropped. */
static inline int lx_attention_keep(lx_attn_dims a, int b, int h, int i, int j, uint64_t seed,
                                    uint64_t stream, uint32_t threshold) {
  return lx_dropout_keep(seed, stream, lx_dropout_row(a, b, h, i) + j, threshold);
}

/* out = (B, T, H * D). Only the query heads that read kv heads [kv_first,
 * kv_end): their columns of out and their rows of probs, the values the whole
 * call writes there; every other element is left as it was, so that a
 * recomputation cut by kv heads runs its pieces one at a time. With out NULL
 * (a recompute whose output is kept) the probabilities alone. */
static inline void lx_attention_forward_heads(const lx_ctx *ctx,
                                              real *out,       // (B, T, H * D)
                                              real *probs,     // (B, H, T, T)
                                              const real *qkv, // (B, T, (H + 2*KVH) * D)
                                              int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                              uint64_t stream, int head_base, int heads_total, int kv_first,
                                              int kv_end) {
  lx_attn_dims a = lx_attn_dims_of_rank(B, T, H, KVH, D, head_base, heads_total);
  LX_CHECK(0 <= kv_first && kv_end <= KVH && kv_first < kv_end);
  uint32_t threshold = lx_dropout_threshold(p);
  real dscale = (real)(1.0 / (1.0 - p));
  int group = H / KVH;
#pragma omp parallel for collapse(2) num_threads(ctx->threads)
  for (int b = 0; b < B; b++)
    for (int h = kv_first * group; h < kv_end * group; h++) {
      int g = lx_kv_head(a, h);
      for (int i = 0; i < T; i++) {
        real *prow = probs + lx_score_row(a, b, h, i);
        lx_attention_probs_row(prow, qkv, a, b, h, i);
        if (!out) continue;
        real *o = out + lx_out_at(a, b, i, h);
        memset(o, 0, (size_t)D * sizeof(real));
        for (int j = 0; j <= i; j++) {
          int keep = lx_attention_keep(a, b, h, i, j, seed, stream, threshold);
          lx_axpy(o, keep ? prow[j] * dscale : 0, qkv + lx_v_at(a, b, j, g), D);
        }
      }
    }
}

/* The whole attention: every kv head. */
static inline void lx_attention_forward(const lx_ctx *ctx,
                                        real *out,       // (B, T, H * D)
                                        real *probs,     // (B, H, T, T)
                                        const real *qkv, // (B, T, (H + 2*KVH) * D)
                                        int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                        uint64_t stream, int head_base, int heads_total) {
  lx_attention_forward_heads(ctx, out, probs, qkv, B, T, H, KVH, D, p, seed, stream, head_base, heads_total,
                             0, KVH);
}

/* The gradient of one (i, j) pair, given the probability P = P_ij, the weight
 * that multiplied v_j (P, or the dropped P), whether j survived dropout, and
 * Di = sum_j weight_ij (dO_i . v_j) = dO_i . O_i:
 *   dv_j += weight dO_i;  dP = keep * dscale * (dO_i . v_j);
 *   dS = P (dP - Di);     dq_i += scale dS k_j;  dk_j += scale dS q_i. */
static inline void lx_attention_pair_backward(real *dqkv,         // (B, T, (H + 2*KVH) * D)
                                              const real *qkv,    // (B, T, (H + 2*KVH) * D)
                                              const real *dout_i, // (D)
                                              lx_attn_dims a, int b, int h, int i, int j, real prob,
                                              real weight, int keep, real dscale, real Di) {
  int g = lx_kv_head(a, h);
  const real *q = qkv + lx_q_at(a, b, i, h), *k = qkv + lx_k_at(a, b, j, g), *v = qkv + lx_v_at(a, b, j, g);
  lx_axpy(dqkv + lx_v_at(a, b, j, g), weight, dout_i, a.D);
  real dprob = keep ? lx_dot(dout_i, v, a.D) * dscale : 0;
  real dscore = prob * (dprob - Di) * lx_attn_scale(a);
  lx_axpy(dqkv + lx_q_at(a, b, i, h), dscore, k, a.D);
  lx_axpy(dqkv + lx_k_at(a, b, j, g), dscore, q, a.D);
}

/* Parallel over (batch, kv head): every query head of a group adds into the
 * group's dk and dv, so a group is one task and the sums keep a fixed order.
 * The dropout draws are the forward's (same seed, stream and heads). */
static inline void lx_attention_backward(const lx_ctx *ctx,
                                         real *dqkv,        // (B, T, (H + 2*KVH) * D)
                                         const real *dout,  // (B, T, H * D)
                                         const real *qkv,   // (B, T, (H + 2*KVH) * D)
                                         const real *probs, // (B, H, T, T)
                                         int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                         uint64_t stream, int head_base, int heads_total) {
  lx_attn_dims a = lx_attn_dims_of_rank(B, T, H, KVH, D, head_base, heads_total);
  uint32_t threshold = lx_dropout_threshold(p);
  real dscale = (real)(1.0 / (1.0 - p));
  int group = H / KVH;
#pragma omp parallel for collapse(2) num_threads(ctx->threads)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < KVH; g++)
      for (int h = g * group; h < (g + 1) * group; h++)
        for (int i = 0; i < T; i++) {
          const real *prow = probs + lx_score_row(a, b, h, i);
          const real *dout_i = dout + lx_out_at(a, b, i, h);
          lx_acc Di = 0;
          for (int j = 0; j <= i; j++)
            if (lx_attention_keep(a, b, h, i, j, seed, stream, threshold))
              Di += prow[j] * dscale * lx_dot(dout_i, qkv + lx_v_at(a, b, j, g), D);
          for (int j = 0; j <= i; j++) {
            int keep = lx_attention_keep(a, b, h, i, j, seed, stream, threshold);
            lx_attention_pair_backward(dqkv, qkv, dout_i, a, b, h, i, j, prow[j], keep ? prow[j] * dscale : 0,
                                       keep, dscale, (real)Di);
          }
        }
}

/* ---- flash-style: keeps only the output and the log-sum-exp ---------------- */

/* One query row by the online softmax (Milakov & Gimelshein 2018): a running
 * max m, a running sum l of exp(s - m), and the output accumulated unscaled,
 * rescaled whenever the max grows. No T-long row is ever stored. */
static inline void lx_flash_attention_row(real *o,         // (D)
                                          real *lse,       // (1)
                                          const real *qkv, // (B, T, (H + 2*KVH) * D)
                                          lx_attn_dims a, int b, int h, int i, uint32_t threshold,
                                          real dscale, uint64_t seed, uint64_t stream) {
  const real *q = qkv + lx_q_at(a, b, i, h);
  int g = lx_kv_head(a, h);
  uint64_t row = lx_dropout_row(a, b, h, i);
  real scale = lx_attn_scale(a), m = -INFINITY;
  lx_acc l = 0;
  memset(o, 0, (size_t)a.D * sizeof(real));
  for (int j = 0; j <= i; j++) {
    real s = scale * lx_dot(q, qkv + lx_k_at(a, b, j, g), a.D);
    if (s > m) {
      real shrink = lx_exp(m - s); /* 0 on the first step, m = -inf */
      l *= shrink;
      for (int d = 0; d < a.D; d++)
        o[d] *= shrink;
      m = s;
    }
    real w = lx_exp(s - m);
    l += w;
    if (lx_dropout_keep(seed, stream, row + j, threshold))
      lx_axpy(o, w * dscale, qkv + lx_v_at(a, b, j, g), a.D);
  }
  for (int d = 0; d < a.D; d++)
    o[d] = (real)(o[d] / l);
  *lse = (real)(m + log(l));
}

static inline void lx_flash_attention_forward(const lx_ctx *ctx,
                                              real *out,       // (B, T, H * D)
                                              real *lse,       // (B, H, T)
                                              const real *qkv, // (B, T, (H + 2*KVH) * D)
                                              int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                              uint64_t stream, int head_base, int heads_total) {
  lx_attn_dims a = lx_attn_dims_of_rank(B, T, H, KVH, D, head_base, heads_total);
  uint32_t threshold = lx_dropout_threshold(p);
  real dscale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for collapse(2) num_threads(ctx->threads)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++)
        lx_flash_attention_row(out + lx_out_at(a, b, i, h), lse + ((size_t)b * H + h) * T + i, qkv, a, b, h,
                               i, threshold, dscale, seed, stream);
}

/* Recomputes P_ij = exp(scale q_i . k_j - lse_i) and the dropout decision;
 * Di = dO_i . O_i comes from the saved output. Same task split as above.
 * Adds into dqkv; LX_GRAD_WRITE zeroes it first (the gradient's only
 * contribution: nothing else zeroed it). */
static inline void lx_flash_attention_backward(const lx_ctx *ctx,
                                               real *dqkv,       // (B, T, (H + 2*KVH) * D)
                                               const real *dout, // (B, T, H * D)
                                               const real *qkv,  // (B, T, (H + 2*KVH) * D)
                                               const real *out,  // (B, T, H * D)
                                               const real *lse,  // (B, H, T)
                                               int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                               uint64_t stream, int head_base, int heads_total,
                                               lx_grad_mode mode) {
  lx_attn_dims a = lx_attn_dims_of_rank(B, T, H, KVH, D, head_base, heads_total);
  uint32_t threshold = lx_dropout_threshold(p);
  real dscale = (real)(1.0 / (1.0 - p)), scale = lx_attn_scale(a);
  int group = H / KVH;
  if (mode == LX_GRAD_WRITE) memset(dqkv, 0, sizeof(real) * (size_t)B * T * (H + 2 * KVH) * D);
#pragma omp parallel for collapse(2) num_threads(ctx->threads)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < KVH; g++)
      for (int h = g * group; h < (g + 1) * group; h++)
        for (int i = 0; i < T; i++) {
          uint64_t row = lx_dropout_row(a, b, h, i);
          const real *q = qkv + lx_q_at(a, b, i, h), *dout_i = dout + lx_out_at(a, b, i, h);
          real Di = lx_dot(dout_i, out + lx_out_at(a, b, i, h), D);
          real lse_i = lse[((size_t)b * H + h) * T + i];
          for (int j = 0; j <= i; j++) {
            real prob = lx_exp(scale * lx_dot(q, qkv + lx_k_at(a, b, j, g), D) - lse_i);
            int keep = lx_dropout_keep(seed, stream, row + j, threshold);
            lx_attention_pair_backward(dqkv, qkv, dout_i, a, b, h, i, j, prob, keep ? prob * dscale : 0, keep,
                                       dscale, Di);
          }
        }
}

/* ---- rope: rotary position embeddings on the q and k heads ------------------ */

/* Pairs (x[2m], x[2m+1]) of every q and k head at position t turn by the angle
 * t * base^(-2m / D) (Su et al. 2021, interleaved pairs as in Meta's LLaMA);
 * v passes through. A rotation's inverse is its transpose, so the backward
 * turns dout back by the same angle and needs nothing saved. */
static inline void lx_rope_rotate(const lx_ctx *ctx,
                                  real *out,       // (B, T, (H + 2*KVH) * D)
                                  const real *inp, // (B, T, (H + 2*KVH) * D)
                                  lx_attn_dims a, double base, real direction, int accumulate) {
  size_t W = lx_qkv_width(a), rotated = (size_t)(a.H + a.KVH) * a.D;
#pragma omp parallel for collapse(2) num_threads(ctx->threads)
  for (int b = 0; b < a.B; b++)
    for (int t = 0; t < a.T; t++) {
      const real *x = inp + lx_qkv_row(a, b, t);
      real *y = out + lx_qkv_row(a, b, t);
      for (int m = 0; m < a.D / 2; m++) {
        double angle = t * pow(base, -2.0 * m / a.D);
        real c = (real)cos(angle), s = direction * (real)sin(angle);
        for (size_t head = 0; head < rotated; head += (size_t)a.D) {
          real x0 = x[head + 2 * m], x1 = x[head + 2 * m + 1];
          real y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
          y[head + 2 * m] = accumulate ? y[head + 2 * m] + y0 : y0;
          y[head + 2 * m + 1] = accumulate ? y[head + 2 * m + 1] + y1 : y1;
        }
      }
      for (size_t e = rotated; e < W; e++)
        y[e] = accumulate ? y[e] + x[e] : x[e];
    }
}

static inline void lx_rope_forward(const lx_ctx *ctx,
                                   real *out,       // (B, T, (H + 2*KVH) * D)
                                   const real *inp, // (B, T, (H + 2*KVH) * D)
                                   int B, int T, int H, int KVH, int D, double base) {
  lx_attn_dims a = lx_attn_dims_checked(B, T, H, KVH, D);
  LX_CHECK(D % 2 == 0);
  lx_rope_rotate(ctx, out, inp, a, base, 1, 0);
}

static inline void lx_rope_backward(const lx_ctx *ctx,
                                    real *dinp,       // (B, T, (H + 2*KVH) * D)
                                    const real *dout, // (B, T, (H + 2*KVH) * D)
                                    int B, int T, int H, int KVH, int D, double base) {
  lx_attn_dims a = lx_attn_dims_checked(B, T, H, KVH, D);
  LX_CHECK(D % 2 == 0);
  lx_rope_rotate(ctx, dinp, dout, a, base, -1, 1);
}

#endif
