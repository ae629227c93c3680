/* lx_cuda_matmul.cuh — linear layers on cuBLASLt: bf16 operands, fp32
 * accumulation, optional bias / GELU epilogues, and the bias gradient.
 *
 * The matrices are row-major as on the CPU (templates/cpu/lx_matmul.h):
 * weights are (out, in), D = op(A) op(B). cuBLASLt is column-major, and a
 * row-major X is the column-major X^T, so D^T = op(B)^T op(A)^T is computed
 * with the operands swapped; nothing is copied or transposed.
 *
 * The workspace comes from the emitted program's static arena (no
 * cudaMalloc at run time), and the algorithm chosen by the heuristic is cached
 * per shape: the first call of a shape pays for the query, later calls (and a
 * captured CUDA graph) reuse the same algorithm, so the same shape always runs
 * the same reduction order and gives the same bits. */
#ifndef LX_CUDA_MATMUL_CUH
#define LX_CUDA_MATMUL_CUH

#include <string.h>

#include "lx_cuda_common.cuh"
#include "lx_cuda_rng.cuh" /* LoRA's dropout */
#include "lx_gemm_layout.h"

typedef enum {
  LX_EPILOGUE_NONE = 0,
  LX_EPILOGUE_BIAS,      /* D = op(A) op(B) + bias                                   */
  LX_EPILOGUE_GELU,      /* D = gelu(op(A) op(B)), pre-activation saved to aux       */
  LX_EPILOGUE_GELU_BIAS, /* D = gelu(op(A) op(B) + bias), pre-activation to aux      */
  LX_EPILOGUE_DGELU      /* D = (op(A) op(B)) * gelu'(aux): the backward of the above */
} lx_epilogue;

/* One cached problem: its descriptors and the algorithm the heuristic chose.
 * alignment is the pointers' guaranteed alignment in bytes, which the
 * heuristic must respect (cuBLASLt assumes 256 unless told: a weight of the
 * arena may start at 128 bytes past that, lynxgen's layout.c). */
typedef struct {
  lx_gemm_shape shape;
  int accumulate, alignment;
  lx_epilogue epilogue;
  cudaDataType_t d_type;
  cublasLtMatmulDesc_t operation;
  cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
  cublasLtMatmulAlgo_t algorithm;
} lx_cuda_matmul_plan;

/* The linear layers' shapes, and the materialized attention's: up to six a
 * block of query rows, twice where the last slice of kv heads is narrower
 * (lx_attention_gemms.h), 1536 at sequence 32768. */
#define LX_CUDA_MATMUL_MAX_PLANS 2048
/* Plans are found by hashing their problem into this many slots (open
 * addressing, never more than half full): a step makes thousands of calls. */
#define LX_CUDA_MATMUL_SLOTS (2 * LX_CUDA_MATMUL_MAX_PLANS)

/* The emitted program owns one per device; shapes are compile-time facts, so
 * a program never needs more plans than it has distinct product shapes. */
typedef struct lx_cuda_matmul_context {
  cublasLtHandle_t handle;
  void *workspace; /* (workspace_bytes) from the arena, 256-byte aligned */
  size_t workspace_bytes;
  int plan_count;
  int slot_plan[LX_CUDA_MATMUL_SLOTS]; /* a plan's index + 1; 0: empty */
  lx_cuda_matmul_plan plans[LX_CUDA_MATMUL_MAX_PLANS];
} lx_cuda_matmul_context;

/* 32 MiB is what cuBLASLt's Hopper kernels ask for at most (NVIDIA's guide). */
#define LX_CUDA_MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)

LX_CUDA_API void lx_cuda_matmul_init(lx_cuda_matmul_context *ctx, void *workspace, // (workspace_bytes)
                                       size_t workspace_bytes) {
  LX_CUDA_REQUIRE(((uintptr_t)workspace % 256) == 0);
  CUBLAS_CHECK(cublasLtCreate(&ctx->handle));
  ctx->workspace = workspace;
  ctx->workspace_bytes = workspace_bytes;
  ctx->plan_count = 0;
  memset(ctx->slot_plan, 0, sizeof ctx->slot_plan);
}

