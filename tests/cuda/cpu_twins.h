/* cpu_twins.h — the CPU kernels of templates/cpu, exported from cpu_twins.c
 * (a C11 file compiled by gcc) so that kernel_twins.cu (C++ under nvcc) can
 * call them: the CPU headers are static inline C, not C++. float build. */
#ifndef LX_CPU_TWINS_H
#define LX_CPU_TWINS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void twin_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC);
void twin_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int BT, int C, int OC);
/* LoRA's dropout: probability, seed, stream, the rank's first input column and the whole input's */
typedef struct {
  double p;
  uint64_t seed, stream;
  long long col0, c_whole;
} twin_lora_dropout;
void twin_lora_linear_forward(float *out, float *down, const float *inp, const float *weight, const float *bias,
                              const float *lora_a, const float *lora_b, int BT, int C, int OC, int R, float scale,
                              twin_lora_dropout d);
void twin_lora_linear_backward(float *dinp, float *dlora_a, float *dlora_b, const float *dout, const float *inp,
                               const float *down, const float *weight, const float *lora_a, const float *lora_b,
                               int BT, int C, int OC, int R, float scale, twin_lora_dropout d);
void twin_layernorm_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C);
void twin_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int BT, int C);
void twin_rmsnorm_forward(float *out, const float *inp, const float *weight, int BT, int C);
void twin_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                           int BT, int C);
void twin_attention_forward(float *out, float *probs, const float *qkv, int B, int T, int H, int KVH, int D,
                            double p, uint64_t seed, uint64_t stream, int head_base, int heads_total);
void twin_attention_forward_heads(float *out, float *probs, const float *qkv, int B, int T, int H, int KVH,
                                  int D, double p, uint64_t seed, uint64_t stream, int head_base,
                                  int heads_total, int kv_first, int kv_end);
void twin_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs, int B,
                             int T, int H, int KVH, int D, double p, uint64_t seed, uint64_t stream,
                             int head_base, int heads_total);
void twin_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int H, int KVH,
                                  int D, double p, uint64_t seed, uint64_t stream, int head_base,
                                  int heads_total);
void twin_flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int H, int KVH, int D, double p,
                                   uint64_t seed, uint64_t stream, int head_base, int heads_total);
void twin_rope_forward(float *out, const float *inp, int B, int T, int H, int KVH, int D, double base);
void twin_rope_backward(float *dinp, const float *dout, int B, int T, int H, int KVH, int D, double base);
void twin_gelu_forward(float *out, const float *inp, size_t N);
void twin_gelu_backward(float *dinp, const float *dout, const float *inp, size_t N);
void twin_silu_forward(float *out, const float *inp, size_t N);
void twin_silu_backward(float *dinp, const float *dout, const float *inp, size_t N);
void twin_swiglu_forward(float *out, const float *inp, int BT, int F);
void twin_swiglu_backward(float *dinp, const float *dout, const float *inp, int BT, int F);
void twin_dropout_forward(float *out, const float *inp, size_t N, double p, uint64_t seed, uint64_t stream);
void twin_dropout_forward_at(float *out, const float *inp, size_t N, double p, uint64_t seed, uint64_t stream,
                             uint64_t first);
void twin_dropout_backward(float *dinp, const float *dout, size_t N, double p, uint64_t seed,
                           uint64_t stream);
void twin_embedding_forward(float *out, const int *tokens, const float *wte, int B, int T, int C, int V);
void twin_embedding_backward(float *dwte, const float *dout, const int *tokens, int B, int T, int C, int V);
void twin_embedding_forward_shard(float *out, const int *tokens, const float *wte, int B, int T, int C, int V,
                                  int first, int rows);
void twin_embedding_backward_shard(float *dwte, const float *dout, const int *tokens, int B, int T, int C,
                                   int V, int first, int rows);
void twin_position_embedding_forward(float *out, const float *wpe, int B, int T, int C);
void twin_position_embedding_backward(float *dwpe, const float *dout, int B, int T, int C);
void twin_position_embedding_forward_rows(float *out, const float *wpe, int T, int C, int first, int rows);
void twin_position_embedding_backward_rows(float *dwpe, const float *dout, int T, int C, int first, int rows);
float twin_cross_entropy_forward(float *lse, const float *logits, const int *targets, int BT, int V, int Vp);
void twin_cross_entropy_backward(float *dlogits, const float *logits, const float *lse, const int *targets,
                                 float dloss, int BT, int V, int Vp);
void twin_cross_entropy_backward_slice(float *dlogits, const float *logits, const float *lse,
                                       const int *targets, float dloss, int BT, int V, int Vr, int first);
void twin_adamw_update(float *params, const float *grads, float *m, float *v, size_t N, double lr, double beta1,
                       double beta2, double eps, double weight_decay, int step);
double twin_grad_norm_squared(const float *grads, size_t N);
double twin_grad_clip_factor(double global_norm, double max_norm);

#ifdef __cplusplus
}
#endif

#endif
