/* lx_cuda_common.cuh — what every CUDA kernel header shares: error checks
 * that name the failing call and abort the whole job, the bf16 type and its
 * conversions, deterministic warp and block reductions, launch helpers.
 *
 * Conventions of all lx_cuda_*.cuh kernels (the GPU twins of templates/cpu):
 *   - an op's kernel has its CPU twin's name, math and argument order:
 *     lx_<op>_<forward|backward>(ctx, outputs..., inputs..., sizes...,
 *     op parameters...), ctx the lx_ctx of lx_cuda_context.h; it launches on
 *     ctx->stream, never on the default stream, so the emitted program
 *     decides what overlaps (llm.c style); the kernels' helpers keep the
 *     lx_cuda_ prefix and take their stream last;
 *   - a comment beside each pointer gives its shape, e.g. `lx_bf16 *out, // (B, T, C)`;
 *   - activations and their gradients are bf16; parameters are bf16 with an
 *     fp32 master copy; parameter gradients are fp32 (they accumulate over
 *     micro-batches and feed the fp32 optimizer); statistics (lse) are fp32;
 *   - a _forward writes (=) its outputs; a _backward ADDS (+=) into every
 *     gradient it produces, as on the CPU: the caller zeroes gradients once;
 *   - no float atomics anywhere: every element is written by exactly one
 *     thread and every sum runs in an order fixed by the shapes alone (not by
 *     the GPU model or its SM count), so a step, and a recomputation inside
 *     it, reproduces bit for bit;
 *   - no cudaMalloc: scratch a kernel needs is ctx->scratch, allocated by
 *     the caller with its size given by a lx_cuda_*_scratch_floats()
 *     function next to the launcher. */
#ifndef LX_CUDA_COMMON_CUH
#define LX_CUDA_COMMON_CUH

/* Open MPI's C++ bindings do not compile with -Wall -Wextra -Werror; the C
 * interface is all the emitted programs use. */
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <initializer_list>

#include "lx_cuda_context.h"

typedef __nv_bfloat16 lx_bf16;

/* Launchers are inline where a header is included on its own (tests); the
 * emitted lx_kernels.cu defines LX_CUDA_API empty first, so that one
 * translation unit holds every launcher and the stage programs, host code
 * only, see their prototypes in lx_cuda_api.h. */
#ifndef LX_CUDA_API
#define LX_CUDA_API inline
#endif
typedef __nv_bfloat162 lx_bf16x2;

/* ---- errors: print the call, file and line, then take the job down ------- */

/* One failing rank must not leave the others blocked in a collective: with MPI
 * up, MPI_Abort ends every rank; without it (a unit test), exit suffices. */
LX_CUDA_API void lx_cuda_abort_job(void) {
  int mpi_initialized = 0, mpi_finalized = 0;
  MPI_Initialized(&mpi_initialized);
  MPI_Finalized(&mpi_finalized);
  fflush(stderr);
  if (mpi_initialized && !mpi_finalized) MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
  exit(EXIT_FAILURE);
}

LX_CUDA_API void lx_cuda_fail_at(const char *file, int line, const char *call, const char *kind,
                                   const char *message) {
  fprintf(stderr, "lynx: %s error at %s:%d: %s: %s\n", kind, file, line, call, message);
  lx_cuda_abort_job();
}

#include "lx_cuda_check.h"

inline const char *lx_cublas_status_name(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "unknown cuBLAS status";
  }
}

#define CUBLAS_CHECK(call) \
  LX_STATUS_CHECK(cublasStatus_t, call, CUBLAS_STATUS_SUCCESS, "cuBLAS", lx_cublas_status_name)

