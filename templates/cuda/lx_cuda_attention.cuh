/* lx_cuda_attention.cuh — causal grouped-query flash attention and rope, the
 * GPU twins of templates/cpu/lx_attention.h, with its layout exactly:
 *   qkv (B, T, (H + 2*KVH) * D), each row [ q heads | k heads | v heads ],
 *   query head h reads kv head h / (H / KVH); out (B, T, H * D);
 *   lse (B, H, T) fp32; the score row (b, h, i, :) starts at
 *   ((b * H + h) * T + i) * T, and that index + j is also the dropout
 *   counter, so the masks equal the CPU's bit for bit.
 *
 * Flash attention saves only out and lse; the backward recomputes P. (The
 * materialized attention, which saves probs, runs on tensor cores:
 * lx_cuda_attention_gemm.cuh; these are its layouts and dropout draws.)
 *
 * The backward is deterministic without atomics: dq (a sum over keys) and
 * dk, dv (sums over query rows and over the heads of a group) are computed by
 * two kernels, each owning its outputs and summing in a fixed order, at the
 * price of forming the scores twice. The per-row Di = dO_i . O_i needed by
 * both is computed first into scratch.
 *
 * Kernels run on CUDA cores in fp32 from bf16 data: correct for every head
 * size up to 256, tiled so that K and V are read from shared memory. They
 * are the fallback of programs built without cuDNN (ATTENTION=cudnn runs
 * cuDNN's fused attention instead, lx_cuda_cudnn_attention.cu). */
#ifndef LX_CUDA_ATTENTION_CUH
#define LX_CUDA_ATTENTION_CUH

#include "lx_cuda_common.cuh"
#include "lx_cuda_rng.cuh"

#define LX_ATTN_QUERY_ROWS 16 /* query rows per block (4 per warp)             */
#define LX_ATTN_WARPS 4
#define LX_ATTN_ROWS_PER_WARP (LX_ATTN_QUERY_ROWS / LX_ATTN_WARPS)
#define LX_ATTN_KEYS 32 /* keys per tile: one per lane while scoring             */
#define LX_ATTN_THREADS (LX_ATTN_WARPS * LX_WARP)
#define LX_ATTN_MAX_HEAD_DIM 256

/* The shapes every attention kernel needs, passed by value. */
typedef struct {
  int B, T, H, KVH, D;
  float scale;       /* 1 / sqrt(D) */
  float dscale;      /* 1 / (1 - p) */
  uint32_t threshold; /* dropout threshold; 0 keeps everything */
  uint64_t key;      /* lx_cuda_rng_key(seed, stream) */
  int head_base, heads_total; /* this rank's heads in the whole model's numbering */
} lx_attn_shape;

__device__ inline size_t lx_attn_qkv_width(const lx_attn_shape &a) { return (size_t)(a.H + 2 * a.KVH) * a.D; }
__device__ inline size_t lx_attn_q_at(const lx_attn_shape &a, int b, int t, int h) {
  return ((size_t)b * a.T + t) * lx_attn_qkv_width(a) + (size_t)h * a.D;
}
__device__ inline size_t lx_attn_k_at(const lx_attn_shape &a, int b, int t, int g) {
  return ((size_t)b * a.T + t) * lx_attn_qkv_width(a) + (size_t)(a.H + g) * a.D;
}
__device__ inline size_t lx_attn_v_at(const lx_attn_shape &a, int b, int t, int g) {
  return ((size_t)b * a.T + t) * lx_attn_qkv_width(a) + (size_t)(a.H + a.KVH + g) * a.D;
}
__device__ inline size_t lx_attn_out_at(const lx_attn_shape &a, int b, int t, int h) {
  return ((size_t)b * a.T + t) * a.H * a.D + (size_t)h * a.D;
}
__device__ inline size_t lx_attn_row_at(const lx_attn_shape &a, int b, int h, int i) {
  return ((size_t)b * a.H + h) * a.T + i; /* into (B, H, T) */
}
/* The dropout counter of score `at` of this rank's (B, H, T, T): its index
 * in the whole model's heads, as the CPU draws it (lx_dropout_row). */
__device__ inline size_t lx_attn_draw(const lx_attn_shape &a, size_t at) {
  size_t TT = (size_t)a.T * a.T, b = at / ((size_t)a.H * TT);
  return at + (b * (size_t)(a.heads_total - a.H) + (size_t)a.head_base) * TT;
}
/* Whether dropout keeps score `at`: every kernel, forward or backward, draws it so. */
__device__ inline bool lx_attn_kept(const lx_attn_shape &a, size_t at) {
  return lx_cuda_dropout_keep(a.key, lx_attn_draw(a, at), a.threshold);
}