LX_CUDA_API void lx_cuda_matmul_destroy(lx_cuda_matmul_context *ctx) {
  for (int i = 0; i < ctx->plan_count; i++) {
    lx_cuda_matmul_plan *plan = &ctx->plans[i];
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan->a_layout));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan->b_layout));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan->d_layout));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(plan->operation));
  }
  ctx->plan_count = 0;
  memset(ctx->slot_plan, 0, sizeof ctx->slot_plan);
  CUBLAS_CHECK(cublasLtDestroy(ctx->handle));
}

inline cublasLtEpilogue_t lx_cublaslt_epilogue(lx_epilogue epilogue) {
  switch (epilogue) {
  case LX_EPILOGUE_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case LX_EPILOGUE_GELU: return CUBLASLT_EPILOGUE_GELU_AUX;
  case LX_EPILOGUE_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case LX_EPILOGUE_DGELU: return CUBLASLT_EPILOGUE_DGELU;
  default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/* FNV-1a over the fields that make a problem, its first slot. */
inline unsigned lx_cuda_matmul_slot(const lx_gemm_shape *shape, int accumulate, int alignment, lx_epilogue epilogue,
                                    cudaDataType_t d_type) {
  const long long fields[] = {shape->m,        shape->n,        shape->k,        shape->trans_a,  shape->trans_b,
                              shape->lda,      shape->ldb,      shape->ldd,      shape->stride_a, shape->stride_b,
                              shape->stride_d, shape->batch,    accumulate,      alignment,       (long long)epilogue,
                              (long long)d_type};
  uint64_t h = 1469598103934665603ull;
  for (long long field : fields)
    h = (h ^ (uint64_t)field) * 1099511628211ull;
  return (unsigned)(h % LX_CUDA_MATMUL_SLOTS);
}

/* The plan of a problem, or the empty slot where its plan goes (*slot). */
LX_CUDA_API lx_cuda_matmul_plan *lx_cuda_matmul_find_plan(lx_cuda_matmul_context *ctx, const lx_gemm_shape *shape,
                                                            int accumulate, int alignment, lx_epilogue epilogue,
                                                            cudaDataType_t d_type, unsigned *slot) {
  for (*slot = lx_cuda_matmul_slot(shape, accumulate, alignment, epilogue, d_type); ctx->slot_plan[*slot];
       *slot = (*slot + 1) % LX_CUDA_MATMUL_SLOTS) {
    lx_cuda_matmul_plan *p = &ctx->plans[ctx->slot_plan[*slot] - 1];
    if (lx_gemm_shape_equal(&p->shape, shape) && p->accumulate == accumulate && p->alignment == alignment &&
        p->epilogue == epilogue && p->d_type == d_type)
      return p;
  }
  return NULL;
}

/* A column-major matrix's layout, with its batch when there is one. */
inline cublasLtMatrixLayout_t lx_cublaslt_layout(cudaDataType_t type, const lx_colmajor_matrix &x, int batch) {
  cublasLtMatrixLayout_t layout;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, (uint64_t)x.rows, (uint64_t)x.cols, (int64_t)x.ld));
  if (batch > 1) {
    int32_t count = batch;
    int64_t stride = x.stride;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride));
  }
  return layout;
}

/* Builds cuBLASLt's column-major problem (lx_gemm_colmajor): its "A" is our
 * B and its "B" is our A. */
