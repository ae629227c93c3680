/* lx_cuda_attention_gemm.cuh — the materialized attention (the model's
 * attention(): it keeps the probs, (B, H, T, T), as the IR charges them; the
 * dropout mask is drawn again by the backward) on tensor cores: cuBLASLt
 * strided-batched products in bf16 with fp32 accumulation, and a fused
 * softmax kernel between them. The products, and the blocks of rows and heads
 * they run on, are lx_attention_gemms.h's (checked on the CPU by
 * tests/cuda/attention_gemms_test.c); the layouts and the dropout draws are
 * those of lx_cuda_attention.cuh and the CPU twin, so the masks equal the
 * CPU's bit for bit.
 *
 * Forward, per block: scores = q k^T / sqrt(D) into the stream's scratch
 * (fp32, so that the softmax sees unrounded logits), the softmax kernel
 * writes probs and, under dropout, the block's weights (the dropped probs,
 * bf16 after the scores in the scratch), then out = weights v.
 * Backward, per block: [under dropout the weights again, from the probs and
 * the same draws;] dv += weights^T dout; dP = dout v^T (fp32 scratch); the
 * softmax backward kernel writes dS = P (keep dP / (1 - p) - Di) / sqrt(D)
 * (bf16, after dP in the scratch, over the weights), Di = sum_j weight_ij
 * dP_ij = dO_i . O_i; then dq += dS k and dk += dS^T q. A weight is formed
 * from the probability as stored (bf16), forward and backward alike, so the
 * backward's weights are the forward's bit for bit. Every sum runs in an
 * order fixed by the shapes (cuBLASLt's algorithm is cached per shape; no
 * atomics). */
#ifndef LX_CUDA_ATTENTION_GEMM_CUH
#define LX_CUDA_ATTENTION_GEMM_CUH

#include "lx_attention_gemms.h"
#include "lx_cuda_attention.cuh"
#include "lx_cuda_matmul.cuh"

#define LX_SOFTMAX_WARPS 8 /* rows per block of the softmax kernels: a warp each */