/* Copies rows [first, first + count) of one head (D wide, `stride` apart in
 * global memory) into a float tile with row pitch `pitch`; rows past T are 0. */
__device__ inline void lx_attn_load_tile(float *tile, const lx_bf16 *src, // src: row `first` of the head
                                                size_t stride, int first, int count, int T, int D, int pitch) {
  for (int e = threadIdx.x; e < count * D; e += blockDim.x) {
    int r = e / D, d = e % D;
    tile[r * pitch + d] = first + r < T ? lx_to_float(src[(size_t)r * stride + d]) : 0.0f;
  }
}

/* acc[k] += sum over the tile's first `keys` rows jj of w_jj * tile[jj * pitch + d],
 * for this lane's dimensions d = lane + 32 k, where lane jj holds w_jj: the
 * weights are broadcast by shuffles, one key at a time. */
template <int DIMS_PER_LANE>
__device__ inline void lx_attn_accumulate(float (&acc)[DIMS_PER_LANE], float lane_weight, const float *tile,
                                          int pitch, int keys, int lane, int D) {
  for (int jj = 0; jj < keys; jj++) {
    float w = __shfl_sync(LX_FULL_MASK, lane_weight, jj);
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++) {
      int d = lane + LX_WARP * k;
      if (d < D) acc[k] += w * tile[jj * pitch + d];
    }
  }
}

/* ---- forward: tiled online softmax ------------------------------------------ */

/* Block (query tile, b * H + h); warp w owns rows i0 + 4w .. i0 + 4w + 3; lane
 * l scores key j0 + l of the tile, then the weights are broadcast by shuffles
 * and every lane accumulates its DIMS_PER_LANE output dimensions
 * (d = lane + 32 k). The running max m, sum l and output o are rescaled when
 * the max grows (Milakov & Gimelshein 2018), as the CPU row does. */
template <int DIMS_PER_LANE>
__device__ inline void lx_flash_forward_body(lx_bf16 *out,       // (B, T, H * D)
                                                    float *lse,         // (B, H, T)
                                                    const lx_bf16 *qkv, // (B, T, (H + 2*KVH) * D)
                                                    lx_attn_shape a) {
  extern __shared__ float shared[];
  const int D = a.D, kpitch = D + 1; /* +1: lane l reads row l, so pitch D+1 spreads the banks */
  float *q_tile = shared;                              /* (16, D)   */
  float *k_tile = q_tile + LX_ATTN_QUERY_ROWS * D;     /* (32, D+1) */
  float *v_tile = k_tile + LX_ATTN_KEYS * kpitch;      /* (32, D)   */
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP;
  int b = blockIdx.y / a.H, h = blockIdx.y % a.H, g = h / (a.H / a.KVH);
  int i0 = blockIdx.x * LX_ATTN_QUERY_ROWS, last = min(i0 + LX_ATTN_QUERY_ROWS, a.T) - 1;
  size_t width = lx_attn_qkv_width(a);

  lx_attn_load_tile(q_tile, qkv + lx_attn_q_at(a, b, i0, h), width, i0, LX_ATTN_QUERY_ROWS, a.T, D, D);

  float o[LX_ATTN_ROWS_PER_WARP][DIMS_PER_LANE], m[LX_ATTN_ROWS_PER_WARP], l[LX_ATTN_ROWS_PER_WARP];
#pragma unroll
  for (int r = 0; r < LX_ATTN_ROWS_PER_WARP; r++) {
    m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++)
      o[r][k] = 0.0f;
  }

  for (int j0 = 0; j0 <= last; j0 += LX_ATTN_KEYS) {
    __syncthreads(); /* the previous tile is no longer read */
    lx_attn_load_tile(k_tile, qkv + lx_attn_k_at(a, b, j0, g), width, j0, LX_ATTN_KEYS, a.T, D, kpitch);
    lx_attn_load_tile(v_tile, qkv + lx_attn_v_at(a, b, j0, g), width, j0, LX_ATTN_KEYS, a.T, D, D);
    __syncthreads();
    int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < LX_ATTN_ROWS_PER_WARP; r++) {
      int row = warp * LX_ATTN_ROWS_PER_WARP + r, i = i0 + row;
      if (i > last || j0 > i) continue; /* uniform over the warp */
      float s = -INFINITY;
      if (j <= i) {
        float dot = 0.0f;
        for (int d = 0; d < D; d++)
          dot += q_tile[row * D + d] * k_tile[lane * kpitch + d];
        s = a.scale * dot;
      }
      float new_max = fmaxf(m[r], lx_warp_max(s)); /* finite: key j0 <= i is in the tile */
      float shrink = expf(m[r] - new_max);          /* 0 on the first tile, m = -inf */
      float p = j <= i ? expf(s - new_max) : 0.0f;
      l[r] = l[r] * shrink + lx_warp_sum(p);
      m[r] = new_max;
      size_t score_row = lx_attn_row_at(a, b, h, i) * a.T;
      float weight = j <= i && lx_attn_kept(a, score_row + j) ? p * a.dscale : 0.0f;
#pragma unroll
      for (int k = 0; k < DIMS_PER_LANE; k++)
        o[r][k] *= shrink;
      lx_attn_accumulate<DIMS_PER_LANE>(o[r], weight, v_tile, D, min(LX_ATTN_KEYS, i - j0 + 1), lane, D);
    }
  }

