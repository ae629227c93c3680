/* lx_cuda_api.h — what the stage programs see of the kernels: host code only.
 *
 * The launchers of templates/cuda are compiled once, in lx_kernels.cu (which
 * includes this file too, so a prototype that drifts from its definition
 * fails to link). Keeping the stage sources free of device code is what
 * makes them compile in seconds. Same conventions as lx_cuda_common.cuh. */
#ifndef LX_CUDA_API_H
#define LX_CUDA_API_H

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lx_cuda_context.h"

typedef __nv_bfloat16 lx_bf16;

/* The layer and RMS norms' epsilon: the kernels' (lx_cuda_norm.cuh) and the
 * exported config.json's. */
#define LX_CUDA_NORM_EPS 1e-5

/* A failing call names itself, its file and line, and takes every rank down. */
void lx_cuda_fail_at(const char *file, int line, const char *call, const char *kind, const char *message);
#include "lx_cuda_check.h"

/* ---- the op kernels (templates/cuda/lx_cuda_*.cuh): their CPU twins' names
 * and argument order, the context first (lx_cuda_context.h) ---- */
void lx_flash_attention_forward(const lx_ctx *ctx, lx_bf16 *out, float *lse, const lx_bf16 *qkv, int B, int T, int H,
                                int KVH, int D, double p, uint64_t seed, uint64_t stream_id, int head_base,
                                int heads_total);
void lx_flash_attention_backward(const lx_ctx *ctx, lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv,
                                 const lx_bf16 *out, const float *lse, int B, int T, int H, int KVH, int D, double p,
                                 uint64_t seed, uint64_t stream_id, int head_base, int heads_total,
                                 lx_grad_mode mode);
/* lynx's own flash kernels, which the two above call unless cuDNN runs them */
void lx_lynx_flash_attention_forward(const lx_ctx *ctx, lx_bf16 *out, float *lse, const lx_bf16 *qkv, int B,
                                     int T, int H, int KVH, int D, double p, uint64_t seed,
                                     uint64_t stream_id, int head_base, int heads_total);
void lx_lynx_flash_attention_backward(const lx_ctx *ctx, lx_bf16 *dqkv, const lx_bf16 *dout,
                                      const lx_bf16 *qkv, const lx_bf16 *out, const float *lse, int B, int T,
                                      int H, int KVH, int D, double p, uint64_t seed, uint64_t stream_id,
                                      int head_base, int heads_total, lx_grad_mode mode);
void lx_attention_forward(const lx_ctx *ctx, lx_bf16 *out, lx_bf16 *probs, const lx_bf16 *qkv, int B, int T,
                          int H, int KVH, int D, double p, uint64_t seed, uint64_t stream_id, int head_base,
                          int heads_total);
/* the query heads of kv heads [kv_first, kv_end) only: a piece of a recomputation cut by kv heads */
void lx_attention_forward_heads(const lx_ctx *ctx, lx_bf16 *out, lx_bf16 *probs, const lx_bf16 *qkv, int B,
                                int T, int H, int KVH, int D, double p, uint64_t seed, uint64_t stream_id,
                                int head_base, int heads_total, int kv_first, int kv_end);
/* the forward's p, seed, stream_id and heads: its dropout is drawn again */
void lx_attention_backward(const lx_ctx *ctx, lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv,
                           const lx_bf16 *probs, int B, int T, int H, int KVH, int D, double p, uint64_t seed,
                           uint64_t stream_id, int head_base, int heads_total);
void lx_rope_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, int B, int T, int H, int KVH, int D,
                     double base);
void lx_rope_backward(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout, int B, int T, int H, int KVH, int D,
                      double base);
void lx_gelu_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, size_t N);
void lx_gelu_backward(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout, const lx_bf16 *inp, size_t N,
                      lx_grad_mode mode);
void lx_silu_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, size_t N);
void lx_silu_backward(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout, const lx_bf16 *inp, size_t N,
                      lx_grad_mode mode);
void lx_swiglu_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, int BT, int F);
void lx_swiglu_backward(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout, const lx_bf16 *inp, int BT, int F,
                        lx_grad_mode mode);
void lx_add_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *a, const lx_bf16 *b, size_t N);
void lx_add_backward(const lx_ctx *ctx, lx_bf16 *da, lx_bf16 *db, const lx_bf16 *dout, size_t N, lx_grad_mode mode_a,
                     lx_grad_mode mode_b);
void lx_dropout_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, size_t N, double p,
                        uint64_t seed, uint64_t stream_id);
void lx_dropout_forward_at(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, size_t N, double p,
                           uint64_t seed, uint64_t stream_id, uint64_t first);
/* the forward's p, seed, stream_id (and first): its mask is drawn again */
void lx_dropout_backward(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout, size_t N, double p,
                         uint64_t seed, uint64_t stream_id, lx_grad_mode mode);
