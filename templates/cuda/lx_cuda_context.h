/* lx_cuda_context.h — what every CUDA op kernel takes first, as its CPU twin
 * takes the thread pool (templates/cpu/lx_common.h): the stream its
 * launches go to, the cuBLASLt handle and workspace of its matmuls, and the
 * stream's scratch. Streams run concurrently, so each has its own scratch,
 * and each stream that runs products its own workspace;
 * the emitted program builds one context per stream at startup
 * (lx_cuda_main.h). Shared by the kernels (lx_cuda_common.cuh) and the host
 * code that calls them (lx_cuda_api.h). */
#ifndef LX_CUDA_CONTEXT_H
#define LX_CUDA_CONTEXT_H

#include <cuda_runtime.h>
#include <stddef.h>

typedef struct lx_cuda_matmul_context lx_cuda_matmul_context;

typedef struct lx_ctx {
  cudaStream_t stream;
  lx_cuda_matmul_context *matmul;
  float *scratch;        /* the largest of the lx_cuda_*_scratch_floats() of the kernels run on the stream */
  size_t scratch_floats; /* its size: a kernel that needs more stops (lx_scratch) */
} lx_ctx;

/* Stops the job with file, line and message (lx_cuda_common.cuh). */
void lx_cuda_fail_at(const char *file, int line, const char *call, const char *kind, const char *message);

/* The context's scratch, checked to hold `floats`: a shape past what the
 * program sized it for stops here instead of writing past it. */
static inline float *lx_scratch(const lx_ctx *ctx, size_t floats) {
  if (!ctx->scratch || floats > ctx->scratch_floats)
    lx_cuda_fail_at(__FILE__, __LINE__, "lx_scratch", "argument",
                    "a kernel needs more scratch than its stream's context holds (a lynxgen bug)");
  return ctx->scratch;
}

/* How a backward kernel that can makes its input gradient, as on the CPU
 * (templates/cpu/lx_common.h): added, or written (nothing zeroed the buffer). */
typedef enum { LX_GRAD_ADD, LX_GRAD_WRITE } lx_grad_mode;

#endif