#pragma unroll
  for (int r = 0; r < LX_ATTN_ROWS_PER_WARP; r++) {
    int i = i0 + warp * LX_ATTN_ROWS_PER_WARP + r;
    if (i > last) continue;
    lx_bf16 *o_row = out + lx_attn_out_at(a, b, i, h);
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++) {
      int d = lane + LX_WARP * k;
      if (d < D) o_row[d] = lx_to_bf16(o[r][k] / l[r]);
    }
    if (lane == 0) lse[lx_attn_row_at(a, b, h, i)] = m[r] + logf(l[r]);
  }
}

/* Named kernels per head-size class (D <= 64, 128, 256), so that the
 * resource report names each and every one is compiled. */
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_flash_forward_d64_kernel(lx_bf16 *out, float *lse, const lx_bf16 *qkv, lx_attn_shape a) {
  lx_flash_forward_body<2>(out, lse, qkv, a);
}
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_flash_forward_d128_kernel(lx_bf16 *out, float *lse, const lx_bf16 *qkv, lx_attn_shape a) {
  lx_flash_forward_body<4>(out, lse, qkv, a);
}
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_flash_forward_d256_kernel(lx_bf16 *out, float *lse, const lx_bf16 *qkv, lx_attn_shape a) {
  lx_flash_forward_body<8>(out, lse, qkv, a);
}

/* ---- backward: Di, then dq, then dk and dv -------------------------------------- */

/* Di = dO_i . O_i = sum_j weight_ij (dO_i . v_j), from the saved output. A
 * warp per row, lanes over dimensions, one final warp sum. */