void lx_dropout_backward_at(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout, size_t N, double p,
                            uint64_t seed, uint64_t stream_id, uint64_t first, lx_grad_mode mode);
void lx_embedding_forward(const lx_ctx *ctx, lx_bf16 *out, const int *tokens, const lx_bf16 *wte, int B, int T, int C,
                          int V);
void lx_embedding_backward(const lx_ctx *ctx, float *dwte, const lx_bf16 *dout, const int *tokens, int B, int T,
                           int C, int V);
void lx_embedding_forward_shard(const lx_ctx *ctx, lx_bf16 *out, const int *tokens, const lx_bf16 *wte, int B, int T,
                                int C, int V, int first, int rows);
void lx_embedding_backward_shard(const lx_ctx *ctx, float *dwte, const lx_bf16 *dout, const int *tokens, int B,
                                 int T, int C, int V, int first, int rows);
void lx_position_embedding_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *wpe, int B, int T, int C);
void lx_position_embedding_backward(const lx_ctx *ctx, float *dwpe, const lx_bf16 *dout, int B, int T, int C);
void lx_position_embedding_forward_rows(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *wpe, int T, int C, int first,
                                        int rows);
void lx_position_embedding_backward_rows(const lx_ctx *ctx, float *dwpe, const lx_bf16 *dout, int T, int C,
                                         int first, int rows);
/* The loss kernels write the mean loss to the device (loss, one float)
 * where the CPU ones return it: a step never waits for the host. */
void lx_cross_entropy_forward(const lx_ctx *ctx, float *loss, float *lse, const lx_bf16 *logits, const int *targets,
                              int BT, int V, int Vp);
void lx_cross_entropy_backward(const lx_ctx *ctx, lx_bf16 *dlogits, const lx_bf16 *logits, const float *lse,
                               const int *targets, float dloss, int BT, int V, int Vp, lx_grad_mode mode);
void lx_cross_entropy_backward_slice(const lx_ctx *ctx, lx_bf16 *dlogits, const lx_bf16 *logits, const float *lse,
                                     const int *targets, float dloss, int BT, int V, int Vr, int first,
                                     lx_grad_mode mode);
void lx_cross_entropy_forward_backward(const lx_ctx *ctx, float *loss, float *lse, lx_bf16 *dlogits,
                                       const lx_bf16 *logits, const int *targets, float dloss, int BT, int V, int Vp);
/* `rows` of a micro-batch's BT rows (mini-sequences): loss and gradients over BT,
 * the forward adding its share to *loss when accumulate is set */
void lx_cross_entropy_forward_rows(const lx_ctx *ctx, float *loss, int accumulate, float *lse,
                                   const lx_bf16 *logits, const int *targets, int rows, int BT, int V,
                                   int Vp);
void lx_cross_entropy_backward_rows(const lx_ctx *ctx, lx_bf16 *dlogits, const lx_bf16 *logits,
                                    const float *lse, const int *targets, float dloss, int rows, int BT,
                                    int V, int Vp, lx_grad_mode mode);
void lx_cross_entropy_backward_slice_rows(const lx_ctx *ctx, lx_bf16 *dlogits, const lx_bf16 *logits,
                                          const float *lse, const int *targets, float dloss, int rows, int BT,
                                          int V, int Vr, int first, lx_grad_mode mode);
void lx_linear_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, const lx_bf16 *weight,
                       const lx_bf16 *bias, int BT, int C, int OC);
void lx_linear_backward(const lx_ctx *ctx, lx_bf16 *dinp, float *dweight, float *dbias, const lx_bf16 *dout,
                        const lx_bf16 *inp, const lx_bf16 *weight, int BT, int C, int OC, lx_grad_mode dinp_mode);
void lx_lora_linear_forward(const lx_ctx *ctx, lx_bf16 *out, lx_bf16 *down, const lx_bf16 *inp,
                            const lx_bf16 *weight, const lx_bf16 *bias, const lx_bf16 *lora_a, const lx_bf16 *lora_b,
                            int BT, int C, int OC, int R, float scale, double p, uint64_t seed, uint64_t stream_id,
                            long long col0, long long c_whole);
void lx_lora_linear_backward(const lx_ctx *ctx, lx_bf16 *dinp, float *dweight, float *dbias, float *dlora_a,
                             float *dlora_b, const lx_bf16 *dout, const lx_bf16 *inp, const lx_bf16 *down,
                             const lx_bf16 *weight, const lx_bf16 *lora_a, const lx_bf16 *lora_b, int BT, int C,
                             int OC, int R, float scale, double p, uint64_t seed, uint64_t stream_id, long long col0,
                             long long c_whole, lx_grad_mode dinp_mode);
