/* tiny_gpt.h — a one-block GPT wired from every CPU kernel the way an emitted
 * stage wires them: prologue (embedding + position, add), a block (layernorm,
 * qkv linear, rope, flash attention with dropout, projection, dropout,
 * residual add, rmsnorm, swiglu MLP with a gelu, residual add) and the
 * epilogue (final layernorm, tied lm_head, cross-entropy). The float test
 * trains it; the double test checks its whole gradient by differences. */
#ifndef TINY_GPT_H
#define TINY_GPT_H

#include "cpu_test_util.h"

/* ---- a tiny one-block GPT, every kernel in its place ------------------------ */

enum {
  TG_B = 2,
  TG_T = 8,
  TG_V = 16,
  TG_C = 16,
  TG_H = 4,
  TG_KVH = 2,
  TG_D = 4,
  TG_QKV = (TG_H + 2 * TG_KVH) * TG_D,
  TG_F = 32,
  TG_BT = TG_B * TG_T
};
#define TG_DROPOUT 0.1
#define TG_ROPE_BASE 10000.0

/* parameter tensors, in the order of the flat parameter buffer */
enum { WTE, WPE, LN1W, LN1B, WQKV, BQKV, WO, BO, RMSW, WUP, WDOWN, BDOWN, LNFW, LNFB, N_PARAMS };
static const size_t param_sizes[N_PARAMS] = {
    TG_V * TG_C, TG_T *TG_C, TG_C,           TG_C,       TG_QKV *TG_C, TG_QKV, TG_C *TG_H *TG_D,
    TG_C,        TG_C,       2 * TG_F *TG_C, TG_C *TG_F, TG_C,         TG_C,   TG_C};

typedef struct {
  real *t[N_PARAMS];
} params;

/* activations of one micro-batch; the same struct holds their gradients */
typedef struct {
  real *emb, *pos, *x0, *h1, *qkv, *qkv_r, *att, *proj, *proj_d, *x1, *h2, *up, *sw, *ge, *down, *x2, *hf,
      *logits, *lse, *ce_lse;
} acts;

static inline void params_view(params *p, real *flat) {
  for (int i = 0; i < N_PARAMS; i++) {
    p->t[i] = flat;
    flat += param_sizes[i];
  }
}

static inline acts acts_alloc(void) {
  acts a = {.emb = zero_tensor(TG_BT * TG_C),
            .pos = zero_tensor(TG_BT * TG_C),
            .x0 = zero_tensor(TG_BT * TG_C),
            .h1 = zero_tensor(TG_BT * TG_C),
            .qkv = zero_tensor(TG_BT * TG_QKV),
            .qkv_r = zero_tensor(TG_BT * TG_QKV),
            .att = zero_tensor(TG_BT * TG_H * TG_D),
            .proj = zero_tensor(TG_BT * TG_C),
            .proj_d = zero_tensor(TG_BT * TG_C),
            .x1 = zero_tensor(TG_BT * TG_C),
            .h2 = zero_tensor(TG_BT * TG_C),
            .up = zero_tensor(TG_BT * 2 * TG_F),
            .sw = zero_tensor(TG_BT * TG_F),
            .ge = zero_tensor(TG_BT * TG_F),
            .down = zero_tensor(TG_BT * TG_C),
            .x2 = zero_tensor(TG_BT * TG_C),
            .hf = zero_tensor(TG_BT * TG_C),
            .logits = zero_tensor(TG_BT * TG_V),
            .lse = zero_tensor(TG_B * TG_H * TG_T),
            .ce_lse = zero_tensor(TG_BT)};
  return a;
}

static inline void acts_zero(acts *g) {
  real *all[] = {g->emb, g->pos, g->x0, g->h1, g->qkv, g->qkv_r, g->att, g->proj, g->proj_d,
                 g->x1,  g->h2,  g->up, g->sw, g->ge,  g->down,  g->x2,  g->hf,   g->logits};
  size_t sizes[] = {TG_BT * TG_C,   TG_BT * TG_C,        TG_BT * TG_C, TG_BT * TG_C, TG_BT * TG_QKV,
                    TG_BT * TG_QKV, TG_BT * TG_H * TG_D, TG_BT * TG_C, TG_BT * TG_C, TG_BT * TG_C,
                    TG_BT * TG_C,   TG_BT * 2 * TG_F,    TG_BT * TG_F, TG_BT * TG_F, TG_BT * TG_C,
                    TG_BT * TG_C,   TG_BT * TG_C,        TG_BT * TG_V};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    lx_zero(all[i], sizes[i]);
}