__global__ void lx_attention_delta_kernel(float *delta,        // (B, H, T)
                                          const lx_bf16 *dout, // (B, T, H * D)
                                          const lx_bf16 *out,  // (B, T, H * D)
                                          lx_attn_shape a) {
  size_t row = (size_t)blockIdx.x * (blockDim.x / LX_WARP) + threadIdx.x / LX_WARP;
  if (row >= (size_t)a.B * a.H * a.T) return;
  int lane = threadIdx.x % LX_WARP, i = (int)(row % a.T), h = (int)(row / a.T % a.H), b = (int)(row / a.T / a.H);
  const lx_bf16 *dy = dout + lx_attn_out_at(a, b, i, h), *o = out + lx_attn_out_at(a, b, i, h);
  float sum = 0.0f;
  for (int d = lane; d < a.D; d += LX_WARP)
    sum += lx_to_float(dy[d]) * lx_to_float(o[d]);
  sum = lx_warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

/* For the pair (i, j <= i) seen by this lane: the probability P_ij, recomputed
 * from q.k and lse, whether j survived dropout, and the weight that
 * multiplied v_j (P / (1 - p), or 0). */
__device__ inline void lx_attn_pair(float *prob, float *weight, bool *keep, float dot, float row_lse, size_t at,
                                    const lx_attn_shape &a) {
  *prob = expf(a.scale * dot - row_lse);
  *keep = lx_attn_kept(a, at);
  *weight = *keep ? *prob * a.dscale : 0.0f;
}

/* dq_i += scale * sum_j dS_ij k_j with dS_ij = P_ij (keep * dscale * dO_i . v_j
 * - Di). Same tiling as the forward: lane = key while scoring, lane =
 * dimensions while accumulating, keys in increasing order. */
template <int DIMS_PER_LANE>
__device__ inline void lx_attention_dq_body(lx_bf16 *dqkv,       // (B, T, (H + 2*KVH) * D)
                                                   const lx_bf16 *dout, // (B, T, H * D)
                                                   const lx_bf16 *qkv,  // (B, T, (H + 2*KVH) * D)
                                                   const float *lse,    // (B, H, T)
                                                   const float *delta,  // (B, H, T)
                                                   lx_attn_shape a) {
  extern __shared__ float shared[];
  const int D = a.D, pitch = D + 1;
  float *q_tile = shared;                           /* (16, D)   */
  float *do_tile = q_tile + LX_ATTN_QUERY_ROWS * D; /* (16, D)   */
  float *k_tile = do_tile + LX_ATTN_QUERY_ROWS * D; /* (32, D+1) */
  float *v_tile = k_tile + LX_ATTN_KEYS * pitch;    /* (32, D+1) */
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP;
  int b = blockIdx.y / a.H, h = blockIdx.y % a.H, g = h / (a.H / a.KVH);
  int i0 = blockIdx.x * LX_ATTN_QUERY_ROWS, last = min(i0 + LX_ATTN_QUERY_ROWS, a.T) - 1;
  size_t width = lx_attn_qkv_width(a);

  lx_attn_load_tile(q_tile, qkv + lx_attn_q_at(a, b, i0, h), width, i0, LX_ATTN_QUERY_ROWS, a.T, D, D);
  lx_attn_load_tile(do_tile, dout + lx_attn_out_at(a, b, i0, h), (size_t)a.H * D, i0, LX_ATTN_QUERY_ROWS, a.T, D,
                    D);

  float dq[LX_ATTN_ROWS_PER_WARP][DIMS_PER_LANE], row_lse[LX_ATTN_ROWS_PER_WARP], row_delta[LX_ATTN_ROWS_PER_WARP];
#pragma unroll
  for (int r = 0; r < LX_ATTN_ROWS_PER_WARP; r++) {
    int i = min(i0 + warp * LX_ATTN_ROWS_PER_WARP + r, last);
    row_lse[r] = lse[lx_attn_row_at(a, b, h, i)];
    row_delta[r] = delta[lx_attn_row_at(a, b, h, i)];
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++)
      dq[r][k] = 0.0f;
  }

  for (int j0 = 0; j0 <= last; j0 += LX_ATTN_KEYS) {
    __syncthreads();
    lx_attn_load_tile(k_tile, qkv + lx_attn_k_at(a, b, j0, g), width, j0, LX_ATTN_KEYS, a.T, D, pitch);
    lx_attn_load_tile(v_tile, qkv + lx_attn_v_at(a, b, j0, g), width, j0, LX_ATTN_KEYS, a.T, D, pitch);
    __syncthreads();
    int j = j0 + lane;
#pragma unroll
    for (int r = 0; r < LX_ATTN_ROWS_PER_WARP; r++) {
      int row = warp * LX_ATTN_ROWS_PER_WARP + r, i = i0 + row;
      if (i > last || j0 > i) continue;
      float dscore = 0.0f;
      if (j <= i) {
        float qk = 0.0f, dov = 0.0f;
#pragma unroll 4 /* the compiler's own unrolling spills registers on sm_90 (D <= 64) */
        for (int d = 0; d < D; d++) {
          qk += q_tile[row * D + d] * k_tile[lane * pitch + d];
          dov += do_tile[row * D + d] * v_tile[lane * pitch + d];
        }
        float prob, weight;
        bool keep;
        lx_attn_pair(&prob, &weight, &keep, qk, row_lse[r], lx_attn_row_at(a, b, h, i) * a.T + j, a);
        float dprob = keep ? dov * a.dscale : 0.0f;
        dscore = prob * (dprob - row_delta[r]) * a.scale;
      }
      lx_attn_accumulate<DIMS_PER_LANE>(dq[r], dscore, k_tile, pitch, min(LX_ATTN_KEYS, i - j0 + 1), lane, D);
    }
  }

#pragma unroll
  for (int r = 0; r < LX_ATTN_ROWS_PER_WARP; r++) {
    int i = i0 + warp * LX_ATTN_ROWS_PER_WARP + r;
    if (i > last) continue;
    lx_bf16 *dq_row = dqkv + lx_attn_q_at(a, b, i, h);
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++) {
      int d = lane + LX_WARP * k;
      if (d < D) dq_row[d] = lx_to_bf16(lx_to_float(dq_row[d]) + dq[r][k]);
    }
  }
}

__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_attention_dq_d64_kernel(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                               const float *delta, lx_attn_shape a) {
  lx_attention_dq_body<2>(dqkv, dout, qkv, lse, delta, a);
}
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_attention_dq_d128_kernel(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                                const float *delta, lx_attn_shape a) {
  lx_attention_dq_body<4>(dqkv, dout, qkv, lse, delta, a);
}
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_attention_dq_d256_kernel(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                                const float *delta, lx_attn_shape a) {
  lx_attention_dq_body<8>(dqkv, dout, qkv, lse, delta, a);
}

#define LX_ATTN_KEYS_PER_WARP (LX_ATTN_KEYS / LX_ATTN_WARPS) /* 8 keys' dk, dv per warp */