void lx_layernorm_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, const lx_bf16 *weight,
                          const lx_bf16 *bias, int BT, int C);
void lx_layernorm_backward(const lx_ctx *ctx, lx_bf16 *dinp, float *dweight, float *dbias, const lx_bf16 *dout,
                           const lx_bf16 *inp, const lx_bf16 *weight, int BT, int C);
void lx_rmsnorm_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, const lx_bf16 *weight, int BT, int C);
void lx_rmsnorm_backward(const lx_ctx *ctx, lx_bf16 *dinp, float *dweight, const lx_bf16 *dout, const lx_bf16 *inp,
                         const lx_bf16 *weight, int BT, int C);
/* Fused pairs, CUDA only (emit_fusion.c): a linear with the gelu after it,
 * and the add before a norm, in one kernel. */
void lx_linear_gelu_forward(const lx_ctx *ctx, lx_bf16 *out, lx_bf16 *pre_gelu, const lx_bf16 *inp,
                            const lx_bf16 *weight, const lx_bf16 *bias, int BT, int C, int OC);
void lx_linear_dgelu_backward(const lx_ctx *ctx, lx_bf16 *dpre_gelu, const lx_bf16 *dout, const lx_bf16 *weight,
                              const lx_bf16 *pre_gelu, int BT, int C, int OC);
void lx_residual_layernorm_forward(const lx_ctx *ctx, lx_bf16 *residual_out, lx_bf16 *out, const lx_bf16 *residual,
                                   const lx_bf16 *branch, const lx_bf16 *weight, const lx_bf16 *bias, int BT, int C);
void lx_residual_rmsnorm_forward(const lx_ctx *ctx, lx_bf16 *residual_out, lx_bf16 *out, const lx_bf16 *residual,
                                 const lx_bf16 *branch, const lx_bf16 *weight, int BT, int C);

/* ---- the other launchers: the optimizer's, the loss's parts, the scratch sizes ---- */
/* --comm host (lx_cuda_comm.h): stream waits, on the GPU, until the host sets *flag (mapped host memory) */
void lx_cuda_wait_flag(const int *flag, cudaStream_t stream);
size_t lx_cuda_grad_norm_scratch_floats(void);
size_t lx_cuda_lora_scratch_floats(int BT, int R, int C);
void lx_cuda_grad_norm_squared(float *total, float *scratch, const float *grads, size_t N, int accumulate, cudaStream_t stream);
void lx_cuda_grad_clip_factor(float *factor, const float *norm_squared, double max_norm, cudaStream_t stream);
void lx_cuda_scale(float *x, const float *factor, size_t N, cudaStream_t stream);
size_t lx_cuda_flash_attention_scratch_floats(int B, int T, int H);
size_t lx_cuda_attention_scratch_floats(int T, int KVH);
void lx_cuda_check_tokens(int *bad, const int *tokens, int BT, int V, cudaStream_t stream);
void lx_cuda_vocab_cross_entropy_max(float *row_max, float *picked, const lx_bf16 *logits, const int *targets,
                                     int BT, int V, int Vr, int first, cudaStream_t stream);
void lx_cuda_vocab_cross_entropy_sum(float *sums, const lx_bf16 *logits, const float *row_max, int BT, int V,
                                     int Vr, int first, cudaStream_t stream);
void lx_cuda_vocab_cross_entropy_finish(float *loss, int accumulate, float *lse, float *losses,
                                        const float *row_max, const float *picked, int rows, int BT,
                                        cudaStream_t stream);
void lx_cuda_matmul_init(lx_cuda_matmul_context *ctx, void *workspace, size_t workspace_bytes);
void lx_cuda_matmul_destroy(lx_cuda_matmul_context *ctx);
size_t lx_cuda_bias_backward_scratch_floats(int BT, int OC);
void lx_cuda_bias_backward(float *dbias, float *scratch, const lx_bf16 *dout, int BT, int OC, cudaStream_t stream);
size_t lx_cuda_norm_backward_scratch_floats(int BT, int C);

/* ---- defined in lx_kernels.cu for the emitted programs ---- */
/* A matmul context with its cuBLASLt handle and workspace (cudaMalloc'd once). */
lx_cuda_matmul_context *lx_cuda_matmul_create(void);
/* AdamW on one parameter tensor: fp32 master and moments, the bf16 copy
 * rewritten; grads scaled by the device scalar clip (NULL: 1). */
void lx_cuda_adamw_tensor(lx_bf16 *params, float *master, const float *grads, float *m, float *v, const float *clip,
                          size_t N, double lr, double beta1, double beta2, double eps, double weight_decay, int step,
                          cudaStream_t stream);
/* master[i] = params[i] in fp32: the masters start from the initial bf16 weights. */
void lx_cuda_master_from_params(float *master, const lx_bf16 *params, size_t N, cudaStream_t stream);

#endif