LX_CUDA_API lx_cuda_matmul_plan *lx_cuda_matmul_make_plan(lx_cuda_matmul_context *ctx, const lx_gemm_shape *shape,
                                                            int accumulate, int alignment, lx_epilogue epilogue,
                                                            cudaDataType_t d_type) {
  LX_CUDA_REQUIRE(ctx->plan_count < LX_CUDA_MATMUL_MAX_PLANS);
  lx_cuda_matmul_plan *plan = &ctx->plans[ctx->plan_count];
  plan->shape = *shape;
  plan->accumulate = accumulate, plan->alignment = alignment, plan->epilogue = epilogue, plan->d_type = d_type;
  lx_colmajor_gemm problem = lx_gemm_colmajor(shape);

  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t op_first = problem.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_second = problem.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                              sizeof(op_first)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                              sizeof(op_second)));
  cublasLtEpilogue_t lt_epilogue = lx_cublaslt_epilogue(epilogue);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &lt_epilogue,
                                              sizeof(lt_epilogue)));
  if (epilogue == LX_EPILOGUE_BIAS || epilogue == LX_EPILOGUE_GELU_BIAS) {
    cudaDataType_t bias_type = CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof(bias_type)));
  }
  if (epilogue == LX_EPILOGUE_GELU || epilogue == LX_EPILOGUE_GELU_BIAS || epilogue == LX_EPILOGUE_DGELU) {
    int64_t aux_ld = shape->ldd; /* aux has D's shape and layout */
    cudaDataType_t aux_type = CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                &aux_type, sizeof(aux_type)));
  }
  plan->a_layout = lx_cublaslt_layout(CUDA_R_16BF, problem.first, problem.batch);
  plan->b_layout = lx_cublaslt_layout(CUDA_R_16BF, problem.second, problem.batch);
  plan->d_layout = lx_cublaslt_layout(d_type, problem.d, problem.batch);

  cublasLtMatmulPreference_t preference;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ctx->workspace_bytes, sizeof(ctx->workspace_bytes)));
  uint32_t bytes = (uint32_t)alignment;
  const cublasLtMatmulPreferenceAttributes_t minimums[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (cublasLtMatmulPreferenceAttributes_t minimum : minimums)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, minimum, &bytes, sizeof bytes));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx->handle, plan->operation, plan->a_layout, plan->b_layout,
                                              plan->d_layout, plan->d_layout, preference, 1, &heuristic, &found));
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  if (found == 0) {
    fprintf(stderr, "lynx: no cuBLASLt algorithm for m=%d n=%d k=%d trans_a=%d trans_b=%d batch=%d epilogue=%d\n",
            shape->m, shape->n, shape->k, shape->trans_a, shape->trans_b, shape->batch, (int)epilogue);
    lx_cuda_abort_job();
  }
  plan->algorithm = heuristic.algo;
  ctx->plan_count++;
  return plan;
}

/* The plan of a problem, made on its first call. */
inline lx_cuda_matmul_plan *lx_cuda_matmul_plan_of(lx_cuda_matmul_context *ctx, const lx_gemm_shape *shape,
                                                   int accumulate, int alignment, lx_epilogue epilogue,
                                                   cudaDataType_t d_type) {
  unsigned slot;
  lx_cuda_matmul_plan *plan = lx_cuda_matmul_find_plan(ctx, shape, accumulate, alignment, epilogue, d_type, &slot);
  if (plan) return plan;
  plan = lx_cuda_matmul_make_plan(ctx, shape, accumulate, alignment, epilogue, d_type);
  ctx->slot_plan[slot] = ctx->plan_count; /* make_plan counted it */
  return plan;
}

inline void lx_cuda_matmul_run(lx_cuda_matmul_context *ctx, const lx_cuda_matmul_plan *plan, void *d,
                               const lx_bf16 *a, const lx_bf16 *b, float alpha, cudaStream_t stream) {
  const float beta = plan->accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx->handle, plan->operation, &alpha, b, plan->a_layout, a, plan->b_layout, &beta, d,
                              plan->d_layout, d, plan->d_layout, &plan->algorithm, ctx->workspace,
                              ctx->workspace_bytes, stream));
}

/* The largest power of two up to `most` that divides every address the
 * product's matrices start at (and for a batch, every stride in bytes):
 * what the algorithm may assume of the pointers. */
