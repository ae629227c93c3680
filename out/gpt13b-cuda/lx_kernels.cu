/* lx_kernels.cu — every kernel and launcher of an emitted CUDA program, in
 * one translation unit. It is the same file for every model and stage, so a
 * build compiles it once per architecture and links it into each stage. */
#define LX_CUDA_API /* external definitions: the stage programs call them */
#include <cuda.h> /* the driver types of cuStreamWaitValue32 (lx_cuda_wait_flag) */
#include "lx_cuda_common.cuh"
#include "lx_cuda_adamw.cuh"
#include "lx_cuda_attention.cuh"
#include "lx_cuda_attention_gemm.cuh"
#include "lx_cuda_elementwise.cuh"
#include "lx_cuda_embedding.cuh"
#include "lx_cuda_loss.cuh"
#include "lx_cuda_matmul.cuh"
#include "lx_cuda_norm.cuh"
#include "lx_cuda_rng.cuh"
#include "lx_cuda_vocab.cuh"
#include "lx_cuda_api.h"

lx_cuda_matmul_context *lx_cuda_matmul_create(void) {
  lx_cuda_matmul_context *ctx = (lx_cuda_matmul_context *)calloc(1, sizeof *ctx);
  LX_CUDA_REQUIRE(ctx != NULL);
  void *workspace = NULL;
  CUDA_CHECK(cudaMalloc(&workspace, LX_CUDA_MATMUL_WORKSPACE_BYTES));
  lx_cuda_matmul_init(ctx, workspace, LX_CUDA_MATMUL_WORKSPACE_BYTES);
  return ctx;
}

void lx_cuda_adamw_tensor(lx_bf16 *params, float *master, const float *grads, float *m, float *v, const float *clip,
                          size_t N, double lr, double beta1, double beta2, double eps, double weight_decay, int step,
                          cudaStream_t stream) {
  lx_cuda_adamw_hparams hp = {beta1, beta2, eps, weight_decay};
  lx_cuda_adamw_update(params, master, grads, m, v, clip, N, lr, hp, step, stream);
}

/* The fallback of lx_cuda_wait_flag: one thread polls the flag, sleeping
 * between reads, so the stream's later work starts once the host raised it
 * and the other streams run meanwhile. */
__global__ void lx_cuda_wait_flag_kernel(const volatile int *flag) {
  while (*flag == 0) __nanosleep(1000);
}

typedef CUresult (*lx_cuda_wait_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

/* The driver's cuStreamWaitValue32, looked up once through the runtime (no
 * -lcuda); NULL where the driver lacks it or refused it once. */
static lx_cuda_wait_value_fn lx_cuda_wait_value;
static int lx_cuda_wait_value_looked_up;

/* The stream waits until *flag (mapped host memory) is 1. The driver's wait
 * holds the stream in the GPU's front end: no SM spins, and the context is
 * idle for the time-slicing of several ranks on one GPU (--comm host) while
 * it waits. */
void lx_cuda_wait_flag(const int *flag, cudaStream_t stream) {
  if (!lx_cuda_wait_value_looked_up) {
    lx_cuda_wait_value_looked_up = 1;
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      lx_cuda_wait_value = (lx_cuda_wait_value_fn)fn;
  }
  if (lx_cuda_wait_value &&
      lx_cuda_wait_value((CUstream)stream, (CUdeviceptr)flag, 1, CU_STREAM_WAIT_VALUE_EQ) == CUDA_SUCCESS)
    return;
  lx_cuda_wait_value = NULL; /* not supported here: the kernel from now on */
  lx_cuda_wait_flag_kernel<<<1, 1, 0, stream>>>(flag);
  LX_CUDA_LAUNCHED();
}

__global__ void lx_cuda_master_kernel(float *master, const lx_bf16 *params, size_t N) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
    master[i] = lx_to_float(params[i]);
}

void lx_cuda_master_from_params(float *master, const lx_bf16 *params, size_t N, cudaStream_t stream) {
  unsigned blocks = lx_ceil_div(N, 256);
  if (blocks > 65536u) blocks = 65536u;
  if (blocks == 0) return;
  lx_cuda_master_kernel<<<blocks, 256, 0, stream>>>(master, params, N);
  LX_CUDA_LAUNCHED();
}