/* Block (key tile of 32, b * KVH + g). For every query head of the group and
 * every query row i >= j0, four rows at a time:
 *   scoring: warp w takes row i + w, lane l key j0 + l, and leaves the weight
 *            and dS of the pair in shared memory;
 *   accumulating: warp w owns keys j0 + 8w .. j0 + 8w + 7, lane l dimensions
 *            l + 32 k: dv_j += weight dO_i, dk_j += dS q_i, rows in order.
 * Each dk, dv element lives in one thread's registers and sums its (head,
 * row) contributions in the same order on every run. */
template <int DIMS_PER_LANE>
__device__ inline void lx_attention_dkdv_body(lx_bf16 *dqkv,       // (B, T, (H + 2*KVH) * D)
                                                     const lx_bf16 *dout, // (B, T, H * D)
                                                     const lx_bf16 *qkv,  // (B, T, (H + 2*KVH) * D)
                                                     const float *lse,    // (B, H, T)
                                                     const float *delta,  // (B, H, T)
                                                     lx_attn_shape a) {
  extern __shared__ float shared[];
  const int D = a.D, pitch = D + 1;
  float *k_tile = shared;                              /* (32, D+1) */
  float *v_tile = k_tile + LX_ATTN_KEYS * pitch;       /* (32, D+1) */
  float *q_rows = v_tile + LX_ATTN_KEYS * pitch;       /* (4, D)    */
  float *do_rows = q_rows + LX_ATTN_WARPS * D;         /* (4, D)    */
  float *pair_weight = do_rows + LX_ATTN_WARPS * D;    /* (4, 32)   */
  float *pair_dscore = pair_weight + LX_ATTN_WARPS * LX_ATTN_KEYS; /* (4, 32) */
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP;
  int b = blockIdx.y / a.KVH, g = blockIdx.y % a.KVH, group = a.H / a.KVH;
  int j0 = blockIdx.x * LX_ATTN_KEYS;
  size_t width = lx_attn_qkv_width(a);

  lx_attn_load_tile(k_tile, qkv + lx_attn_k_at(a, b, j0, g), width, j0, LX_ATTN_KEYS, a.T, D, pitch);
  lx_attn_load_tile(v_tile, qkv + lx_attn_v_at(a, b, j0, g), width, j0, LX_ATTN_KEYS, a.T, D, pitch);

  float dk[LX_ATTN_KEYS_PER_WARP][DIMS_PER_LANE], dv[LX_ATTN_KEYS_PER_WARP][DIMS_PER_LANE];
#pragma unroll
  for (int jk = 0; jk < LX_ATTN_KEYS_PER_WARP; jk++)
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++)
      dk[jk][k] = 0.0f, dv[jk][k] = 0.0f;

  for (int h = g * group; h < (g + 1) * group; h++)
    for (int i_base = j0; i_base < a.T; i_base += LX_ATTN_WARPS) {
      __syncthreads(); /* the previous rows' pairs are consumed */
      for (int e = threadIdx.x; e < LX_ATTN_WARPS * D; e += blockDim.x) {
        int r = e / D, d = e % D, i = i_base + r;
        q_rows[e] = i < a.T ? lx_to_float(qkv[lx_attn_q_at(a, b, i, h) + d]) : 0.0f;
        do_rows[e] = i < a.T ? lx_to_float(dout[lx_attn_out_at(a, b, i, h) + d]) : 0.0f;
      }
      __syncthreads();
      { /* scoring */
        int i = i_base + warp, j = j0 + lane;
        float weight = 0.0f, dscore = 0.0f;
        if (i < a.T && j <= i) {
          float qk = 0.0f, dov = 0.0f;
          for (int d = 0; d < D; d++) {
            qk += q_rows[warp * D + d] * k_tile[lane * pitch + d];
            dov += do_rows[warp * D + d] * v_tile[lane * pitch + d];
          }
          size_t row = lx_attn_row_at(a, b, h, i);
          float prob;
          bool keep;
          lx_attn_pair(&prob, &weight, &keep, qk, lse[row], row * a.T + j, a);
          float dprob = keep ? dov * a.dscale : 0.0f;
          dscore = prob * (dprob - delta[row]) * a.scale;
        }
        pair_weight[warp * LX_ATTN_KEYS + lane] = weight;
        pair_dscore[warp * LX_ATTN_KEYS + lane] = dscore;
      }
      __syncthreads();
      /* accumulating, rows in increasing order */
      for (int r = 0; r < LX_ATTN_WARPS && i_base + r < a.T; r++) {
        float q_d[DIMS_PER_LANE], do_d[DIMS_PER_LANE];
#pragma unroll
        for (int k = 0; k < DIMS_PER_LANE; k++) {
          int d = min(lane + LX_WARP * k, D - 1); /* clamped reads; stores below are guarded */
          q_d[k] = q_rows[r * D + d];
          do_d[k] = do_rows[r * D + d];
        }
#pragma unroll
        for (int jk = 0; jk < LX_ATTN_KEYS_PER_WARP; jk++) {
          int key = warp * LX_ATTN_KEYS_PER_WARP + jk;
          float weight = pair_weight[r * LX_ATTN_KEYS + key], dscore = pair_dscore[r * LX_ATTN_KEYS + key];
#pragma unroll
          for (int k = 0; k < DIMS_PER_LANE; k++) {
            dv[jk][k] += weight * do_d[k];
            dk[jk][k] += dscore * q_d[k];
          }
        }
      }
    }