inline int lx_cuda_alignment(const void *d, size_t d_elt, const lx_bf16 *a, const lx_bf16 *b,
                             const lx_gemm_shape *shape, int most) {
  uintptr_t bits = (uintptr_t)d | (uintptr_t)a | (uintptr_t)b | (uintptr_t)most;
  if (shape->batch > 1)
    bits |= (uintptr_t)(shape->stride_d * (long long)d_elt) | (uintptr_t)(shape->stride_a * 2) |
            (uintptr_t)(shape->stride_b * 2);
  return (int)(bits & (~bits + 1));
}

/* The strided-batched product of lx_gemm_layout.h: bf16 A and B, D of d_type
 * (bf16, or fp32 scores), fp32 accumulation; D += when accumulate. */
LX_CUDA_API void lx_cuda_matmul_batched(lx_cuda_matmul_context *ctx, void *d, // see shape
                                          cudaDataType_t d_type,
                                          const lx_bf16 *a, // see shape
                                          const lx_bf16 *b, // see shape
                                          const lx_gemm_shape *shape, float alpha, int accumulate,
                                          cudaStream_t stream) {
  LX_CUDA_REQUIRE(shape->m > 0 && shape->n > 0 && shape->k > 0 && shape->batch > 0);
  LX_CUDA_REQUIRE(d_type == CUDA_R_16BF || d_type == CUDA_R_32F);
  int alignment = lx_cuda_alignment(d, d_type == CUDA_R_32F ? 4 : 2, a, b, shape, 16);
  lx_cuda_matmul_plan *plan =
      lx_cuda_matmul_plan_of(ctx, shape, accumulate, alignment, LX_EPILOGUE_NONE, d_type);
  lx_cuda_matmul_run(ctx, plan, d, a, b, alpha, stream);
}

/* D (m, n) = op(A) op(B) [+ D when accumulate], row-major, fp32 accumulation.
 *   a     (m, k), or (k, m) when trans_a; bf16
 *   b     (k, n), or (n, k) when trans_b; bf16
 *   d     (m, n) of d_type: CUDA_R_16BF (activations) or CUDA_R_32F (weight
 *         gradients, which accumulate over micro-batches in fp32)
 *   bias  (n) bf16 for the _BIAS epilogues, else NULL
 *   aux   (m, n) bf16 for the GELU epilogues: written (pre-activation) by
 *         GELU / GELU_BIAS, read by DGELU; else NULL
 * DGELU scales the product itself by gelu'(aux), so it cannot also add into
 * D: it requires accumulate == 0 (the emitter uses it only where the gradient
 * buffer is fresh). Pointers must be 16-byte aligned (the arena aligns).
 * The product is scaled by alpha (lx_cuda_matmul: 1). */
