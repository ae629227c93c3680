/* lx_cuda_norm.cuh — layernorm and rmsnorm, the GPU twins of
 * templates/cpu/lx_norm.h, with the residual add fused into the forward.
 *
 * As on the CPU the IR charges a norm only for its saved input, so the
 * forward keeps no mean or rstd: the backward recomputes them from the input.
 * The fused form writes the residual sum (the next block's saved input and
 * the norm's input) and the normalised output in one pass over the row; the
 * statistics are taken of the bf16-rounded sum, which is exactly what the
 * backward will read back, so forward and backward agree on mean and rstd. */
#ifndef LX_CUDA_NORM_CUH
#define LX_CUDA_NORM_CUH

#include "lx_cuda_api.h" /* LX_CUDA_NORM_EPS */
#include "lx_cuda_common.cuh"

/* One warp per row, LX_CUDA_NORM_ROWS rows a block: a row's sums are warp
 * shuffles in a fixed order, with no block barrier. */
#define LX_CUDA_NORM_ROWS 8
#define LX_CUDA_NORM_THREADS (LX_CUDA_NORM_ROWS * LX_WARP)

/* f(i) for the first element i of each of this lane's pieces of a row of C:
 * lane l takes the pieces l, l + 32, ... */
template <int W, typename F>
__device__ inline void lx_row_pieces(int C, F f) {
  for (int i = (threadIdx.x % LX_WARP) * W; i < C; i += LX_WARP * W)
    f(i);
}

/* x[i .. i + W) of a row: the input, or the bf16-rounded residual sum when fused. */
template <int W>
__device__ inline void lx_norm_input(float x[W], const lx_bf16 *inp, // (C)
                                     const lx_bf16 *branch,         // (C) or NULL
                                     int i) {
  lx_load_piece<W>(x, inp + i);
  if (!branch) return;
  float y[W];
  lx_load_piece<W>(y, branch + i);
  for (int k = 0; k < W; k++)
    x[k] = lx_to_float(lx_to_bf16(x[k] + y[k]));
}

/* Mean and rstd of a row (mean 0 for rmsnorm) by its warp, two passes as on
 * the CPU: the one-pass E[x^2] - E[x]^2 cancels badly in float. */
template <int W>
__device__ inline float2 lx_norm_row_stats(const lx_bf16 *inp,    // (C)
                                           const lx_bf16 *branch, // (C) or NULL
                                           int C, bool rms) {
  float mean = 0.0f;
  if (!rms) {
    float sum = 0.0f;
    lx_row_pieces<W>(C, [&](int i) {
      float x[W];
      lx_norm_input<W>(x, inp, branch, i);
      for (int k = 0; k < W; k++)
        sum += x[k];
    });
    mean = lx_warp_sum(sum) / C;
  }
  float squares = 0.0f;
  lx_row_pieces<W>(C, [&](int i) {
    float x[W];
    lx_norm_input<W>(x, inp, branch, i);
    for (int k = 0; k < W; k++)
      squares += (x[k] - mean) * (x[k] - mean);
  });
  return make_float2(mean, rsqrtf(lx_warp_sum(squares) / C + (float)LX_CUDA_NORM_EPS));
}

/* out = norm(x) * weight (+ bias), x = inp (+ branch, then also written to
 * residual_out). rms: x * rstd * weight, no mean and no bias. */
