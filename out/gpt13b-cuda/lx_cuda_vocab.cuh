/* lx_cuda_vocab.cuh — the vocabulary-parallel cross-entropy of Megatron-LM,
 * the GPU twin of templates/cpu/lx_tensor_parallel.h and of
 * lx_cross_entropy_backward_slice (lx_loss.h).
 *
 * A tensor-parallel rank holds the logits of its slice of the vocabulary
 * (columns first .. first + Vr - 1). The forward runs in three launches with
 * the all-reduces over the tensor-parallel group between them (the emitted
 * program issues those, lx_cuda_parallel.h): each row's maximum and its
 * target's logit (0 on the ranks that do not hold it), then the sum of
 * exp(x - max) given the whole row's maximum, then the log-sum-exp and loss
 * from the summed parts. */
#ifndef LX_CUDA_VOCAB_CUH
#define LX_CUDA_VOCAB_CUH

#include "lx_cuda_common.cuh"
#include "lx_cuda_loss.cuh"

/* The valid columns of the slice [first, first + Vr): not the padding past V. */
__host__ __device__ inline int lx_cuda_vocab_valid(int V, int Vr, int first) {
  return first >= V ? 0 : V - first < Vr ? V - first : Vr;
}

/* One block per row: row_max[r] over the slice's valid columns (-inf when it
 * has none), picked[r] = the target's logit if the slice holds it, else 0. */
__global__ void __launch_bounds__(LX_CUDA_LOSS_THREADS)
    lx_cuda_vocab_max_kernel(float *row_max,        // (BT)
                             float *picked,         // (BT)
                             const lx_bf16 *logits, // (BT, Vr)
                             const int *targets,    // (BT)
                             int valid, int Vr, int first) {
  __shared__ float slots[LX_WARP];
  const lx_bf16 *x = logits + (size_t)blockIdx.x * Vr;
  float max = -INFINITY;
  for (int v = threadIdx.x; v < valid; v += blockDim.x)
    max = fmaxf(max, lx_to_float(x[v]));
  max = lx_block_max(max, slots);
  if (threadIdx.x == 0) {
    int t = targets[blockIdx.x] - first;
    row_max[blockIdx.x] = max;
    picked[blockIdx.x] = t >= 0 && t < valid ? lx_to_float(x[t]) : 0.0f;
  }
}

/* One block per row: sums[r] = the slice's sum of exp(x - row_max[r]). */
__global__ void __launch_bounds__(LX_CUDA_LOSS_THREADS)
    lx_cuda_vocab_sum_kernel(float *sums,           // (BT)
                             const lx_bf16 *logits, // (BT, Vr)
                             const float *row_max,  // (BT): the whole row's
                             int valid, int Vr) {
  __shared__ float slots[LX_WARP];
  const lx_bf16 *x = logits + (size_t)blockIdx.x * Vr;
  float sum = 0.0f;
  for (int v = threadIdx.x; v < valid; v += blockDim.x)
    sum += expf(lx_to_float(x[v]) - row_max[blockIdx.x]);
  sum = lx_block_sum(sum, slots);
  if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

/* lse[r] = row_max[r] + log(lse[r]) (the summed exponentials in, the
 * log-sum-exp out) and losses[r] = lse[r] - picked[r]. */
__global__ void lx_cuda_vocab_finish_kernel(float *lse,           // (BT)
                                            float *losses,        // (BT)
                                            const float *row_max, // (BT)
                                            const float *picked,  // (BT)
                                            int BT) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= BT) return;
  lse[r] = row_max[r] + logf(lse[r]);
  losses[r] = lse[r] - picked[r];
}

/* First launch: this slice's row maxima and picked target logits. */
LX_CUDA_API void lx_cuda_vocab_cross_entropy_max(float *row_max,        // (BT)
                                                 float *picked,         // (BT)
                                                 const lx_bf16 *logits, // (BT, Vr)
                                                 const int *targets,    // (BT)
                                                 int BT, int V, int Vr, int first, cudaStream_t stream) {
  LX_CUDA_REQUIRE(BT > 0 && V > 0 && Vr > 0 && first >= 0);
  lx_cuda_vocab_max_kernel<<<BT, LX_CUDA_LOSS_THREADS, 0, stream>>>(
      row_max, picked, logits, targets, lx_cuda_vocab_valid(V, Vr, first), Vr, first);
  LX_CUDA_LAUNCHED();
}