LX_CUDA_API void lx_cuda_matmul_scaled(lx_cuda_matmul_context *ctx, void *d, // (m, n)
                                         cudaDataType_t d_type,
                                         const lx_bf16 *a, // (m, k) or (k, m)
                                         const lx_bf16 *b, // (k, n) or (n, k)
                                         int m, int n, int k, int trans_a, int trans_b, int accumulate,
                                         lx_epilogue epilogue,
                                         const lx_bf16 *bias, // (n) or NULL
                                         lx_bf16 *aux,        // (m, n) or NULL
                                         float alpha, cudaStream_t stream) {
  LX_CUDA_REQUIRE(m > 0 && n > 0 && k > 0);
  LX_CUDA_REQUIRE(d_type == CUDA_R_16BF || d_type == CUDA_R_32F);
  LX_CUDA_REQUIRE((((uintptr_t)a | (uintptr_t)b | (uintptr_t)d) % 16) == 0);
  LX_CUDA_REQUIRE((bias != NULL) == (epilogue == LX_EPILOGUE_BIAS || epilogue == LX_EPILOGUE_GELU_BIAS));
  LX_CUDA_REQUIRE((aux != NULL) ==
                  (epilogue == LX_EPILOGUE_GELU || epilogue == LX_EPILOGUE_GELU_BIAS || epilogue == LX_EPILOGUE_DGELU));
  LX_CUDA_REQUIRE(!(epilogue == LX_EPILOGUE_DGELU && accumulate));
  /* cuBLASLt's epilogues support bf16 outputs here; fp32 D is for gradients */
  LX_CUDA_REQUIRE(epilogue == LX_EPILOGUE_NONE || d_type == CUDA_R_16BF);
  LX_CUDA_REQUIRE(aux == NULL || n % 8 == 0); /* cuBLASLt wants aux_ld % 8 == 0 */

  lx_gemm_shape shape = lx_gemm_dense(m, n, k, trans_a, trans_b);
  int alignment = lx_cuda_alignment(d, d_type == CUDA_R_32F ? 4 : 2, a, b, &shape, 256);
  lx_cuda_matmul_plan *plan = lx_cuda_matmul_plan_of(ctx, &shape, accumulate, alignment, epilogue, d_type);

  /* pointers change from call to call (micro-batches, layers): set them now */
  if (bias)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
  if (aux)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                sizeof(aux)));
  lx_cuda_matmul_run(ctx, plan, d, a, b, alpha, stream);
}

LX_CUDA_API void lx_cuda_matmul(lx_cuda_matmul_context *ctx, void *d, // (m, n)
                                  cudaDataType_t d_type,
                                  const lx_bf16 *a, // (m, k) or (k, m)
                                  const lx_bf16 *b, // (k, n) or (n, k)
                                  int m, int n, int k, int trans_a, int trans_b, int accumulate,
                                  lx_epilogue epilogue,
                                  const lx_bf16 *bias, // (n) or NULL
                                  lx_bf16 *aux,        // (m, n) or NULL
                                  cudaStream_t stream) {
  lx_cuda_matmul_scaled(ctx, d, d_type, a, b, m, n, k, trans_a, trans_b, accumulate, epilogue, bias, aux, 1.0f,
                        stream);
}

/* ---- linear layers: out = inp W^T + bias ----------------------------------- */

LX_CUDA_API void lx_linear_forward(const lx_ctx *ctx,
                                   lx_bf16 *out,          // (BT, OC)
                                   const lx_bf16 *inp,    // (BT, C)
                                   const lx_bf16 *weight, // (OC, C)
                                   const lx_bf16 *bias,   // (OC) or NULL
                                   int BT, int C, int OC) {
  lx_cuda_matmul(ctx->matmul, out, CUDA_R_16BF, inp, weight, BT, OC, C, 0, 1, 0,
                 bias ? LX_EPILOGUE_BIAS : LX_EPILOGUE_NONE, bias, NULL, ctx->stream);
}

/* out = gelu(inp W^T + bias), with the pre-activation saved in pre_gelu: the
 * fused form of linear + gelu (the gelu op saves its input, which is pre_gelu). */
LX_CUDA_API void lx_linear_gelu_forward(const lx_ctx *ctx,
                                        lx_bf16 *out,          // (BT, OC)
                                        lx_bf16 *pre_gelu,     // (BT, OC)
                                        const lx_bf16 *inp,    // (BT, C)
                                        const lx_bf16 *weight, // (OC, C)
                                        const lx_bf16 *bias,   // (OC) or NULL
                                        int BT, int C, int OC) {
  lx_cuda_matmul(ctx->matmul, out, CUDA_R_16BF, inp, weight, BT, OC, C, 0, 1, 0,
                 bias ? LX_EPILOGUE_GELU_BIAS : LX_EPILOGUE_GELU, bias, pre_gelu, ctx->stream);
}

LX_CUDA_API size_t lx_cuda_bias_backward_scratch_floats(int BT, int OC) {
  return (size_t)lx_cuda_column_chunks(BT) * OC;
}

