/* lx_cuda_adamw.cuh — the optimizer step on the GPU, the twin of
 * templates/cpu/lx_adamw.h: global gradient norm (squared, deterministic),
 * the clip factor, scaling, and AdamW on fp32 master weights and moments
 * with the bf16 working weights written back.
 *
 * The clip factor stays on the device: the norm's sum, its all-reduce over
 * stages and the factor feed AdamW through a device pointer, so the step
 * needs no host synchronisation and can be captured in a CUDA graph. */
#ifndef LX_CUDA_ADAMW_CUH
#define LX_CUDA_ADAMW_CUH

#include "lx_cuda_common.cuh"

#define LX_CUDA_ADAMW_THREADS 256
/* The first pass of the norm always uses this many blocks (not the SM
 * count), so its sum order, and its bits, do not depend on the GPU. */
#define LX_CUDA_NORM_BLOCKS 512
#define LX_CUDA_NORM_THREADS_PER_BLOCK 256

LX_CUDA_API size_t lx_cuda_grad_norm_scratch_floats(void) { return LX_CUDA_NORM_BLOCKS; }

/* Decoupled weight decay, step t from 1 (see lx_adamw.h):
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
 * g is the gradient times grad_scale[0] (the clip factor) when given. */
__global__ void lx_cuda_adamw_kernel(lx_bf16 *params,          // (N) working copy the kernels read
                                     float *master,            // (N) fp32 master weights
                                     const float *grads,       // (N)
                                     float *m,                 // (N) first moment, zero before step 1
                                     float *v,                 // (N) second moment, zero before step 1
                                     const float *grad_scale,  // (1) on the device, or NULL for 1
                                     size_t N, float lr, float beta1, float beta2, float eps, float weight_decay,
                                     float correction1, float correction2) {
  float scale = grad_scale ? *grad_scale : 1.0f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
    float g = grads[i] * scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master[i];
    p -= lr * ((mi / correction1) / (sqrtf(vi / correction2) + eps) + weight_decay * p);
    master[i] = p;
    params[i] = lx_to_bf16(p);
  }
}

typedef struct {
  double beta1, beta2, eps;
  double weight_decay; /* 0 for tensors that take no decay (biases, norms) */
} lx_cuda_adamw_hparams;

LX_CUDA_API void lx_cuda_adamw_update(lx_bf16 *params,         // (N)
                                        float *master,           // (N)
                                        const float *grads,      // (N)
                                        float *m,                // (N)
                                        float *v,                // (N)
                                        const float *grad_scale, // (1) on the device, or NULL
                                        size_t N, double lr, lx_cuda_adamw_hparams hp, int step,
                                        cudaStream_t stream) {
  LX_CUDA_REQUIRE(step >= 1);
  float correction1 = (float)(1.0 - pow(hp.beta1, step)), correction2 = (float)(1.0 - pow(hp.beta2, step));
  unsigned blocks = lx_ceil_div(N, LX_CUDA_ADAMW_THREADS);
  if (blocks > 65536u) blocks = 65536u;
  if (blocks == 0) blocks = 1;
  lx_cuda_adamw_kernel<<<blocks, LX_CUDA_ADAMW_THREADS, 0, stream>>>(
      params, master, grads, m, v, grad_scale, N, (float)lr, (float)hp.beta1, (float)hp.beta2, (float)hp.eps,
      (float)hp.weight_decay, correction1, correction2);
  LX_CUDA_LAUNCHED();
}

/* ---- global gradient norm, two deterministic passes ------------------------- */

/* Pass 1: block b sums the squares of its grid-strided elements and writes
 * partials[b]. The pattern depends on N alone. */
__global__ void __launch_bounds__(LX_CUDA_NORM_THREADS_PER_BLOCK)
    lx_cuda_norm_squared_partials_kernel(float *partials,    // (LX_CUDA_NORM_BLOCKS)
                                         const float *grads, // (N)
                                         size_t N) {
  __shared__ float slots[LX_WARP];
  float sum = 0.0f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
    sum += grads[i] * grads[i];
  sum = lx_block_sum(sum, slots);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

/* Pass 2: one block adds the partials in a fixed tree; the result is added to
 * total[0] when accumulate (several tensors, then one all-reduce), else
 * written. */
__global__ void __launch_bounds__(LX_CUDA_NORM_THREADS_PER_BLOCK)
    lx_cuda_norm_squared_finish_kernel(float *total,          // (1)
                                       const float *partials, // (LX_CUDA_NORM_BLOCKS)
                                       int accumulate) {
  __shared__ float slots[LX_WARP];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < LX_CUDA_NORM_BLOCKS; i += blockDim.x)
    sum += partials[i];
  sum = lx_block_sum(sum, slots);
  if (threadIdx.x == 0) *total = accumulate ? *total + sum : sum;
}

/* total[0] (+)= sum of grads[i]^2, on the device. Squared, so that the sums
 * of several tensors and stages add (and all-reduce) before the sqrt. */
LX_CUDA_API void lx_cuda_grad_norm_squared(float *total,       // (1) on the device
                                             float *scratch,     // (lx_cuda_grad_norm_scratch_floats)
                                             const float *grads, // (N)
                                             size_t N, int accumulate, cudaStream_t stream) {
  lx_cuda_norm_squared_partials_kernel<<<LX_CUDA_NORM_BLOCKS, LX_CUDA_NORM_THREADS_PER_BLOCK, 0, stream>>>(scratch,
                                                                                                          grads, N);
  LX_CUDA_LAUNCHED();
  lx_cuda_norm_squared_finish_kernel<<<1, LX_CUDA_NORM_THREADS_PER_BLOCK, 0, stream>>>(total, scratch, accumulate);
  LX_CUDA_LAUNCHED();
}

/* factor[0] = the scale that brings the global norm down to max_norm; 1 when
 * it is already below or max_norm <= 0 (as lx_grad_clip_factor). */
__global__ void lx_cuda_grad_clip_factor_kernel(float *factor,             // (1)
                                                const float *norm_squared, // (1)
                                                float max_norm) {
  float norm = sqrtf(*norm_squared);
  *factor = (max_norm <= 0.0f || norm <= max_norm) ? 1.0f : max_norm / (norm + 1e-6f);
}

LX_CUDA_API void lx_cuda_grad_clip_factor(float *factor,             // (1) on the device
                                            const float *norm_squared, // (1) on the device
                                            double max_norm, cudaStream_t stream) {
  lx_cuda_grad_clip_factor_kernel<<<1, 1, 0, stream>>>(factor, norm_squared, (float)max_norm);
  LX_CUDA_LAUNCHED();
}

/* x *= factor[0] (a device scalar, e.g. the clip factor). */
__global__ void lx_cuda_scale_kernel(float *x,             // (N)
                                     const float *factor,  // (1)
                                     size_t N) {
  float f = *factor;
  if (f == 1.0f) return;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
    x[i] *= f;
}

LX_CUDA_API void lx_cuda_scale(float *x,            // (N)
                                 const float *factor, // (1) on the device
                                 size_t N, cudaStream_t stream) {
  unsigned blocks = lx_ceil_div(N, LX_CUDA_ADAMW_THREADS);
  if (blocks > 65536u) blocks = 65536u;
  if (blocks == 0) blocks = 1;
  lx_cuda_scale_kernel<<<blocks, LX_CUDA_ADAMW_THREADS, 0, stream>>>(x, factor, N);
  LX_CUDA_LAUNCHED();
}

#endif
