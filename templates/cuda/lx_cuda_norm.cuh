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

/* One block per row; a fixed block size fixes the order of the row sums. */
#define LX_CUDA_NORM_THREADS 256

/* x[i] of a row: the input, or the bf16-rounded residual sum when fused. */
__device__ inline float lx_norm_input(const lx_bf16 *inp,    // (C)
                                             const lx_bf16 *branch, // (C) or NULL
                                             int i) {
  if (!branch) return lx_to_float(inp[i]);
  return lx_to_float(lx_to_bf16(lx_to_float(inp[i]) + lx_to_float(branch[i])));
}

/* Mean and rstd of a row (mean 0 for rmsnorm), two passes as on the CPU: the
 * one-pass E[x^2] - E[x]^2 cancels badly in float. */
__device__ inline float2 lx_norm_row_stats(const lx_bf16 *inp,    // (C)
                                                  const lx_bf16 *branch, // (C) or NULL
                                                  int C, bool rms, float *slots) {
  float mean = 0.0f;
  if (!rms) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
      sum += lx_norm_input(inp, branch, i);
    mean = lx_block_sum(sum, slots) / C;
  }
  float squares = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float centred = lx_norm_input(inp, branch, i) - mean;
    squares += centred * centred;
  }
  float var = lx_block_sum(squares, slots) / C;
  return make_float2(mean, rsqrtf(var + (float)LX_CUDA_NORM_EPS));
}

/* out = norm(x) * weight (+ bias), x = inp (+ branch, then also written to
 * residual_out). rms: x * rstd * weight, no mean and no bias. */
__global__ void __launch_bounds__(LX_CUDA_NORM_THREADS)
    lx_cuda_norm_forward_kernel(lx_bf16 *out,           // (BT, C)
                                lx_bf16 *residual_out,  // (BT, C) or NULL when not fused
                                const lx_bf16 *inp,     // (BT, C)
                                const lx_bf16 *branch,  // (BT, C) or NULL when not fused
                                const lx_bf16 *weight,  // (C)
                                const lx_bf16 *bias,    // (C) or NULL (rmsnorm)
                                int C, int rms) {
  __shared__ float slots[LX_WARP];
  size_t row = (size_t)blockIdx.x * C;
  const lx_bf16 *x = inp + row, *y = branch ? branch + row : NULL;
  float2 stats = lx_norm_row_stats(x, y, C, rms != 0, slots);
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float value = lx_norm_input(x, y, i);
    if (residual_out) residual_out[row + i] = lx_to_bf16(value);
    float normed = (value - stats.x) * stats.y * lx_to_float(weight[i]);
    if (bias) normed += lx_to_float(bias[i]);
    out[row + i] = lx_to_bf16(normed);
  }
}

LX_CUDA_API void lx_cuda_norm_forward_launch(lx_bf16 *out, lx_bf16 *residual_out, const lx_bf16 *inp,
                                               const lx_bf16 *branch, const lx_bf16 *weight, const lx_bf16 *bias,
                                               int BT, int C, int rms, cudaStream_t stream) {
  LX_CUDA_REQUIRE(BT > 0 && C > 0);
  lx_cuda_norm_forward_kernel<<<BT, LX_CUDA_NORM_THREADS, 0, stream>>>(out, residual_out, inp, branch, weight, bias,
                                                                      C, rms);
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
 * rmsnorm drops the mean(g) term and has xhat = x * rstd. Saves the row's
 * statistics for the parameter-gradient pass. */
__global__ void __launch_bounds__(LX_CUDA_NORM_THREADS)
    lx_cuda_norm_backward_input_kernel(lx_bf16 *dinp,         // (BT, C)
                                       float *stats,          // (BT, 2) mean, rstd
                                       const lx_bf16 *dout,   // (BT, C)
                                       const lx_bf16 *inp,    // (BT, C)
                                       const lx_bf16 *weight, // (C)
                                       int C, int rms) {
  __shared__ float slots[LX_WARP];
  size_t row = (size_t)blockIdx.x * C;
  const lx_bf16 *x = inp + row, *dy = dout + row;
  float2 s = lx_norm_row_stats(x, NULL, C, rms != 0, slots);
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float g = lx_to_float(weight[i]) * lx_to_float(dy[i]);
    sum_g += g;
    sum_gx += g * (lx_to_float(x[i]) - s.x) * s.y;
  }
  float mean_g = rms ? 0.0f : lx_block_sum(sum_g, slots) / C;
  float mean_gx = lx_block_sum(sum_gx, slots) / C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    float xhat = (lx_to_float(x[i]) - s.x) * s.y;
    float g = lx_to_float(weight[i]) * lx_to_float(dy[i]);
    float dx = s.y * (g - mean_g - xhat * mean_gx);
    dinp[row + i] = lx_to_bf16(lx_to_float(dinp[row + i]) + dx);
  }
  if (threadIdx.x == 0) {
    stats[2 * (size_t)blockIdx.x] = s.x;
    stats[2 * (size_t)blockIdx.x + 1] = s.y;
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
  lx_cuda_norm_backward_input_kernel<<<BT, LX_CUDA_NORM_THREADS, 0, stream>>>(dinp, stats, dout, inp, weight, C, rms);
  LX_CUDA_LAUNCHED();
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
                                       float *dweight,        // (C)
                                       float *dbias,          // (C)
                                       const lx_bf16 *dout,   // (BT, C)
                                       const lx_bf16 *inp,    // (BT, C)
                                       const lx_bf16 *weight, // (C)
                                       int BT, int C) {
  lx_cuda_norm_backward_launch(dinp, dweight, dbias, ctx->scratch, dout, inp, weight, BT, C, 0, ctx->stream);
}

LX_CUDA_API void lx_rmsnorm_backward(const lx_ctx *ctx,
                                     lx_bf16 *dinp,         // (BT, C)
                                     float *dweight,        // (C)
                                     const lx_bf16 *dout,   // (BT, C)
                                     const lx_bf16 *inp,    // (BT, C)
                                     const lx_bf16 *weight, // (C)
                                     int BT, int C) {
  lx_cuda_norm_backward_launch(dinp, dweight, NULL, ctx->scratch, dout, inp, weight, BT, C, 1, ctx->stream);
}

#endif