/* partials[chunk][o] = sum of dout[r][o] over the chunk's rows. */
__global__ void __launch_bounds__(LX_CUDA_COLUMN_THREADS)
    lx_cuda_bias_partials_kernel(float *partials,     // (chunks, OC)
                                 const lx_bf16 *dout, // (BT, OC)
                                 int BT, int OC) {
  float *const out[1] = {partials};
  lx_column_partials<1>(out, BT, OC,
                        [=](int r, int o, float *sum) { sum[0] += lx_to_float(dout[(size_t)r * OC + o]); });
}

/* dbias += sum over rows of dout, in a fixed order (no atomics). */
LX_CUDA_API void lx_cuda_bias_backward(float *dbias,        // (OC)
                                         float *scratch,      // (lx_cuda_bias_backward_scratch_floats)
                                         const lx_bf16 *dout, // (BT, OC)
                                         int BT, int OC, cudaStream_t stream) {
  unsigned chunks = lx_cuda_column_chunks(BT);
  lx_cuda_bias_partials_kernel<<<lx_column_grid(BT, OC), LX_CUDA_COLUMN_THREADS, 0, stream>>>(scratch, dout, BT, OC);
  LX_CUDA_LAUNCHED();
  lx_cuda_sum_partials_kernel<<<lx_ceil_div((size_t)OC, 256), 256, 0, stream>>>(dbias, scratch, (int)chunks, OC);
  LX_CUDA_LAUNCHED();
}

/* dinp += dout W (= under LX_GRAD_WRITE); dweight += dout^T inp (fp32); dbias += column sums of dout.
 * dinp may be NULL (nothing upstream wants it, or zero bubble's W pass),
 * dweight NULL (zero bubble's B pass); dbias is NULL without bias, and in the B pass. */
LX_CUDA_API void lx_linear_backward(const lx_ctx *ctx,
                                    lx_bf16 *dinp,         // (BT, C) or NULL
                                    float *dweight,        // (OC, C) or NULL (zero bubble's B pass)
                                    float *dbias,          // (OC) or NULL
                                    const lx_bf16 *dout,   // (BT, OC)
                                    const lx_bf16 *inp,    // (BT, C), or NULL when dweight is
                                    const lx_bf16 *weight, // (OC, C)
                                    int BT, int C, int OC, lx_grad_mode dinp_mode) {
  if (dinp)
    lx_cuda_matmul(ctx->matmul, dinp, CUDA_R_16BF, dout, weight, BT, C, OC, 0, 0, dinp_mode == LX_GRAD_ADD,
                   LX_EPILOGUE_NONE, NULL, NULL, ctx->stream);
  if (dweight)
    lx_cuda_matmul(ctx->matmul, dweight, CUDA_R_32F, dout, inp, OC, C, BT, 1, 0, 1, LX_EPILOGUE_NONE, NULL,
                   NULL, ctx->stream);
  if (dbias) {
    lx_cuda_bias_backward(dbias, lx_scratch(ctx, lx_cuda_bias_backward_scratch_floats(BT, OC)), dout, BT, OC,
                          ctx->stream);
  }
}

/* The backward of the next linear's input product fused with the backward of
 * the gelu in front of it (the pair lx_linear_gelu_forward made):
 *   dpre_gelu = (dout W) * gelu'(pre_gelu)
 * WRITTEN, not added: the epilogue scales the product itself, so the emitter
 * uses this only where dpre_gelu has no other contribution. */
LX_CUDA_API void lx_linear_dgelu_backward(const lx_ctx *ctx,
                                          lx_bf16 *dpre_gelu,      // (BT, C)
                                          const lx_bf16 *dout,     // (BT, OC) gradient of the next linear's output
                                          const lx_bf16 *weight,   // (OC, C) the next linear's weight
                                          const lx_bf16 *pre_gelu, // (BT, C)
                                          int BT, int C, int OC) {
  lx_cuda_matmul(ctx->matmul, dpre_gelu, CUDA_R_16BF, dout, weight, BT, C, OC, 0, 0, 0, LX_EPILOGUE_DGELU, NULL,
                 (lx_bf16 *)pre_gelu, ctx->stream);
}