/* W fp32 scores from p: two 128-bit loads for a piece of eight. */
template <int W> __device__ inline void lx_load_scores(float v[W], const float *p) {
  if constexpr (W == LX_VEC) {
    float4 lo = *(const float4 *)p, hi = *(const float4 *)(p + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
    for (int e = 0; e < W; e++)
      v[e] = p[e];
  }
}

/* The warp's row of a block: kv-head slot x, query row i, query head h, and
 * the start of its (b, h, i, :) row in the (B, H, T, T) tensors. */
typedef struct {
  int x, i, h;
  size_t at;
} lx_attn_block_row;

__device__ inline bool lx_attn_row_of(lx_attn_block_row *row, const lx_attn_shape &a,
                                      const lx_attn_block &k) {
  int warp = blockIdx.x * (blockDim.x / LX_WARP) + threadIdx.x / LX_WARP, rows = k.i1 - k.i0;
  if (warp >= k.heads * rows) return false;
  row->x = warp / rows, row->i = k.i0 + warp % rows;
  row->h = (k.g0 + row->x) * (a.H / a.KVH) + k.r;
  row->at = lx_attn_row_at(a, k.b, row->h, row->i) * a.T;
  return true;
}

/* The offset of the warp's row in a block's (heads, i1 - i0, T) scratch. */
__device__ inline size_t lx_attn_pitch_at(const lx_attn_shape &a, const lx_attn_block &k,
                                          const lx_attn_block_row &row) {
  return ((size_t)row.x * (k.i1 - k.i0) + (row.i - k.i0)) * a.T;
}

/* The weights of keys [j0, j0 + W) of the row from their probs as stored
 * (bf16): prob / (1 - p) where the draw keeps the score, 0 where it drops it
 * or past the diagonal. */
template <int W>
__device__ inline void lx_attn_weights_of(float weight[W], const float prob[W], const lx_attn_shape &a,
                                          const lx_attn_block_row &row, int j0) {
  for (int e = 0; e < W; e++) {
    bool keep = j0 + e <= row.i && lx_attn_kept(a, row.at + j0 + e);
    weight[e] = keep ? __bfloat162float(lx_to_bf16(prob[e])) * a.dscale : 0.0f;
  }
}

/* A warp per row (lanes over pieces of W keys): the row's max and sum of
 * exp by the online softmax, merged across the warp; then probs for the
 * whole row (zero past the diagonal, as the CPU writes them) and, under
 * dropout, the weights of the block's columns. */
template <int W>
__global__ void lx_attention_softmax_kernel(lx_bf16 *probs,      // (B, H, T, T)
                                            lx_bf16 *weights,    // (heads, i1 - i0, T): the block's, or NULL
                                            const float *scores, // (heads, i1 - i0, T): the block's
                                            lx_attn_shape a, lx_attn_block k) {
  lx_attn_block_row row;
  if (!lx_attn_row_of(&row, a, k)) return;
  int lane = threadIdx.x % LX_WARP;
  size_t pitch_at = lx_attn_pitch_at(a, k, row);
  const float *s = scores + pitch_at;
  float2 acc = make_float2(-INFINITY, 0.0f);
  for (int j0 = lane * W; j0 <= row.i; j0 += LX_WARP * W) {
    float v[W];
    lx_load_scores<W>(v, s + j0);
    lx_softmax_add(&acc, v, row.i - j0 + 1 < W ? row.i - j0 + 1 : W);
  }
  float max = lx_warp_max(acc.x);
  float inverse = 1.0f / lx_warp_sum(acc.x == -INFINITY ? 0.0f : acc.y * expf(acc.x - max));
  for (int j0 = lane * W; j0 < a.T; j0 += LX_WARP * W) {
    float v[W], prob[W];
    if (j0 <= row.i) lx_load_scores<W>(v, s + j0);
    for (int e = 0; e < W; e++)
      prob[e] = j0 + e <= row.i ? expf(v[e] - max) * inverse : 0.0f;
    lx_store_piece<W>(probs + row.at + j0, prob);
    if (weights && j0 < k.i1) {
      float weight[W];
      lx_attn_weights_of<W>(weight, prob, a, row, j0);
      lx_store_piece<W>(weights + pitch_at + j0, weight);
    }
  }
}

/* A warp per row: the weights of the block's columns [0, i1) from the saved
 * probs, as the forward formed them, for the backward's dV. */
template <int W>
__global__ void lx_attention_weights_kernel(lx_bf16 *weights,     // (heads, i1 - i0, T): the block's
                                            const lx_bf16 *probs, // (B, H, T, T)
                                            lx_attn_shape a, lx_attn_block k) {
  lx_attn_block_row row;
  if (!lx_attn_row_of(&row, a, k)) return;
  size_t pitch_at = lx_attn_pitch_at(a, k, row);
  for (int j0 = threadIdx.x % LX_WARP * W; j0 < k.i1; j0 += LX_WARP * W) {
    float prob[W], weight[W];
    lx_load_piece<W>(prob, probs + row.at + j0);
    lx_attn_weights_of<W>(weight, prob, a, row, j0);
    lx_store_piece<W>(weights + pitch_at + j0, weight);
  }
}

/* A warp per row: Di = sum_j weight_ij dP_ij, then dS_ij = P_ij (keep
 * dP_ij / (1 - p) - Di) / sqrt(D) for j <= i and 0 for i < j < i1 (the dq
 * and dk products read the block's columns up to i1). Under dropout the
 * weights are the block's in the scratch, where dS then goes (each lane
 * writes the pieces it alone read); else the probs. */
template <int W>
__global__ void lx_attention_softmax_backward_kernel(lx_bf16 *dscores,     // (heads, i1 - i0, T): the block's
                                                     const float *dprobs,  // (heads, i1 - i0, T)
                                                     const lx_bf16 *probs, // (B, H, T, T)
                                                     bool dropout, lx_attn_shape a, lx_attn_block k) {
  lx_attn_block_row row;
  if (!lx_attn_row_of(&row, a, k)) return;
  int lane = threadIdx.x % LX_WARP;
  size_t pitch_at = lx_attn_pitch_at(a, k, row);
  const float *dp = dprobs + pitch_at;
  const lx_bf16 *weights = dropout ? dscores + pitch_at : probs + row.at;
  float sum = 0.0f;
  for (int j0 = lane * W; j0 <= row.i; j0 += LX_WARP * W) {
    float v[W], w[W];
    lx_load_scores<W>(v, dp + j0);
    lx_load_piece<W>(w, weights + j0);
    for (int e = 0; e < W; e++)
      sum += j0 + e <= row.i ? w[e] * v[e] : 0.0f;
  }
  float Di = lx_warp_sum(sum);
  for (int j0 = lane * W; j0 < k.i1; j0 += LX_WARP * W) {
    float v[W], prob[W], ds[W];
    if (j0 <= row.i) {
      lx_load_scores<W>(v, dp + j0);
      lx_load_piece<W>(prob, probs + row.at + j0);
    }
    for (int e = 0; e < W; e++) {
      bool causal = j0 + e <= row.i;
      bool keep = causal && (!dropout || lx_attn_kept(a, row.at + j0 + e));
      ds[e] = causal ? prob[e] * ((keep ? a.dscale : 0.0f) * v[e] - Di) * a.scale : 0.0f;
    }
    lx_store_piece<W>(dscores + pitch_at + j0, ds);
  }
}

/* ---- launchers ----------------------------------------------------------------- */

/* What a stream that runs materialized attentions of T and up to KVH kv
 * heads needs of scratch (lx_attention_gemms.h's block). */
LX_CUDA_API size_t lx_cuda_attention_scratch_floats(int T, int KVH) {
  return (size_t)lx_attn_scratch_floats(T, KVH);
}

/* The kv heads of a block that the stream's scratch holds; it stops the job
 * (lx_scratch) when not even one does. */
inline int lx_attn_heads_in_scratch(const lx_ctx *ctx, lx_attn_sizes s, int score_bytes) {
  int heads = lx_attn_heads_per_block(s, (long long)ctx->scratch_floats * 4, score_bytes);
  if (heads < 1) lx_scratch(ctx, ((size_t)lx_attn_block_rows(s.T) * s.T * score_bytes + 3) / 4);
  return heads;
}

inline cudaDataType_t lx_attn_data_type(const float *) { return CUDA_R_32F; }
inline cudaDataType_t lx_attn_data_type(const lx_bf16 *) { return CUDA_R_16BF; }

/* One product of lx_attention_gemms.h's table on block k; d, a and b are the
 * buffers the table names for it. */
template <typename Out>
inline void lx_attn_product_run(const lx_ctx *ctx, lx_attn_product product, lx_attn_sizes s, lx_attn_block k,
                                Out *d, const lx_bf16 *a, const lx_bf16 *b) {
  lx_attn_gemm g = lx_attn_gemm_of(product, s, k);
  lx_cuda_matmul_batched(ctx->matmul, d + g.d_at, lx_attn_data_type(d), a + g.a_at, b + g.b_at, &g.shape,
                         g.alpha, g.accumulate, ctx->stream);
}

inline unsigned lx_attn_softmax_blocks(lx_attn_block k) {
  return lx_ceil_div((size_t)k.heads * (k.i1 - k.i0), LX_SOFTMAX_WARPS);
}

/* The scratch's bf16 place: the block's weights under dropout, then dS. */
inline lx_bf16 *lx_attn_scratch_weights(const lx_ctx *ctx, lx_attn_slices v, int T) {
  return (lx_bf16 *)(ctx->scratch + lx_attn_weights_at(v, T));
}

/* out and probs (dropout p, drawn from (seed, stream_id) with the CPU's
 * indices in the whole model's heads), of the query heads that read kv heads
 * [kv_first, kv_end) only: their columns of out and their rows of probs, the
 * values the whole call writes there; every other element is left as it
 * was, so that a recomputation cut by kv heads runs its pieces one at a
 * time. With out NULL (a recompute whose output is kept) the probabilities
 * alone: no weights, no product with V. */
LX_CUDA_API void lx_attention_forward_heads(const lx_ctx *ctx,
                                            lx_bf16 *out,       // (B, T, H * D)
                                            lx_bf16 *probs,     // (B, H, T, T)
                                            const lx_bf16 *qkv, // (B, T, (H + 2*KVH) * D)
                                            int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                            uint64_t stream_id, int head_base, int heads_total, int kv_first,
                                            int kv_end) {
  lx_attn_shape a = lx_attn_shape_checked(B, T, H, KVH, D, p, seed, stream_id, head_base, heads_total);
  LX_CUDA_REQUIRE(0 <= kv_first && kv_first < kv_end && kv_end <= KVH);
  lx_attn_sizes s = {B, T, H, KVH, D, p > 0};
  lx_attn_slices v = {kv_first, kv_end, lx_attn_heads_in_scratch(ctx, s, lx_attn_score_bytes(s, 0))};
  float *scores = ctx->scratch;
  lx_bf16 *weights = s.dropout && out ? lx_attn_scratch_weights(ctx, v, T) : NULL;
  auto softmax = lx_pieces_fit((size_t)T, {probs, weights, scores}) ? lx_attention_softmax_kernel<LX_VEC>
                                                                    : lx_attention_softmax_kernel<1>;
  lx_attn_block k = lx_attn_first_block(s, v);
  do {
    lx_attn_product_run(ctx, LX_ATTN_SCORES, s, k, scores, qkv, qkv);
    softmax<<<lx_attn_softmax_blocks(k), LX_SOFTMAX_WARPS * LX_WARP, 0, ctx->stream>>>(probs, weights, scores,
                                                                                       a, k);
    LX_CUDA_LAUNCHED();
    if (out) lx_attn_product_run(ctx, LX_ATTN_OUT, s, k, out, weights ? weights : probs, qkv);
  } while (lx_attn_next_block(s, v, &k));
}

/* The whole attention: every kv head. */
LX_CUDA_API void lx_attention_forward(const lx_ctx *ctx,
                                      lx_bf16 *out,       // (B, T, H * D)
                                      lx_bf16 *probs,     // (B, H, T, T)
                                      const lx_bf16 *qkv, // (B, T, (H + 2*KVH) * D)
                                      int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                      uint64_t stream_id, int head_base, int heads_total) {
  lx_attention_forward_heads(ctx, out, probs, qkv, B, T, H, KVH, D, p, seed, stream_id, head_base,
                             heads_total, 0, KVH);
}

/* dqkv += the gradients of the forward above (the same p, seed, stream_id and
 * heads: its dropout drawn again), from its saved probs. */
LX_CUDA_API void lx_attention_backward(const lx_ctx *ctx,
                                       lx_bf16 *dqkv,        // (B, T, (H + 2*KVH) * D)
                                       const lx_bf16 *dout,  // (B, T, H * D)
                                       const lx_bf16 *qkv,   // (B, T, (H + 2*KVH) * D)
                                       const lx_bf16 *probs, // (B, H, T, T)
                                       int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                       uint64_t stream_id, int head_base, int heads_total) {
  lx_attn_shape a = lx_attn_shape_checked(B, T, H, KVH, D, p, seed, stream_id, head_base, heads_total);
  lx_attn_sizes s = {B, T, H, KVH, D, p > 0};
  lx_attn_slices v = {0, KVH, lx_attn_heads_in_scratch(ctx, s, lx_attn_score_bytes(s, 1))};
  float *dprobs = ctx->scratch;                          /* fp32 dP of a block */
  lx_bf16 *dscores = lx_attn_scratch_weights(ctx, v, T); /* its weights, then its bf16 dS */
  bool vec = lx_pieces_fit((size_t)T, {probs, dprobs, dscores});
  auto weights_kernel = vec ? lx_attention_weights_kernel<LX_VEC> : lx_attention_weights_kernel<1>;
  auto softmax_backward =
      vec ? lx_attention_softmax_backward_kernel<LX_VEC> : lx_attention_softmax_backward_kernel<1>;
  lx_attn_block k = lx_attn_first_block(s, v);
  do {
    if (s.dropout) {
      weights_kernel<<<lx_attn_softmax_blocks(k), LX_SOFTMAX_WARPS * LX_WARP, 0, ctx->stream>>>(dscores,
                                                                                                probs, a, k);
      LX_CUDA_LAUNCHED();
    }
    lx_attn_product_run(ctx, LX_ATTN_DV, s, k, dqkv, s.dropout ? dscores : probs, dout);
    lx_attn_product_run(ctx, LX_ATTN_DP, s, k, dprobs, dout, qkv);
    softmax_backward<<<lx_attn_softmax_blocks(k), LX_SOFTMAX_WARPS * LX_WARP, 0, ctx->stream>>>(
        dscores, dprobs, probs, s.dropout, a, k);
    LX_CUDA_LAUNCHED();
    lx_attn_product_run(ctx, LX_ATTN_DQ, s, k, dqkv, dscores, qkv);
    lx_attn_product_run(ctx, LX_ATTN_DK, s, k, dqkv, dscores, qkv);
  } while (lx_attn_next_block(s, v, &k));
}

#endif