#pragma unroll
  for (int jk = 0; jk < LX_ATTN_KEYS_PER_WARP; jk++) {
    int j = j0 + warp * LX_ATTN_KEYS_PER_WARP + jk;
    if (j >= a.T) continue;
    lx_bf16 *dk_row = dqkv + lx_attn_k_at(a, b, j, g), *dv_row = dqkv + lx_attn_v_at(a, b, j, g);
#pragma unroll
    for (int k = 0; k < DIMS_PER_LANE; k++) {
      int d = lane + LX_WARP * k;
      if (d < D) {
        dk_row[d] = lx_to_bf16(lx_to_float(dk_row[d]) + dk[jk][k]);
        dv_row[d] = lx_to_bf16(lx_to_float(dv_row[d]) + dv[jk][k]);
      }
    }
  }
}

__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_attention_dkdv_d64_kernel(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                                 const float *delta, lx_attn_shape a) {
  lx_attention_dkdv_body<2>(dqkv, dout, qkv, lse, delta, a);
}
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_attention_dkdv_d128_kernel(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                                  const float *delta, lx_attn_shape a) {
  lx_attention_dkdv_body<4>(dqkv, dout, qkv, lse, delta, a);
}
__global__ void __launch_bounds__(LX_ATTN_THREADS)
    lx_attention_dkdv_d256_kernel(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                                  const float *delta, lx_attn_shape a) {
  lx_attention_dkdv_body<8>(dqkv, dout, qkv, lse, delta, a);
}

/* ---- launchers ------------------------------------------------------------------- */

inline lx_attn_shape lx_attn_shape_checked(int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                           uint64_t stream_id, int head_base, int heads_total) {
  LX_CUDA_REQUIRE(B > 0 && T > 0 && D > 0 && D <= LX_ATTN_MAX_HEAD_DIM && KVH > 0 && H % KVH == 0);
  LX_CUDA_REQUIRE(head_base >= 0 && head_base + H <= heads_total);
  LX_CUDA_REQUIRE((size_t)B * H < 65536 && (size_t)B * KVH < 65536);
  lx_attn_shape a;
  a.B = B, a.T = T, a.H = H, a.KVH = KVH, a.D = D;
  a.scale = (float)(1.0 / sqrt((double)D));
  a.dscale = (float)(1.0 / (1.0 - p));
  a.threshold = lx_cuda_dropout_threshold(p);
  a.key = lx_cuda_rng_key(seed, stream_id);
  a.head_base = head_base, a.heads_total = heads_total;
  return a;
}