template <int W>
__global__ void __launch_bounds__(LX_CUDA_NORM_THREADS)
    lx_cuda_norm_forward_kernel(lx_bf16 *out,           // (BT, C)
                                lx_bf16 *residual_out,  // (BT, C) or NULL when not fused
                                const lx_bf16 *inp,     // (BT, C)
                                const lx_bf16 *branch,  // (BT, C) or NULL when not fused
                                const lx_bf16 *weight,  // (C)
                                const lx_bf16 *bias,    // (C) or NULL (rmsnorm)
                                int BT, int C, int rms) {
  int r = blockIdx.x * LX_CUDA_NORM_ROWS + threadIdx.x / LX_WARP;
  if (r >= BT) return; /* the whole warp: no barrier follows */
  size_t row = (size_t)r * C;
  const lx_bf16 *x = inp + row, *y = branch ? branch + row : NULL;
  float2 stats = lx_norm_row_stats<W>(x, y, C, rms != 0);
  lx_row_pieces<W>(C, [&](int i) {
    float value[W], w[W], b[W], normed[W];
    lx_norm_input<W>(value, x, y, i);
    if (residual_out) lx_store_piece<W>(residual_out + row + i, value);
    lx_load_piece<W>(w, weight + i);
    if (bias) lx_load_piece<W>(b, bias + i);
    for (int k = 0; k < W; k++)
      normed[k] = (value[k] - stats.x) * stats.y * w[k] + (bias ? b[k] : 0.0f);
    lx_store_piece<W>(out + row + i, normed);
  });
}

LX_CUDA_API void lx_cuda_norm_forward_launch(lx_bf16 *out, lx_bf16 *residual_out, const lx_bf16 *inp,
                                               const lx_bf16 *branch, const lx_bf16 *weight, const lx_bf16 *bias,
                                               int BT, int C, int rms, cudaStream_t stream) {
  LX_CUDA_REQUIRE(BT > 0 && C > 0);
  unsigned blocks = lx_ceil_div((size_t)BT, LX_CUDA_NORM_ROWS);
  if (lx_pieces_fit((size_t)C, {out, residual_out, inp, branch, weight, bias}))
    lx_cuda_norm_forward_kernel<LX_VEC><<<blocks, LX_CUDA_NORM_THREADS, 0, stream>>>(out, residual_out, inp, branch,
                                                                                     weight, bias, BT, C, rms);
  else
    lx_cuda_norm_forward_kernel<1><<<blocks, LX_CUDA_NORM_THREADS, 0, stream>>>(out, residual_out, inp, branch,
                                                                                weight, bias, BT, C, rms);
  LX_CUDA_LAUNCHED();
}

LX_CUDA_API void lx_layernorm_forward(const lx_ctx *ctx,
                                      lx_bf16 *out,          // (BT, C)
                                      const lx_bf16 *inp,    // (BT, C)
                                      const lx_bf16 *weight, // (C)
                                      const lx_bf16 *bias,   // (C)
                                      int BT, int C) {
  lx_cuda_norm_forward_launch(out, NULL, inp, NULL, weight, bias, BT, C, 0, ctx->stream);
}

/* residual_out = residual + branch; out = layernorm(residual_out). */
LX_CUDA_API void lx_residual_layernorm_forward(const lx_ctx *ctx,
                                               lx_bf16 *residual_out,   // (BT, C)
                                               lx_bf16 *out,            // (BT, C)
                                               const lx_bf16 *residual, // (BT, C)
                                               const lx_bf16 *branch,   // (BT, C)
                                               const lx_bf16 *weight,   // (C)
                                               const lx_bf16 *bias,     // (C)
                                               int BT, int C) {
  lx_cuda_norm_forward_launch(out, residual_out, residual, branch, weight, bias, BT, C, 0, ctx->stream);
}

LX_CUDA_API void lx_rmsnorm_forward(const lx_ctx *ctx,
                                    lx_bf16 *out,          // (BT, C)
                                    const lx_bf16 *inp,    // (BT, C)
                                    const lx_bf16 *weight, // (C)
                                    int BT, int C) {
  lx_cuda_norm_forward_launch(out, NULL, inp, NULL, weight, NULL, BT, C, 1, ctx->stream);
}

/* residual_out = residual + branch; out = rmsnorm(residual_out). */
LX_CUDA_API void lx_residual_rmsnorm_forward(const lx_ctx *ctx,
                                             lx_bf16 *residual_out,   // (BT, C)
                                             lx_bf16 *out,            // (BT, C)
                                             const lx_bf16 *residual, // (BT, C)
                                             const lx_bf16 *branch,   // (BT, C)
                                             const lx_bf16 *weight,   // (C)
                                             int BT, int C) {
  lx_cuda_norm_forward_launch(out, residual_out, residual, branch, weight, NULL, BT, C, 1, ctx->stream);
}

