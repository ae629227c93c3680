/* lx_cuda_loss.cuh — fused softmax + cross-entropy and its gradient, the GPU
 * twin of templates/cpu/lx_loss.h.
 *
 * The forward saves the log-sum-exp of each row (fp32), so the backward
 * forms softmax = exp(logit - lse) without a second max/sum pass. Logit rows
 * are padded to Vp >= V columns; the padding takes no part and gets no
 * gradient (zeros where the backward writes it, LX_GRAD_WRITE). The mean over rows is a second, single-block pass over the
 * per-row losses in a fixed order, so the loss has the same bits every run.
 * The _rows launchers take `rows` of a micro-batch's BT rows (mini-sequences,
 * MsT): the loss and gradient stay normalised by BT. */
#ifndef LX_CUDA_LOSS_CUH
#define LX_CUDA_LOSS_CUH

#include "lx_cuda_common.cuh"

#define LX_CUDA_LOSS_THREADS 512

/* lse of logits[0..V) by a block, in one pass over the row: 128-bit loads
 * where the row is aligned, then the threads' (max, sum) merged. */
__device__ inline float lx_row_logsumexp(const lx_bf16 *x, // (V)
                                         int V, float *slots) {
  float2 acc = make_float2(-INFINITY, 0.0f);
  int vectors = lx_vec_aligned(x) ? V / LX_VEC : 0;
  for (int j = threadIdx.x; j < vectors; j += blockDim.x) {
    float v[LX_VEC];
    lx_load8(v, x + (size_t)j * LX_VEC);
    lx_softmax_add(&acc, v, LX_VEC);
  }
  for (int i = vectors * LX_VEC + threadIdx.x; i < V; i += blockDim.x) {
    float v = lx_to_float(x[i]);
    lx_softmax_add(&acc, &v, 1);
  }
  float max = lx_block_max(acc.x, slots);
  float sum = lx_block_sum(acc.x == -INFINITY ? 0.0f : acc.y * expf(acc.x - max), slots);
  return max + logf(sum);
}

/* dx[v] += scale * (exp(x[v] - lse) - [v == target]) for v < V, eight
 * columns a load where both rows are aligned; under LX_GRAD_WRITE written
 * instead, and the padding columns [V, width) zeroed (the LM head's backward
 * reads them). */
__device__ inline void lx_row_cross_entropy_grad(lx_bf16 *dx,      // (width)
                                                 const lx_bf16 *x, // (width)
                                                 float lse, int target, float scale, int V, int width,
                                                 lx_grad_mode mode) {
  bool add = mode == LX_GRAD_ADD;
  int vectors = lx_vec_aligned(x) && lx_vec_aligned(dx) ? V / LX_VEC : 0;
  for (int j = threadIdx.x; j < vectors; j += blockDim.x) {
    size_t first = (size_t)j * LX_VEC;
    float logit[LX_VEC], grad[LX_VEC] = {0};
    lx_load8(logit, x + first);
    if (add) lx_load8(grad, dx + first);
    for (int k = 0; k < LX_VEC; k++)
      grad[k] += scale * (expf(logit[k] - lse) - ((int)first + k == target ? 1.0f : 0.0f));
    lx_store8(dx + first, grad);
  }
  for (int v = vectors * LX_VEC + threadIdx.x; v < V; v += blockDim.x) {
    float grad = scale * (expf(lx_to_float(x[v]) - lse) - (v == target ? 1.0f : 0.0f));
    dx[v] = lx_to_bf16(add ? lx_to_float(dx[v]) + grad : grad);
  }
  for (int v = V + threadIdx.x; v < width && !add; v += blockDim.x)
    dx[v] = lx_to_bf16(0.0f);
}

/* One block per row: lse[r] and losses[r] = lse[r] - logits[r][target].
 * With dlogits non-NULL the gradient is added in the same launch (the fused
 * form: the row is read once more while it is still in L2). */
__global__ void __launch_bounds__(LX_CUDA_LOSS_THREADS)
    lx_cuda_cross_entropy_kernel(float *lse,            // (BT)
                                 float *losses,         // (BT)
                                 lx_bf16 *dlogits,      // (BT, Vp) or NULL
                                 const lx_bf16 *logits, // (BT, Vp)
                                 const int *targets,    // (BT)
                                 float grad_scale, int V, int Vp) {
  __shared__ float slots[LX_WARP];
  size_t row = (size_t)blockIdx.x * Vp;
  const lx_bf16 *x = logits + row;
  float row_lse = lx_row_logsumexp(x, V, slots);
  int target = targets[blockIdx.x];
  if (threadIdx.x == 0) {
    lse[blockIdx.x] = row_lse;
    losses[blockIdx.x] = row_lse - lx_to_float(x[target]);
  }
  if (dlogits) lx_row_cross_entropy_grad(dlogits + row, x, row_lse, target, grad_scale, V, V, LX_GRAD_ADD);
}

/* mean[0] = (accumulate ? mean[0] : 0) + sum of values / divisor, one block
 * summing in a fixed order (divisor N: the mean; BT: a chunk's share). */
__global__ void __launch_bounds__(LX_CUDA_LOSS_THREADS)
    lx_cuda_mean_kernel(float *mean,         // (1)
                        const float *values, // (N)
                        int N, int divisor, int accumulate) {
  __shared__ float slots[LX_WARP];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < N; i += blockDim.x)
    sum += values[i];
  sum = lx_block_sum(sum, slots);
  /* accumulate 0: exactly sum / divisor, the plain mean's bits (0 + -0 would be +0) */
  if (threadIdx.x == 0) *mean = accumulate ? *mean + sum / divisor : sum / divisor;
}