/* ---- LoRA (Hu et al. 2021): out = inp W^T + bias + scale (d(inp) A^T) B^T -----
 * The CPU twins are templates/cpu/lx_matmul.h's, with their dropout d of the
 * adapter's input (element (r, c) kept as lx_cuda_dropout_keep of index
 * r c_whole + col0 + c says) and down = d(inp) A^T (rank R) kept for dB. Five
 * small GEMMs beside the base one, each cuBLASLt's; du and d(inp) in the scratch. */

/* out = d(inp), or with `add` out += d(inp): the kept elements scaled by keep_scale. */
__global__ void lx_cuda_lora_dropout_kernel(lx_bf16 *out,       // (BT, C)
                                            const lx_bf16 *inp, // (BT, C)
                                            int BT, int C, uint64_t key, uint32_t threshold, float keep_scale,
                                            long long col0, long long c_whole, int add) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)BT * C) return;
  size_t r = i / C, c = i % C;
  float kept = lx_cuda_dropout_keep(key, r * (uint64_t)c_whole + (uint64_t)col0 + c, threshold)
                   ? lx_to_float(inp[i]) * keep_scale
                   : 0.0f;
  out[i] = lx_to_bf16(add ? lx_to_float(out[i]) + kept : kept);
}

static void lx_cuda_lora_dropout(lx_bf16 *out, const lx_bf16 *inp, int BT, int C, double p, uint64_t seed,
                                 uint64_t stream_id, long long col0, long long c_whole, int add, cudaStream_t stream) {
  size_t n = (size_t)BT * C;
  lx_cuda_lora_dropout_kernel<<<lx_ceil_div(n, 256), 256, 0, stream>>>(
      out, inp, BT, C, lx_cuda_rng_key(seed, stream_id), lx_cuda_dropout_threshold(p), (float)(1.0 / (1.0 - p)), col0,
      c_whole, add);
  LX_CUDA_LAUNCHED();
}

/* du = scale dout B (BT, R) and, under dropout, a (BT, C) buffer, bf16 in the
 * stream's scratch; C is the largest input width of an adapted linear, 0 without dropout. */
LX_CUDA_API size_t lx_cuda_lora_scratch_floats(int BT, int R, int C) {
  return ((size_t)BT * R + 7) / 8 * 4 + ((size_t)BT * C + 1) / 2;
}

/* The scratch's du and (BT, C) parts. */
static lx_bf16 *lx_cuda_lora_scratch(const lx_ctx *ctx, int BT, int R, int C, lx_bf16 **wide) {
  lx_bf16 *du = (lx_bf16 *)lx_scratch(ctx, lx_cuda_lora_scratch_floats(BT, R, C));
  *wide = du + ((size_t)BT * R + 7) / 8 * 8; /* 16-byte aligned for cuBLASLt */
  return du;
}

LX_CUDA_API void lx_lora_linear_forward(const lx_ctx *ctx,
                                        lx_bf16 *out,          // (BT, OC)
                                        lx_bf16 *down,         // (BT, R)
                                        const lx_bf16 *inp,    // (BT, C)
                                        const lx_bf16 *weight, // (OC, C)
                                        const lx_bf16 *bias,   // (OC) or NULL
                                        const lx_bf16 *lora_a, // (R, C)
                                        const lx_bf16 *lora_b, // (OC, R)
                                        int BT, int C, int OC, int R, float scale, double p, uint64_t seed,
                                        uint64_t stream_id, long long col0, long long c_whole) {
  lx_linear_forward(ctx, out, inp, weight, bias, BT, C, OC);
  const lx_bf16 *x = inp;
  if (p > 0) {
    lx_bf16 *dropped;
    lx_cuda_lora_scratch(ctx, BT, R, C, &dropped);
    lx_cuda_lora_dropout(dropped, inp, BT, C, p, seed, stream_id, col0, c_whole, 0, ctx->stream);
    x = dropped;
  }
  lx_cuda_matmul(ctx->matmul, down, CUDA_R_16BF, x, lora_a, BT, R, C, 0, 1, 0, LX_EPILOGUE_NONE, NULL, NULL,
                 ctx->stream);
  lx_cuda_matmul_scaled(ctx->matmul, out, CUDA_R_16BF, down, lora_b, BT, OC, R, 0, 1, 1, LX_EPILOGUE_NONE, NULL, NULL,
                        scale, ctx->stream);
}