/* Kernels whose shared tile outgrows the default 48 KB must opt in. */
inline void lx_attn_allow_shared(const void *kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

inline void lx_attn_forward_tiles(lx_bf16 *out, float *lse, const lx_bf16 *qkv, lx_attn_shape a,
                                         cudaStream_t stream) {
  size_t bytes = sizeof(float) * ((size_t)LX_ATTN_QUERY_ROWS * a.D + (size_t)LX_ATTN_KEYS * (a.D + 1) +
                                  (size_t)LX_ATTN_KEYS * a.D);
  dim3 grid(lx_ceil_div((size_t)a.T, LX_ATTN_QUERY_ROWS), a.B * a.H);
  void (*kernel)(lx_bf16 *, float *, const lx_bf16 *, lx_attn_shape) =
      a.D <= 64 ? lx_flash_forward_d64_kernel : a.D <= 128 ? lx_flash_forward_d128_kernel : lx_flash_forward_d256_kernel;
  lx_attn_allow_shared((const void *)kernel, bytes);
  kernel<<<grid, LX_ATTN_THREADS, bytes, stream>>>(out, lse, qkv, a);
  LX_CUDA_LAUNCHED();
}

/* out, lse = causal attention of qkv; dropout p on the weights, drawn from
 * (seed, stream_id) with the CPU's indices. */
LX_CUDA_API void lx_lynx_flash_attention_forward(const lx_ctx *ctx,
                                                 lx_bf16 *out,       // (B, T, H * D)
                                                 float *lse,         // (B, H, T)
                                                 const lx_bf16 *qkv, // (B, T, (H + 2*KVH) * D)
                                                 int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                                 uint64_t stream_id, int head_base, int heads_total) {
  lx_attn_shape a = lx_attn_shape_checked(B, T, H, KVH, D, p, seed, stream_id, head_base, heads_total);
  lx_attn_forward_tiles(out, lse, qkv, a, ctx->stream);
}

LX_CUDA_API size_t lx_cuda_flash_attention_scratch_floats(int B, int T, int H) {
  return (size_t)B * H * T; /* the backward's Di */
}

inline void lx_attn_backward_tiles(lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv, const float *lse,
                                          const float *delta, lx_attn_shape a, cudaStream_t stream) {
  typedef void (*backward_kernel)(lx_bf16 *, const lx_bf16 *, const lx_bf16 *, const float *, const float *,
                                  lx_attn_shape);
  backward_kernel dq = a.D <= 64 ? lx_attention_dq_d64_kernel
                       : a.D <= 128 ? lx_attention_dq_d128_kernel
                                    : lx_attention_dq_d256_kernel;
  backward_kernel dkdv = a.D <= 64 ? lx_attention_dkdv_d64_kernel
                         : a.D <= 128 ? lx_attention_dkdv_d128_kernel
                                      : lx_attention_dkdv_d256_kernel;
  size_t dq_bytes = sizeof(float) * (2 * (size_t)LX_ATTN_QUERY_ROWS * a.D + 2 * (size_t)LX_ATTN_KEYS * (a.D + 1));
  size_t dkdv_bytes = sizeof(float) * (2 * (size_t)LX_ATTN_KEYS * (a.D + 1) + 2 * (size_t)LX_ATTN_WARPS * a.D +
                                       2 * (size_t)LX_ATTN_WARPS * LX_ATTN_KEYS);
  lx_attn_allow_shared((const void *)dq, dq_bytes);
  lx_attn_allow_shared((const void *)dkdv, dkdv_bytes);
  dim3 dq_grid(lx_ceil_div((size_t)a.T, LX_ATTN_QUERY_ROWS), a.B * a.H);
  dq<<<dq_grid, LX_ATTN_THREADS, dq_bytes, stream>>>(dqkv, dout, qkv, lse, delta, a);
  LX_CUDA_LAUNCHED();
  dim3 dkdv_grid(lx_ceil_div((size_t)a.T, LX_ATTN_KEYS), a.B * a.KVH);
  dkdv<<<dkdv_grid, LX_ATTN_THREADS, dkdv_bytes, stream>>>(dqkv, dout, qkv, lse, delta, a);
  LX_CUDA_LAUNCHED();
}

#define LX_ATTN_ROWS_PER_BLOCK 8 /* warps per block of the row kernels */

/* dqkv += the gradients of the flash forward (LX_GRAD_WRITE: zeroed first);
 * P recomputed from qkv and lse, the dropout mask redrawn from (seed, stream_id). */
LX_CUDA_API void lx_lynx_flash_attention_backward(const lx_ctx *ctx,
                                                  lx_bf16 *dqkv,       // (B, T, (H + 2*KVH) * D)
                                                  const lx_bf16 *dout, // (B, T, H * D)
                                                  const lx_bf16 *qkv,  // (B, T, (H + 2*KVH) * D)
                                                  const lx_bf16 *out,  // (B, T, H * D)
                                                  const float *lse,    // (B, H, T)
                                                  int B, int T, int H, int KVH, int D, double p,
                                                  uint64_t seed, uint64_t stream_id, int head_base,
                                                  int heads_total, lx_grad_mode mode) {
  lx_attn_shape a = lx_attn_shape_checked(B, T, H, KVH, D, p, seed, stream_id, head_base, heads_total);
  if (mode == LX_GRAD_WRITE)
    CUDA_CHECK(cudaMemsetAsync(dqkv, 0, sizeof(lx_bf16) * (size_t)B * T * (H + 2 * KVH) * D, ctx->stream));
  size_t rows = (size_t)B * H * T;
  float *delta = lx_scratch(ctx, lx_cuda_flash_attention_scratch_floats(B, T, H));
  lx_attention_delta_kernel<<<lx_ceil_div(rows, LX_ATTN_ROWS_PER_BLOCK), LX_ATTN_ROWS_PER_BLOCK * LX_WARP, 0,
                              ctx->stream>>>(delta, dout, out, a);
  LX_CUDA_LAUNCHED();
  lx_attn_backward_tiles(dqkv, dout, qkv, lse, delta, a, ctx->stream);
}

#ifndef LX_CUDNN_ATTENTION
/* A program's flash attention: lynx's kernels, unless it is built with
 * ATTENTION=cudnn (LX_CUDNN_ATTENTION), whose lx_cuda_cudnn_attention.cu
 * defines these two instead. */
LX_CUDA_API void lx_flash_attention_forward(const lx_ctx *ctx, lx_bf16 *out, float *lse, const lx_bf16 *qkv,
                                            int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                                            uint64_t stream_id, int head_base, int heads_total) {
  lx_lynx_flash_attention_forward(ctx, out, lse, qkv, B, T, H, KVH, D, p, seed, stream_id, head_base,
                                  heads_total);
}

LX_CUDA_API void lx_flash_attention_backward(const lx_ctx *ctx, lx_bf16 *dqkv, const lx_bf16 *dout,
                                             const lx_bf16 *qkv, const lx_bf16 *out, const float *lse, int B,
                                             int T, int H, int KVH, int D, double p, uint64_t seed,
                                             uint64_t stream_id, int head_base, int heads_total,
                                             lx_grad_mode mode) {
  lx_lynx_flash_attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, H, KVH, D, p, seed, stream_id,
                                   head_base, heads_total, mode);
}
#else
#include "lx_cuda_api.h" /* their prototypes */
#endif