/* valid: the columns of the row that are vocabulary (not padding); first:
 * the vocabulary id of column 0 (a tensor-parallel rank's slice). */
__global__ void __launch_bounds__(LX_CUDA_LOSS_THREADS)
    lx_cuda_cross_entropy_backward_kernel(lx_bf16 *dlogits,      // (BT, Vp)
                                          const lx_bf16 *logits, // (BT, Vp)
                                          const float *lse,      // (BT)
                                          const int *targets,    // (BT)
                                          float grad_scale, int valid, int Vp, int first, lx_grad_mode mode) {
  size_t row = (size_t)blockIdx.x * Vp;
  lx_row_cross_entropy_grad(dlogits + row, logits + row, lse[blockIdx.x], targets[blockIdx.x] - first,
                            grad_scale, valid, Vp, mode);
}

/* loss[0] = (accumulate ? loss[0] : 0) + the sum over `rows` rows of
 * -log softmax(logits[r])[targets[r]] / BT, lse saved; ctx->scratch holds the
 * rows' losses. The targets are trusted here: lx_cuda_check_tokens validates
 * them on load. */
LX_CUDA_API void lx_cross_entropy_forward_rows(const lx_ctx *ctx,
                                               float *loss,           // (1) on the device
                                               int accumulate,        // 1: add to loss[0]
                                               float *lse,            // (rows)
                                               const lx_bf16 *logits, // (rows, Vp)
                                               const int *targets,    // (rows)
                                               int rows, int BT, int V, int Vp) {
  LX_CUDA_REQUIRE(rows > 0 && rows <= BT && V > 0 && V <= Vp);
  float *losses = lx_scratch(ctx, (size_t)rows); /* (rows): the rows' losses */
  lx_cuda_cross_entropy_kernel<<<rows, LX_CUDA_LOSS_THREADS, 0, ctx->stream>>>(lse, losses, NULL, logits,
                                                                               targets, 0.0f, V, Vp);
  LX_CUDA_LAUNCHED();
  lx_cuda_mean_kernel<<<1, LX_CUDA_LOSS_THREADS, 0, ctx->stream>>>(loss, losses, rows, BT, accumulate);
  LX_CUDA_LAUNCHED();
}

/* loss[0] = mean over the BT rows of -log softmax(logits[r])[targets[r]]. */
LX_CUDA_API void lx_cross_entropy_forward(const lx_ctx *ctx,
                                          float *loss,           // (1) on the device
                                          float *lse,            // (BT)
                                          const lx_bf16 *logits, // (BT, Vp)
                                          const int *targets,    // (BT)
                                          int BT, int V, int Vp) {
  lx_cross_entropy_forward_rows(ctx, loss, 0, lse, logits, targets, BT, BT, V, Vp);
}

/* dlogits += dloss / BT * (softmax(logits) - onehot(target)) on `rows` of the
 * BT rows (written, padding zeroed, under LX_GRAD_WRITE); dloss as on the
 * CPU: 1 for one micro-batch, 1 / micro_batches when a step averages several. */
LX_CUDA_API void lx_cross_entropy_backward_rows(const lx_ctx *ctx,
                                                lx_bf16 *dlogits,      // (rows, Vp)
                                                const lx_bf16 *logits, // (rows, Vp)
                                                const float *lse,      // (rows)
                                                const int *targets,    // (rows)
                                                float dloss, int rows, int BT, int V, int Vp, lx_grad_mode mode) {
  LX_CUDA_REQUIRE(rows > 0 && rows <= BT && V > 0 && V <= Vp);
  lx_cuda_cross_entropy_backward_kernel<<<rows, LX_CUDA_LOSS_THREADS, 0, ctx->stream>>>(
      dlogits, logits, lse, targets, dloss / BT, V, Vp, 0, mode);
  LX_CUDA_LAUNCHED();
}

/* The same on all BT rows. */
LX_CUDA_API void lx_cross_entropy_backward(const lx_ctx *ctx,
                                           lx_bf16 *dlogits,      // (BT, Vp)
                                           const lx_bf16 *logits, // (BT, Vp)
                                           const float *lse,      // (BT)
                                           const int *targets,    // (BT)
                                           float dloss, int BT, int V, int Vp, lx_grad_mode mode) {
  lx_cross_entropy_backward_rows(ctx, dlogits, logits, lse, targets, dloss, BT, BT, V, Vp, mode);
}

/* Forward and backward in one pass over the logits, for schedules that run
 * the loss's backward right after its forward (the last stage's epilogue). */
LX_CUDA_API void lx_cross_entropy_forward_backward(const lx_ctx *ctx,
                                                   float *loss,           // (1) on the device
                                                   float *lse,            // (BT)
                                                   lx_bf16 *dlogits,      // (BT, Vp)
                                                   const lx_bf16 *logits, // (BT, Vp)
                                                   const int *targets,    // (BT)
                                                   float dloss, int BT, int V, int Vp) {
  LX_CUDA_REQUIRE(BT > 0 && V > 0 && V <= Vp);
  float *losses = lx_scratch(ctx, (size_t)BT); /* (BT): the rows' losses */
  lx_cuda_cross_entropy_kernel<<<BT, LX_CUDA_LOSS_THREADS, 0, ctx->stream>>>(lse, losses, dlogits, logits, targets,
                                                                             dloss / BT, V, Vp);
  LX_CUDA_LAUNCHED();
  lx_cuda_mean_kernel<<<1, LX_CUDA_LOSS_THREADS, 0, ctx->stream>>>(loss, losses, BT, BT, 0);
  LX_CUDA_LAUNCHED();
}

#endif