/* A broken shape or argument is a bug of the emitted program: stop at once. */
#define LX_CUDA_REQUIRE(cond)                                                                                \
  do {                                                                                                       \
    if (!(cond)) lx_cuda_fail_at(__FILE__, __LINE__, #cond, "argument", "check failed");                   \
  } while (0)

/* A launch reports a bad configuration only through cudaGetLastError. */
#define LX_CUDA_LAUNCHED() CUDA_CHECK(cudaGetLastError())

/* ---- bf16 and launch helpers ------------------------------------------------ */

__host__ __device__ inline float lx_to_float(lx_bf16 x) { return __bfloat162float(x); }
__host__ __device__ inline float lx_to_float(float x) { return x; }
__host__ __device__ inline lx_bf16 lx_to_bf16(float x) { return __float2bfloat16_rn(x); }

/* Stores a float into either element type, rounding to nearest for bf16. */
__device__ inline void lx_store(lx_bf16 *dst, float x) { *dst = __float2bfloat16_rn(x); }
__device__ inline void lx_store(float *dst, float x) { *dst = x; }

inline unsigned lx_ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

#define LX_WARP 32
#define LX_FULL_MASK 0xffffffffu

/* Butterfly reductions: every lane ends with the same value, combined in the
 * same order on every run. */
__device__ inline float lx_warp_sum(float x) {
  for (int offset = LX_WARP / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(LX_FULL_MASK, x, offset);
  return x;
}

__device__ inline float lx_warp_max(float x) {
  for (int offset = LX_WARP / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(LX_FULL_MASK, x, offset));
  return x;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024): warp
 * sums, then warp 0 sums the 32 per-warp slots in a fixed tree. Every thread
 * gets the total. `slots` is __shared__ float[32]; the function synchronises
 * before reusing it so that back-to-back calls may share one array. */
__device__ inline float lx_block_sum(float x, float *slots) {
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP, warps = blockDim.x / LX_WARP;
  x = lx_warp_sum(x);
  __syncthreads(); /* a previous call may still be reading slots */
  if (lane == 0) slots[warp] = x;
  __syncthreads();
  x = lane < warps ? slots[lane] : 0.0f;
  return lx_warp_sum(x);
}

__device__ inline float lx_block_max(float x, float *slots) {
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP, warps = blockDim.x / LX_WARP;
  x = lx_warp_max(x);
  __syncthreads();
  if (lane == 0) slots[warp] = x;
  __syncthreads();
  x = lane < warps ? slots[lane] : -INFINITY;
  return lx_warp_max(x);
}

/* ---- column reductions (bias, norm weights) in place of atomics ------------ */

/* Rows per partial sum: the partials are then added in chunk order, so the
 * sum's order depends on the row count alone, never on the device. */
#define LX_CUDA_ROWS_PER_CHUNK 256
#define LX_CUDA_COLUMN_WARPS 8 /* a block: 32 columns (a lane each) x 8 row groups */

inline unsigned lx_cuda_column_chunks(int rows) { return lx_ceil_div((size_t)rows, LX_CUDA_ROWS_PER_CHUNK); }

/* The first pass of a column reduction of N sums per column:
 * partials[n][chunk][c] = the sum over the chunk's rows r of what
 * add(r, c, sums) adds to sums[n]. A block takes 32 columns of one chunk, its
 * warp w the rows r0 + w, r0 + w + 8, ..., so a warp reads 32 consecutive
 * columns of a row at once; the 8 warps' sums are then added in warp order. */
template <int N, typename Add>
__device__ inline void lx_column_partials(float *const partials[N], int rows, int C, Add add) {
  __shared__ float sums[N][LX_CUDA_COLUMN_WARPS][LX_WARP];
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP;
  int c = blockIdx.x * LX_WARP + lane, chunk = blockIdx.y;
  int r0 = chunk * LX_CUDA_ROWS_PER_CHUNK, r1 = min(rows, r0 + LX_CUDA_ROWS_PER_CHUNK);
  float acc[N];
  for (int n = 0; n < N; n++)
    acc[n] = 0.0f;
  if (c < C)
    for (int r = r0 + warp; r < r1; r += LX_CUDA_COLUMN_WARPS)
      add(r, c, acc);
  for (int n = 0; n < N; n++)
    sums[n][warp][lane] = acc[n];
  __syncthreads();
  if (warp != 0 || c >= C) return;
  for (int n = 0; n < N; n++) {
    float total = 0.0f;
    for (int w = 0; w < LX_CUDA_COLUMN_WARPS; w++)
      total += sums[n][w][lane];
    partials[n][(size_t)chunk * C + c] = total;
  }
}

/* The first pass's grid and block over C columns of `rows` rows. */
#define LX_CUDA_COLUMN_THREADS (LX_WARP * LX_CUDA_COLUMN_WARPS)
inline dim3 lx_column_grid(int rows, int C) {
  return dim3(lx_ceil_div((size_t)C, LX_WARP), lx_cuda_column_chunks(rows));
}

/* out[c] += sum over chunks of partials[chunk][c], chunks in order: the second
 * pass of every column reduction. */
__global__ void lx_cuda_sum_partials_kernel(float *out,            // (C)
                                            const float *partials, // (chunks, C)
                                            int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = 0.0f;
  for (int chunk = 0; chunk < chunks; chunk++)
    sum += partials[(size_t)chunk * C + c];
  out[c] += sum;
}

/* (max, sum): the running maximum of a thread's logits and the sum of
 * exp(x - max) over them, one read of each (online softmax: the loss's logits, attention's
 * scores). */
__device__ inline void lx_softmax_add(float2 *acc, const float *x, int n) {
  float max = acc->x;
  for (int k = 0; k < n; k++)
    max = fmaxf(max, x[k]);
  if (max == -INFINITY) return; /* nothing but -inf yet */
  float sum = acc->y * expf(acc->x - max);
  for (int k = 0; k < n; k++)
    sum += expf(x[k] - max);
  *acc = make_float2(max, sum);
}

/* ---- 128-bit access: eight bf16 a load -------------------------------------- */

#define LX_VEC 8

/* Whether p may be read LX_VEC elements at a time. */
__host__ __device__ inline bool lx_vec_aligned(const void *p) { return (uintptr_t)p % 16 == 0; }

__device__ inline void lx_load8(float out[LX_VEC], const lx_bf16 *p) {
  uint4 raw = *(const uint4 *)p;
  const lx_bf16x2 *pairs = (const lx_bf16x2 *)&raw;
  for (int k = 0; k < LX_VEC / 2; k++) {
    float2 f = __bfloat1622float2(pairs[k]);
    out[2 * k] = f.x;
    out[2 * k + 1] = f.y;
  }
}

__device__ inline void lx_store8(lx_bf16 *p, const float in[LX_VEC]) {
  uint4 raw;
  lx_bf16x2 *pairs = (lx_bf16x2 *)&raw;
  for (int k = 0; k < LX_VEC / 2; k++)
    pairs[k] = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
  *(uint4 *)p = raw;
}

/* A piece: W consecutive elements that one thread loads and stores at once,
 * W = LX_VEC where every tensor of a kernel is 16-byte aligned and its widths
 * are multiples of LX_VEC (lx_pieces_fit), else 1. Kernels are templates on W
 * so that the loops over a piece unroll into registers. */
template <int W>
__device__ inline void lx_load_piece(float v[W], const lx_bf16 *p) {
  if constexpr (W == LX_VEC)
    lx_load8(v, p);
  else
    for (int k = 0; k < W; k++)
      v[k] = lx_to_float(p[k]);
}

template <int W>
__device__ inline void lx_store_piece(lx_bf16 *p, const float v[W]) {
  if constexpr (W == LX_VEC)
    lx_store8(p, v);
  else
    for (int k = 0; k < W; k++)
      p[k] = lx_to_bf16(v[k]);
}

/* Whether width (elements) and every pointer allow pieces of LX_VEC (NULL
 * pointers, absent operands, do not count). */
inline bool lx_pieces_fit(size_t width, std::initializer_list<const void *> pointers) {
  if (width % LX_VEC != 0) return false;
  for (const void *p : pointers)
    if (!lx_vec_aligned(p)) return false;
  return true;
}

#endif