/* ---- backward ---------------------------------------------------------------- */

/* The scratch: (mean, rstd) per row, then the per-chunk partial sums of the
 * weight and bias gradients. */
LX_CUDA_API size_t lx_cuda_norm_backward_scratch_floats(int BT, int C) {
  return 2 * (size_t)BT + 2 * (size_t)lx_cuda_column_chunks(BT) * C;
}

/* dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = w * dy (layernorm);
 * rmsnorm drops the mean(g) term and has xhat = x * rstd. One warp per row;
 * saves the row's statistics for the parameter-gradient pass. */
template <int W>
__global__ void __launch_bounds__(LX_CUDA_NORM_THREADS)
    lx_cuda_norm_backward_input_kernel(lx_bf16 *dinp,         // (BT, C)
                                       float *stats,          // (BT, 2) mean, rstd
                                       const lx_bf16 *dout,   // (BT, C)
                                       const lx_bf16 *inp,    // (BT, C)
                                       const lx_bf16 *weight, // (C)
                                       int BT, int C, int rms) {
  int r = blockIdx.x * LX_CUDA_NORM_ROWS + threadIdx.x / LX_WARP;
  if (r >= BT) return; /* the whole warp: no barrier follows */
  size_t row = (size_t)r * C;
  const lx_bf16 *x = inp + row, *dy = dout + row;
  float2 s = lx_norm_row_stats<W>(x, NULL, C, rms != 0);
  float sum_g = 0.0f, sum_g_centred = 0.0f; /* sums of g and g (x - mean) */
  lx_row_pieces<W>(C, [&](int i) {
    float v[W], w[W], d[W];
    lx_load_piece<W>(v, x + i);
    lx_load_piece<W>(w, weight + i);
    lx_load_piece<W>(d, dy + i);
    for (int k = 0; k < W; k++) {
      sum_g += w[k] * d[k];
      sum_g_centred += w[k] * d[k] * (v[k] - s.x);
    }
  });
  float mean_g = rms ? 0.0f : lx_warp_sum(sum_g) / C;
  float mean_gx = lx_warp_sum(sum_g_centred) * s.y / C;
  lx_row_pieces<W>(C, [&](int i) {
    float v[W], w[W], d[W], dx[W];
    lx_load_piece<W>(v, x + i);
    lx_load_piece<W>(w, weight + i);
    lx_load_piece<W>(d, dy + i);
    lx_load_piece<W>(dx, dinp + row + i);
    for (int k = 0; k < W; k++) {
      float xhat = (v[k] - s.x) * s.y;
      dx[k] += s.y * (w[k] * d[k] - mean_g - xhat * mean_gx);
    }
    lx_store_piece<W>(dinp + row + i, dx);
  });
  if (threadIdx.x % LX_WARP == 0) {
    stats[2 * (size_t)r] = s.x;
    stats[2 * (size_t)r + 1] = s.y;
  }
}

/* Per chunk of rows: dweight partial = sum dy * xhat, dbias partial = sum dy
 * (lx_column_partials). */
template <int N>
__global__ void __launch_bounds__(LX_CUDA_COLUMN_THREADS)
    lx_cuda_norm_param_partials_kernel(float *dweight_partials, // (chunks, C)
                                       float *dbias_partials,   // (chunks, C), N = 2; layernorm
                                       const float *stats,      // (BT, 2)
                                       const lx_bf16 *dout,     // (BT, C)
                                       const lx_bf16 *inp,      // (BT, C)
                                       int BT, int C) {
  float *const out[2] = {dweight_partials, dbias_partials};
  lx_column_partials<N>(out, BT, C, [=](int r, int c, float *sum) {
    float dy = lx_to_float(dout[(size_t)r * C + c]);
    sum[0] += dy * (lx_to_float(inp[(size_t)r * C + c]) - stats[2 * r]) * stats[2 * r + 1];
    if (N == 2) sum[N - 1] += dy;
  });
}