/* Second launch, after row_max is the whole rows' maximum: the slice's sums. */
LX_CUDA_API void lx_cuda_vocab_cross_entropy_sum(float *sums,           // (BT)
                                                 const lx_bf16 *logits, // (BT, Vr)
                                                 const float *row_max,  // (BT)
                                                 int BT, int V, int Vr, int first, cudaStream_t stream) {
  LX_CUDA_REQUIRE(BT > 0 && V > 0 && Vr > 0 && first >= 0);
  lx_cuda_vocab_sum_kernel<<<BT, LX_CUDA_LOSS_THREADS, 0, stream>>>(sums, logits, row_max,
                                                                    lx_cuda_vocab_valid(V, Vr, first), Vr);
  LX_CUDA_LAUNCHED();
}

/* Last launch, after lse holds the whole rows' sums and picked the target
 * logits: the log-sum-exp of every row and loss[0] = (accumulate ? loss[0] :
 * 0) + the rows' summed loss / BT (rows == BT: their mean). */
LX_CUDA_API void lx_cuda_vocab_cross_entropy_finish(float *loss,          // (1)
                                                    int accumulate,       // 1: add to loss[0]
                                                    float *lse,           // (rows): sums in, log-sum-exp out
                                                    float *losses,        // (rows) scratch
                                                    const float *row_max, // (rows)
                                                    const float *picked,  // (rows)
                                                    int rows, int BT, cudaStream_t stream) {
  LX_CUDA_REQUIRE(rows > 0 && rows <= BT);
  lx_cuda_vocab_finish_kernel<<<lx_ceil_div((size_t)rows, 256), 256, 0, stream>>>(lse, losses, row_max,
                                                                                  picked, rows);
  LX_CUDA_LAUNCHED();
  lx_cuda_mean_kernel<<<1, LX_CUDA_LOSS_THREADS, 0, stream>>>(loss, losses, rows, BT, accumulate);
  LX_CUDA_LAUNCHED();
}

/* dlogits += dloss / BT * (softmax - onehot) on the slice's columns of `rows`
 * of the BT rows, given the whole rows' log-sum-exp (written, the padding
 * zeroed, under LX_GRAD_WRITE; lx_cross_entropy_backward_slice_rows). */
LX_CUDA_API void lx_cross_entropy_backward_slice_rows(const lx_ctx *ctx,
                                                      lx_bf16 *dlogits,      // (rows, Vr)
                                                      const lx_bf16 *logits, // (rows, Vr)
                                                      const float *lse,      // (rows)
                                                      const int *targets,    // (rows)
                                                      float dloss, int rows, int BT, int V, int Vr,
                                                      int first, lx_grad_mode mode) {
  LX_CUDA_REQUIRE(rows > 0 && rows <= BT && V > 0 && Vr > 0 && first >= 0);
  lx_cuda_cross_entropy_backward_kernel<<<rows, LX_CUDA_LOSS_THREADS, 0, ctx->stream>>>(
      dlogits, logits, lse, targets, dloss / BT, lx_cuda_vocab_valid(V, Vr, first), Vr, first, mode);
  LX_CUDA_LAUNCHED();
}

/* The same on all BT rows (lx_cross_entropy_backward_slice). */
LX_CUDA_API void lx_cross_entropy_backward_slice(const lx_ctx *ctx,
                                                 lx_bf16 *dlogits,      // (BT, Vr)
                                                 const lx_bf16 *logits, // (BT, Vr)
                                                 const float *lse,      // (BT)
                                                 const int *targets,    // (BT)
                                                 float dloss, int BT, int V, int Vr, int first,
                                                 lx_grad_mode mode) {
  lx_cross_entropy_backward_slice_rows(ctx, dlogits, logits, lse, targets, dloss, BT, BT, V, Vr, first, mode);
}

#endif
