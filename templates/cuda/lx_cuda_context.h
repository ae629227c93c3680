/* lx_cuda_context.h — what every CUDA op kernel takes first, as its CPU twin
 * takes the thread pool (templates/cpu/lx_common.h): the stream its
 * launches go to, the cuBLASLt handle and workspace of its matmuls, and the
 * stream's scratch. Streams run concurrently, so each has its own scratch;
 * the emitted program builds one context per stream at startup
 * (lx_cuda_main.h). Shared by the kernels (lx_cuda_common.cuh) and the host
 * code that calls them (lx_cuda_api.h). */
#ifndef LX_CUDA_CONTEXT_H
#define LX_CUDA_CONTEXT_H

#include <cuda_runtime.h>

typedef struct lx_cuda_matmul_context lx_cuda_matmul_context;

typedef struct lx_ctx {
  cudaStream_t stream;
  lx_cuda_matmul_context *matmul;
  float *scratch; /* the largest of the lx_cuda_*_scratch_floats() of the kernels run on the stream */
} lx_ctx;

#endif