/* dinp += dout W + d(du A) (the base part = under LX_GRAD_WRITE); dlora_a += du^T d(inp),
 * dlora_b += scale dout^T down (fp32); the base weights' as lx_linear_backward.
 * Fine-tuning passes NULL for the frozen ones' gradients (LoRA-FA: A's, and inp). */
LX_CUDA_API void lx_lora_linear_backward(const lx_ctx *ctx,
                                         lx_bf16 *dinp,         // (BT, C) or NULL
                                         float *dweight,        // (OC, C) or NULL
                                         float *dbias,          // (OC) or NULL
                                         float *dlora_a,        // (R, C) or NULL
                                         float *dlora_b,        // (OC, R) or NULL
                                         const lx_bf16 *dout,   // (BT, OC)
                                         const lx_bf16 *inp,    // (BT, C), or NULL when dweight and dlora_a are
                                         const lx_bf16 *down,   // (BT, R)
                                         const lx_bf16 *weight, // (OC, C)
                                         const lx_bf16 *lora_a, // (R, C)
                                         const lx_bf16 *lora_b, // (OC, R)
                                         int BT, int C, int OC, int R, float scale, double p, uint64_t seed,
                                         uint64_t stream_id, long long col0, long long c_whole,
                                         lx_grad_mode dinp_mode) {
  lx_linear_backward(ctx, dinp, dweight, dbias, dout, inp, weight, BT, C, OC, dinp_mode);
  if (dlora_b)
    lx_cuda_matmul_scaled(ctx->matmul, dlora_b, CUDA_R_32F, dout, down, OC, R, BT, 1, 0, 1, LX_EPILOGUE_NONE, NULL,
                          NULL, scale, ctx->stream);
  if (!dinp && !dlora_a) return;
  lx_bf16 *wide, *du = lx_cuda_lora_scratch(ctx, BT, R, p > 0 ? C : 0, &wide);
  lx_cuda_matmul_scaled(ctx->matmul, du, CUDA_R_16BF, dout, lora_b, BT, R, OC, 0, 0, 0, LX_EPILOGUE_NONE, NULL, NULL,
                        scale, ctx->stream);
  if (dlora_a) {
    const lx_bf16 *x = inp;
    if (p > 0) { /* the forward's d(inp), drawn again */
      lx_cuda_lora_dropout(wide, inp, BT, C, p, seed, stream_id, col0, c_whole, 0, ctx->stream);
      x = wide;
    }
    lx_cuda_matmul(ctx->matmul, dlora_a, CUDA_R_32F, du, x, R, C, BT, 1, 0, 1, LX_EPILOGUE_NONE, NULL, NULL,
                   ctx->stream);
  }
  if (dinp && p == 0)
    lx_cuda_matmul(ctx->matmul, dinp, CUDA_R_16BF, du, lora_a, BT, C, R, 0, 0, 1, LX_EPILOGUE_NONE, NULL, NULL,
                   ctx->stream);
  if (dinp && p > 0) { /* d(du A): the dropped columns pass nothing back */
    lx_cuda_matmul(ctx->matmul, wide, CUDA_R_16BF, du, lora_a, BT, C, R, 0, 0, 0, LX_EPILOGUE_NONE, NULL, NULL,
                   ctx->stream);
    lx_cuda_lora_dropout(dinp, wide, BT, C, p, seed, stream_id, col0, c_whole, 1, ctx->stream);
  }
}

#endif
