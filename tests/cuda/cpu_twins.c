/* cpu_twins.c — exports the CPU kernels (static inline in templates/cpu) for
 * kernel_twins.cu; each twin_* is the lx_* function of the same name. The
 * CUDA kernels have those names too, and their own lx_ctx: the CPU ones stay
 * in this C translation unit, behind the twin_* names. */
#include "cpu_twins.h"

#include <omp.h>

#include "lx_kernels.h"

/* The CPU kernels' context: all of OpenMP's threads, as in the emitted programs. */
static const lx_ctx *pool(void) {
  static lx_ctx ctx;
  ctx.threads = omp_get_max_threads();
  return &ctx;
}

void twin_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                         int OC) {
  lx_linear_forward(pool(), out, inp, weight, bias, BT, C, OC);
}
void twin_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int BT, int C, int OC) {
  lx_linear_backward(pool(), dinp, dweight, dbias, dout, inp, weight, BT, C, OC, LX_GRAD_ADD);
}
void twin_lora_linear_forward(float *out, float *down, const float *inp, const float *weight, const float *bias,
                              const float *lora_a, const float *lora_b, int BT, int C, int OC, int R, float scale,
                              twin_lora_dropout d) {
  lx_lora_linear_forward(pool(), out, down, inp, weight, bias, lora_a, lora_b, BT, C, OC, R, scale, d.p, d.seed,
                         d.stream, d.col0, d.c_whole);
}
/* fine-tuning's call: W and the bias frozen */
void twin_lora_linear_backward(float *dinp, float *dlora_a, float *dlora_b, const float *dout, const float *inp,
                               const float *down, const float *weight, const float *lora_a, const float *lora_b,
                               int BT, int C, int OC, int R, float scale, twin_lora_dropout d) {
  lx_lora_linear_backward(pool(), dinp, NULL, NULL, dlora_a, dlora_b, dout, inp, down, weight, lora_a, lora_b, BT, C,
                          OC, R, scale, d.p, d.seed, d.stream, d.col0, d.c_whole, LX_GRAD_ADD);
}
void twin_layernorm_forward(float *out, const float *inp, const float *weight, const float *bias, int BT,
                            int C) {
  lx_layernorm_forward(pool(), out, inp, weight, bias, BT, C);
}
void twin_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int BT, int C) {
  lx_layernorm_backward(pool(), dinp, dweight, dbias, dout, inp, weight, BT, C);
}
void twin_rmsnorm_forward(float *out, const float *inp, const float *weight, int BT, int C) {
  lx_rmsnorm_forward(pool(), out, inp, weight, BT, C);
}
void twin_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                           const float *weight, int BT, int C) {
  lx_rmsnorm_backward(pool(), dinp, dweight, dout, inp, weight, BT, C);
}
void twin_attention_forward(float *out, float *probs, const float *qkv, int B, int T, int H, int KVH, int D,
                            double p, uint64_t seed, uint64_t stream, int head_base, int heads_total) {
  lx_attention_forward(pool(), out, probs, qkv, B, T, H, KVH, D, p, seed, stream, head_base, heads_total);
}
void twin_attention_forward_heads(float *out, float *probs, const float *qkv, int B, int T, int H, int KVH,
                                  int D, double p, uint64_t seed, uint64_t stream, int head_base,
                                  int heads_total, int kv_first, int kv_end) {
  lx_attention_forward_heads(pool(), out, probs, qkv, B, T, H, KVH, D, p, seed, stream, head_base,
                             heads_total, kv_first, kv_end);
}
void twin_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs, int B,
                             int T, int H, int KVH, int D, double p, uint64_t seed, uint64_t stream,
                             int head_base, int heads_total) {
  lx_attention_backward(pool(), dqkv, dout, qkv, probs, B, T, H, KVH, D, p, seed, stream, head_base,
                        heads_total);
}
void twin_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int H, int KVH,
                                  int D, double p, uint64_t seed, uint64_t stream, int head_base,
                                  int heads_total) {
  lx_flash_attention_forward(pool(), out, lse, qkv, B, T, H, KVH, D, p, seed, stream, head_base, heads_total);
}
void twin_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int H, int KVH, int D, double p,
                                   uint64_t seed, uint64_t stream, int head_base, int heads_total) {
  lx_flash_attention_backward(pool(), dqkv, dout, qkv, out, lse, B, T, H, KVH, D, p, seed, stream, head_base,
                              heads_total, LX_GRAD_ADD);
}
void twin_rope_forward(float *out, const float *inp, int B, int T, int H, int KVH, int D, double base) {
  lx_rope_forward(pool(), out, inp, B, T, H, KVH, D, base);
}
void twin_rope_backward(float *dinp, const float *dout, int B, int T, int H, int KVH, int D, double base) {
  lx_rope_backward(pool(), dinp, dout, B, T, H, KVH, D, base);
}
void twin_gelu_forward(float *out, const float *inp, size_t N) { lx_gelu_forward(pool(), out, inp, N); }
void twin_gelu_backward(float *dinp, const float *dout, const float *inp, size_t N) {
  lx_gelu_backward(pool(), dinp, dout, inp, N, LX_GRAD_ADD);
}
void twin_silu_forward(float *out, const float *inp, size_t N) { lx_silu_forward(pool(), out, inp, N); }
void twin_silu_backward(float *dinp, const float *dout, const float *inp, size_t N) {
  lx_silu_backward(pool(), dinp, dout, inp, N, LX_GRAD_ADD);
}
void twin_swiglu_forward(float *out, const float *inp, int BT, int F) {
  lx_swiglu_forward(pool(), out, inp, BT, F);
}
void twin_swiglu_backward(float *dinp, const float *dout, const float *inp, int BT, int F) {
  lx_swiglu_backward(pool(), dinp, dout, inp, BT, F, LX_GRAD_ADD);
}
void twin_dropout_forward(float *out, const float *inp, size_t N, double p, uint64_t seed, uint64_t stream) {
  lx_dropout_forward(pool(), out, inp, N, p, seed, stream);
}
void twin_dropout_forward_at(float *out, const float *inp, size_t N, double p, uint64_t seed, uint64_t stream,
                             uint64_t first) {
  lx_dropout_forward_at(pool(), out, inp, N, p, seed, stream, first);
}
void twin_dropout_backward(float *dinp, const float *dout, size_t N, double p, uint64_t seed,
                           uint64_t stream) {
  lx_dropout_backward(pool(), dinp, dout, N, p, seed, stream, LX_GRAD_ADD);
}
void twin_embedding_forward(float *out, const int *tokens, const float *wte, int B, int T, int C, int V) {
  lx_embedding_forward(pool(), out, tokens, wte, B, T, C, V);
}
void twin_embedding_backward(float *dwte, const float *dout, const int *tokens, int B, int T, int C, int V) {
  lx_embedding_backward(pool(), dwte, dout, tokens, B, T, C, V);
}
void twin_embedding_forward_shard(float *out, const int *tokens, const float *wte, int B, int T, int C, int V,
                                  int first, int rows) {
  lx_embedding_forward_shard(pool(), out, tokens, wte, B, T, C, V, first, rows);
}
void twin_embedding_backward_shard(float *dwte, const float *dout, const int *tokens, int B, int T, int C,
                                   int V, int first, int rows) {
  lx_embedding_backward_shard(pool(), dwte, dout, tokens, B, T, C, V, first, rows);
}
void twin_position_embedding_forward(float *out, const float *wpe, int B, int T, int C) {
  lx_position_embedding_forward(pool(), out, wpe, B, T, C);
}
void twin_position_embedding_backward(float *dwpe, const float *dout, int B, int T, int C) {
  lx_position_embedding_backward(pool(), dwpe, dout, B, T, C);
}
void twin_position_embedding_forward_rows(float *out, const float *wpe, int T, int C, int first, int rows) {
  lx_position_embedding_forward_rows(pool(), out, wpe, T, C, first, rows);
}
void twin_position_embedding_backward_rows(float *dwpe, const float *dout, int T, int C, int first,
                                           int rows) {
  lx_position_embedding_backward_rows(pool(), dwpe, dout, T, C, first, rows);
}
float twin_cross_entropy_forward(float *lse, const float *logits, const int *targets, int BT, int V, int Vp) {
  return lx_cross_entropy_forward(pool(), lse, logits, targets, BT, V, Vp);
}
void twin_cross_entropy_backward(float *dlogits, const float *logits, const float *lse, const int *targets,
                                 float dloss, int BT, int V, int Vp) {
  lx_cross_entropy_backward(pool(), dlogits, logits, lse, targets, dloss, BT, V, Vp, LX_GRAD_ADD);
}
void twin_cross_entropy_backward_slice(float *dlogits, const float *logits, const float *lse,
                                       const int *targets, float dloss, int BT, int V, int Vr, int first) {
  lx_cross_entropy_backward_slice(pool(), dlogits, logits, lse, targets, dloss, BT, V, Vr, first,
                                  LX_GRAD_ADD);
}
void twin_adamw_update(float *params, const float *grads, float *m, float *v, size_t N, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int step) {
  lx_adamw_hparams hp = {beta1, beta2, eps, weight_decay};
  lx_adamw_update(pool(), params, grads, m, v, N, lr, hp, step);
}
double twin_grad_norm_squared(const float *grads, size_t N) { return lx_grad_norm_squared(pool(), grads, N); }
double twin_grad_clip_factor(double global_norm, double max_norm) {
  return lx_grad_clip_factor(global_norm, max_norm);
}