static inline void acts_free(acts *a) {
  real *all[] = {a->emb, a->pos, a->x0, a->h1, a->qkv,  a->qkv_r, a->att, a->proj,   a->proj_d, a->x1,
                 a->h2,  a->up,  a->sw, a->ge, a->down, a->x2,    a->hf,  a->logits, a->lse,    a->ce_lse};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    free(all[i]);
}

static inline real model_forward(acts *a, const params *p, const int *tokens, const int *targets,
                                 uint64_t step) {
  uint64_t stream_attn = lx_rng_stream(step, 0, 0, 5), stream_drop = lx_rng_stream(step, 0, 0, 7);
  lx_embedding_forward(&test_ctx, a->emb, tokens, p->t[WTE], TG_B, TG_T, TG_C, TG_V);
  lx_position_embedding_forward(&test_ctx, a->pos, p->t[WPE], TG_B, TG_T, TG_C);
  lx_add_forward(&test_ctx, a->x0, a->emb, a->pos, TG_BT * TG_C);
  lx_layernorm_forward(&test_ctx, a->h1, a->x0, p->t[LN1W], p->t[LN1B], TG_BT, TG_C);
  lx_linear_forward(&test_ctx, a->qkv, a->h1, p->t[WQKV], p->t[BQKV], TG_BT, TG_C, TG_QKV);
  lx_rope_forward(&test_ctx, a->qkv_r, a->qkv, TG_B, TG_T, TG_H, TG_KVH, TG_D, TG_ROPE_BASE);
  lx_flash_attention_forward(&test_ctx, a->att, a->lse, a->qkv_r, TG_B, TG_T, TG_H, TG_KVH, TG_D, TG_DROPOUT,
                             9, stream_attn, 0, TG_H);
  lx_linear_forward(&test_ctx, a->proj, a->att, p->t[WO], p->t[BO], TG_BT, TG_H * TG_D, TG_C);
  lx_dropout_forward(&test_ctx, a->proj_d, a->proj, TG_BT * TG_C, TG_DROPOUT, 9, stream_drop);
  lx_add_forward(&test_ctx, a->x1, a->x0, a->proj_d, TG_BT * TG_C);
  lx_rmsnorm_forward(&test_ctx, a->h2, a->x1, p->t[RMSW], TG_BT, TG_C);
  lx_linear_forward(&test_ctx, a->up, a->h2, p->t[WUP], NULL, TG_BT, TG_C, 2 * TG_F);
  lx_swiglu_forward(&test_ctx, a->sw, a->up, TG_BT, TG_F);
  lx_gelu_forward(&test_ctx, a->ge, a->sw, TG_BT * TG_F);
  lx_linear_forward(&test_ctx, a->down, a->ge, p->t[WDOWN], p->t[BDOWN], TG_BT, TG_F, TG_C);
  lx_add_forward(&test_ctx, a->x2, a->x1, a->down, TG_BT * TG_C);
  lx_layernorm_forward(&test_ctx, a->hf, a->x2, p->t[LNFW], p->t[LNFB], TG_BT, TG_C);
  lx_linear_forward(&test_ctx, a->logits, a->hf, p->t[WTE], NULL, TG_BT, TG_C, TG_V); /* tied lm_head */
  return lx_cross_entropy_forward(&test_ctx, a->ce_lse, a->logits, targets, TG_BT, TG_V, TG_V);
}