LX_CUDA_API void lx_cuda_norm_backward_launch(lx_bf16 *dinp, float *dweight, float *dbias, float *scratch,
                                                const lx_bf16 *dout, const lx_bf16 *inp, const lx_bf16 *weight,
                                                int BT, int C, int rms, cudaStream_t stream) {
  LX_CUDA_REQUIRE(BT > 0 && C > 0 && scratch != NULL);
  unsigned chunks = lx_cuda_column_chunks(BT);
  float *stats = scratch, *dweight_partials = scratch + 2 * (size_t)BT;
  float *dbias_partials = dweight_partials + (size_t)chunks * C;
  unsigned blocks = lx_ceil_div((size_t)BT, LX_CUDA_NORM_ROWS);
  if (lx_pieces_fit((size_t)C, {dinp, dout, inp, weight}))
    lx_cuda_norm_backward_input_kernel<LX_VEC><<<blocks, LX_CUDA_NORM_THREADS, 0, stream>>>(dinp, stats, dout, inp,
                                                                                            weight, BT, C, rms);
  else
    lx_cuda_norm_backward_input_kernel<1><<<blocks, LX_CUDA_NORM_THREADS, 0, stream>>>(dinp, stats, dout, inp, weight,
                                                                                       BT, C, rms);
  LX_CUDA_LAUNCHED();
  if (!dweight) return; /* fine-tuning: the norm's parameters are frozen */
  if (dbias)
    lx_cuda_norm_param_partials_kernel<2><<<lx_column_grid(BT, C), LX_CUDA_COLUMN_THREADS, 0, stream>>>(
        dweight_partials, dbias_partials, stats, dout, inp, BT, C);
  else
    lx_cuda_norm_param_partials_kernel<1><<<lx_column_grid(BT, C), LX_CUDA_COLUMN_THREADS, 0, stream>>>(
        dweight_partials, NULL, stats, dout, inp, BT, C);
  LX_CUDA_LAUNCHED();
  lx_cuda_sum_partials_kernel<<<lx_ceil_div((size_t)C, 256), 256, 0, stream>>>(dweight, dweight_partials,
                                                                              (int)chunks, C);
  LX_CUDA_LAUNCHED();
  if (dbias) {
    lx_cuda_sum_partials_kernel<<<lx_ceil_div((size_t)C, 256), 256, 0, stream>>>(dbias, dbias_partials,
                                                                                (int)chunks, C);
    LX_CUDA_LAUNCHED();
  }
}

/* dinp, dweight, dbias += the layernorm gradients; mean and rstd recomputed
 * from inp (the only thing the forward saved). */
LX_CUDA_API void lx_layernorm_backward(const lx_ctx *ctx,
                                       lx_bf16 *dinp,         // (BT, C)
                                       float *dweight,        // (C) or NULL (frozen)
                                       float *dbias,          // (C)
                                       const lx_bf16 *dout,   // (BT, C)
                                       const lx_bf16 *inp,    // (BT, C)
                                       const lx_bf16 *weight, // (C)
                                       int BT, int C) {
  lx_cuda_norm_backward_launch(dinp, dweight, dbias, lx_scratch(ctx, lx_cuda_norm_backward_scratch_floats(BT, C)),
                               dout, inp, weight, BT, C, 0, ctx->stream);
}

LX_CUDA_API void lx_rmsnorm_backward(const lx_ctx *ctx,
                                     lx_bf16 *dinp,         // (BT, C)
                                     float *dweight,        // (C)
                                     const lx_bf16 *dout,   // (BT, C)
                                     const lx_bf16 *inp,    // (BT, C)
                                     const lx_bf16 *weight, // (C)
                                     int BT, int C) {
  lx_cuda_norm_backward_launch(dinp, dweight, NULL, lx_scratch(ctx, lx_cuda_norm_backward_scratch_floats(BT, C)),
                               dout, inp, weight, BT, C, 1, ctx->stream);
}

#endif