/* ---- rope: rotary position embeddings on the q and k heads --------------------- */

/* Pairs (x[2m], x[2m+1]) of every q and k head at position t turn by the angle
 * t * base^(-2m / D), computed in double as the CPU does (t reaches the
 * thousands, where a float angle loses its low bits); v passes through.
 * A thread per (b, t, m), looping over the heads. direction -1 with
 * accumulate is the backward: the transpose of a rotation is its inverse. */
__global__ void lx_cuda_rope_kernel(lx_bf16 *out,       // (B, T, (H + 2*KVH) * D)
                                    const lx_bf16 *inp, // (B, T, (H + 2*KVH) * D)
                                    int B, int T, int H, int KVH, int D, double base, float direction,
                                    int accumulate) {
  size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x, half = (size_t)D / 2;
  if (e >= (size_t)B * T * half) return;
  int m = (int)(e % half);
  size_t bt = e / half;
  int t = (int)(bt % T);
  size_t W = (size_t)(H + 2 * KVH) * D, rotated = (size_t)(H + KVH) * D;
  const lx_bf16 *x = inp + bt * W;
  lx_bf16 *y = out + bt * W;
  double angle = t * pow(base, -2.0 * m / D);
  float c = (float)cos(angle), s = direction * (float)sin(angle);
  for (size_t head = 0; head < rotated; head += (size_t)D) {
    size_t at = head + 2 * (size_t)m;
    float x0 = lx_to_float(x[at]), x1 = lx_to_float(x[at + 1]);
    float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
    if (accumulate) y0 += lx_to_float(y[at]), y1 += lx_to_float(y[at + 1]);
    y[at] = lx_to_bf16(y0);
    y[at + 1] = lx_to_bf16(y1);
  }
  /* the v heads: this thread copies its pair of each */
  for (size_t head = rotated; head < W; head += (size_t)D) {
    size_t at = head + 2 * (size_t)m;
    float v0 = lx_to_float(x[at]), v1 = lx_to_float(x[at + 1]);
    if (accumulate) v0 += lx_to_float(y[at]), v1 += lx_to_float(y[at + 1]);
    y[at] = lx_to_bf16(v0);
    y[at + 1] = lx_to_bf16(v1);
  }
}

LX_CUDA_API void lx_cuda_rope_launch(lx_bf16 *out, const lx_bf16 *inp, int B, int T, int H, int KVH, int D,
                                       double base, float direction, int accumulate, cudaStream_t stream) {
  LX_CUDA_REQUIRE(B > 0 && T > 0 && D > 0 && D % 2 == 0 && KVH > 0 && H % KVH == 0);
  size_t threads = (size_t)B * T * (D / 2);
  lx_cuda_rope_kernel<<<lx_ceil_div(threads, 256), 256, 0, stream>>>(out, inp, B, T, H, KVH, D, base, direction,
                                                                     accumulate);
  LX_CUDA_LAUNCHED();
}

LX_CUDA_API void lx_rope_forward(const lx_ctx *ctx,
                                 lx_bf16 *out,       // (B, T, (H + 2*KVH) * D)
                                 const lx_bf16 *inp, // (B, T, (H + 2*KVH) * D)
                                 int B, int T, int H, int KVH, int D, double base) {
  lx_cuda_rope_launch(out, inp, B, T, H, KVH, D, base, 1.0f, 0, ctx->stream);
}

LX_CUDA_API void lx_rope_backward(const lx_ctx *ctx,
                                  lx_bf16 *dinp,       // (B, T, (H + 2*KVH) * D)
                                  const lx_bf16 *dout, // (B, T, (H + 2*KVH) * D)
                                  int B, int T, int H, int KVH, int D, double base) {
  lx_cuda_rope_launch(dinp, dout, B, T, H, KVH, D, base, -1.0f, 1, ctx->stream);
}

#endif