/* reverse order; g holds activation gradients, dp parameter gradients */
static inline void model_backward(acts *g, params *dp, const acts *a, const params *p, const int *tokens,
                                  const int *targets, uint64_t step) {
  uint64_t stream_attn = lx_rng_stream(step, 0, 0, 5), stream_drop = lx_rng_stream(step, 0, 0, 7);
  lx_cross_entropy_backward(&test_ctx, g->logits, a->logits, a->ce_lse, targets, 1, TG_BT, TG_V, TG_V, LX_GRAD_ADD);
  lx_linear_backward(&test_ctx, g->hf, dp->t[WTE], NULL, g->logits, a->hf, p->t[WTE], TG_BT, TG_C, TG_V, LX_GRAD_ADD);
  lx_layernorm_backward(&test_ctx, g->x2, dp->t[LNFW], dp->t[LNFB], g->hf, a->x2, p->t[LNFW], TG_BT, TG_C);
  lx_add_backward(&test_ctx, g->x1, g->down, g->x2, TG_BT * TG_C, LX_GRAD_ADD, LX_GRAD_ADD);
  lx_linear_backward(&test_ctx, g->ge, dp->t[WDOWN], dp->t[BDOWN], g->down, a->ge, p->t[WDOWN], TG_BT, TG_F,
                     TG_C, LX_GRAD_ADD);
  lx_gelu_backward(&test_ctx, g->sw, g->ge, a->sw, TG_BT * TG_F, LX_GRAD_ADD);
  lx_swiglu_backward(&test_ctx, g->up, g->sw, a->up, TG_BT, TG_F, LX_GRAD_ADD);
  lx_linear_backward(&test_ctx, g->h2, dp->t[WUP], NULL, g->up, a->h2, p->t[WUP], TG_BT, TG_C, 2 * TG_F, LX_GRAD_ADD);
  lx_rmsnorm_backward(&test_ctx, g->x1, dp->t[RMSW], g->h2, a->x1, p->t[RMSW], TG_BT, TG_C);
  lx_add_backward(&test_ctx, g->x0, g->proj_d, g->x1, TG_BT * TG_C, LX_GRAD_ADD, LX_GRAD_ADD);
  lx_dropout_backward(&test_ctx, g->proj, g->proj_d, TG_BT * TG_C, TG_DROPOUT, 9, stream_drop, LX_GRAD_ADD);
  lx_linear_backward(&test_ctx, g->att, dp->t[WO], dp->t[BO], g->proj, a->att, p->t[WO], TG_BT, TG_H * TG_D,
                     TG_C, LX_GRAD_ADD);
  lx_flash_attention_backward(&test_ctx, g->qkv_r, g->att, a->qkv_r, a->att, a->lse, TG_B, TG_T, TG_H, TG_KVH,
                              TG_D, TG_DROPOUT, 9, stream_attn, 0, TG_H, LX_GRAD_ADD);
  lx_rope_backward(&test_ctx, g->qkv, g->qkv_r, TG_B, TG_T, TG_H, TG_KVH, TG_D, TG_ROPE_BASE);
  lx_linear_backward(&test_ctx, g->h1, dp->t[WQKV], dp->t[BQKV], g->qkv, a->h1, p->t[WQKV], TG_BT, TG_C,
                     TG_QKV, LX_GRAD_ADD);
  lx_layernorm_backward(&test_ctx, g->x0, dp->t[LN1W], dp->t[LN1B], g->h1, a->x0, p->t[LN1W], TG_BT, TG_C);
  lx_add_backward(&test_ctx, g->emb, g->pos, g->x0, TG_BT * TG_C, LX_GRAD_ADD, LX_GRAD_ADD);
  lx_embedding_backward(&test_ctx, dp->t[WTE], g->emb, tokens, TG_B, TG_T, TG_C, TG_V);
  lx_position_embedding_backward(&test_ctx, dp->t[WPE], g->pos, TG_B, TG_T, TG_C);
}

static inline void init_params(params *p) {
  for (int i = 0; i < N_PARAMS; i++) {
    int is_norm = i == LN1W || i == RMSW || i == LNFW,
        is_bias = i == LN1B || i == BQKV || i == BO || i == BDOWN || i == LNFB;
    if (is_norm)
      lx_init_constant(&test_ctx, p->t[i], param_sizes[i], 1);
    else if (is_bias)
      lx_init_constant(&test_ctx, p->t[i], param_sizes[i], 0);
    else
      lx_init_normal(&test_ctx, p->t[i], param_sizes[i], lx_gpt2_init_std(i == WO || i == WDOWN, 1), 1234, (uint64_t)i);
  }
}

#endif
