/* cpu_kernels_test.c — the CPU kernels of templates/cpu against finite
 * differences and against closed forms. Built with -DLX_DOUBLE: in double a
 * central difference is accurate to ~1e-10, so any backward that disagrees
 * with its forward by more than FD_TOL has a real bug.
 *
 * Each op test takes a scalar loss L = sum(out * W) with a fixed random W:
 * dL/dout = W, so the backward run with dout = W must give dL/d(every input
 * and every parameter), which central differences of L measure directly. */
#include "lx_lr_schedule.h"
#include "tiny_gpt.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the finite-difference harness ------------------------------------------ */

typedef double (*loss_fn)(void *ctx);

#define FD_STEP 1e-5
#define FD_FLOOR 1e-3 /* gradients here are O(0.01..1); below the floor, absolute error */
#define FD_TOL 1e-6

static double worst_fd_error;

/* max over elements of |analytic - numeric| / max(|analytic|, |numeric|, floor) */
static double fd_max_rel_error(loss_fn loss, void *ctx, real *x, const real *grad, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    real saved = x[i];
    x[i] = saved + FD_STEP;
    double up = loss(ctx);
    x[i] = saved - FD_STEP;
    double down = loss(ctx);
    x[i] = saved;
    double numeric = (up - down) / (2 * FD_STEP);
    double scale = fmax(fmax(fabs(numeric), fabs((double)grad[i])), FD_FLOOR);
    worst = fmax(worst, fabs(numeric - grad[i]) / scale);
  }
  return worst;
}

static void check_gradient(const char *op, const char *wrt, loss_fn loss, void *ctx, real *x,
                           const real *grad, size_t n) {
  double err = fd_max_rel_error(loss, ctx, x, grad, n);
  worst_fd_error = fmax(worst_fd_error, err);
  CHECK(err < FD_TOL, "%s: d/d(%s) matches central differences (max rel err %.1e)", op, wrt, err);
}

/* ---- embeddings --------------------------------------------------------------- */

typedef struct {
  int B, T, C, V;
  int *tokens;
  real *wte, *wpe, *out, *w;
} embed_case;

static double embedding_loss(void *p) {
  embed_case *c = p;
  lx_embedding_forward(&test_ctx, c->out, c->tokens, c->wte, c->B, c->T, c->C, c->V);
  return weighted_sum(c->out, c->w, (size_t)c->B * c->T * c->C);
}

static double position_embedding_loss(void *p) {
  embed_case *c = p;
  lx_position_embedding_forward(&test_ctx, c->out, c->wpe, c->B, c->T, c->C);
  return weighted_sum(c->out, c->w, (size_t)c->B * c->T * c->C);
}

/* A backward's input gradient under LX_GRAD_WRITE over NaNs (`written`)
 * against the same kernel adding to zeros (`added`): the same bits. */
static void check_written(const char *name, real *written, const real *added, size_t n) {
  CHECK(!memcmp(written, added, n * sizeof(real)),
        "%s backward with LX_GRAD_WRITE over NaNs equals it added to zeros, bit for bit", name);
  free(written);
}

static void test_embeddings(void) {
  /* V < B * T: tokens repeat, so the scatter-add must add, not assign */
  embed_case c = {.B = 3, .T = 4, .C = 5, .V = 6};
  size_t n = (size_t)c.B * c.T * c.C;
  c.tokens = random_tokens((size_t)c.B * c.T, c.V);
  c.wte = random_tensor((size_t)c.V * c.C, 1);
  c.wpe = random_tensor((size_t)c.T * c.C, 1);
  c.out = zero_tensor(n);
  c.w = random_tensor(n, 1);
  real *dwte = zero_tensor((size_t)c.V * c.C), *dwpe = zero_tensor((size_t)c.T * c.C);
  lx_embedding_backward(&test_ctx, dwte, c.w, c.tokens, c.B, c.T, c.C, c.V);
  lx_position_embedding_backward(&test_ctx, dwpe, c.w, c.B, c.T, c.C);
  check_gradient("embedding", "wte", embedding_loss, &c, c.wte, dwte, (size_t)c.V * c.C);
  check_gradient("position_embedding", "wpe", position_embedding_loss, &c, c.wpe, dwpe, (size_t)c.T * c.C);
  free(c.tokens), free(c.wte), free(c.wpe), free(c.out), free(c.w), free(dwte), free(dwpe);
}

/* ---- norms -------------------------------------------------------------------- */

typedef struct {
  int BT, C;
  real *inp, *weight, *bias, *out, *w;
} norm_case;

static double layernorm_loss(void *p) {
  norm_case *c = p;
  lx_layernorm_forward(&test_ctx, c->out, c->inp, c->weight, c->bias, c->BT, c->C);
  return weighted_sum(c->out, c->w, (size_t)c->BT * c->C);
}

static double rmsnorm_loss(void *p) {
  norm_case *c = p;
  lx_rmsnorm_forward(&test_ctx, c->out, c->inp, c->weight, c->BT, c->C);
  return weighted_sum(c->out, c->w, (size_t)c->BT * c->C);
}

static norm_case make_norm_case(int BT, int C) {
  size_t n = (size_t)BT * C;
  return (norm_case){BT,
                     C,
                     random_tensor(n, 2),
                     random_tensor((size_t)C, 1.5),
                     random_tensor((size_t)C, 1),
                     zero_tensor(n),
                     random_tensor(n, 1)};
}

static void free_norm_case(norm_case *c) {
  free(c->inp), free(c->weight), free(c->bias), free(c->out), free(c->w);
}

static void test_layernorm(void) {
  norm_case c = make_norm_case(6, 7);
  size_t n = (size_t)c.BT * c.C;
  real *dinp = zero_tensor(n), *dweight = zero_tensor((size_t)c.C), *dbias = zero_tensor((size_t)c.C);
  lx_layernorm_backward(&test_ctx, dinp, dweight, dbias, c.w, c.inp, c.weight, c.BT, c.C);
  check_gradient("layernorm", "input", layernorm_loss, &c, c.inp, dinp, n);
  check_gradient("layernorm", "weight", layernorm_loss, &c, c.weight, dweight, (size_t)c.C);
  check_gradient("layernorm", "bias", layernorm_loss, &c, c.bias, dbias, (size_t)c.C);
  real *frozen = zero_tensor(n); /* fine-tuning: scale and shift frozen, no gradients for them */
  lx_layernorm_backward(&test_ctx, frozen, NULL, NULL, c.w, c.inp, c.weight, c.BT, c.C);
  CHECK(!memcmp(frozen, dinp, n * sizeof(real)),
        "layernorm backward with frozen parameters: the same input gradient");
  free(frozen);

  /* a backward adds into its gradients: a second call doubles them */
  real *again = copy_tensor(dinp, n);
  real *dweight2 = copy_tensor(dweight, (size_t)c.C), *dbias2 = copy_tensor(dbias, (size_t)c.C);
  lx_layernorm_backward(&test_ctx, again, dweight2, dbias2, c.w, c.inp, c.weight, c.BT, c.C);
  lx_scale(&test_ctx, dinp, n, 2);
  CHECK(max_abs_diff(again, dinp, n) < 1e-14, "layernorm backward accumulates (+=) into its gradients");

  /* with unit scale and zero bias every row comes out with mean 0, variance ~1 */
  lx_init_constant(&test_ctx, c.weight, (size_t)c.C, 1);
  lx_init_constant(&test_ctx, c.bias, (size_t)c.C, 0);
  lx_layernorm_forward(&test_ctx, c.out, c.inp, c.weight, c.bias, c.BT, c.C);
  double mean = 0, var = 0;
  for (int i = 0; i < c.C; i++)
    mean += c.out[i];
  mean /= c.C;
  for (int i = 0; i < c.C; i++)
    var += (c.out[i] - mean) * (c.out[i] - mean);
  var /= c.C;
  CHECK(fabs(mean) < 1e-12 && fabs(var - 1) < 1e-3, "layernorm row has mean 0 (%.1e) and variance 1 (%.6f)",
        mean, var);
  free_norm_case(&c), free(dinp), free(dweight), free(dbias), free(again), free(dweight2), free(dbias2);
}

static void test_rmsnorm(void) {
  norm_case c = make_norm_case(5, 8);
  size_t n = (size_t)c.BT * c.C;
  real *dinp = zero_tensor(n), *dweight = zero_tensor((size_t)c.C);
  lx_rmsnorm_backward(&test_ctx, dinp, dweight, c.w, c.inp, c.weight, c.BT, c.C);
  check_gradient("rmsnorm", "input", rmsnorm_loss, &c, c.inp, dinp, n);
  check_gradient("rmsnorm", "weight", rmsnorm_loss, &c, c.weight, dweight, (size_t)c.C);
  real *frozen = zero_tensor(n);
  lx_rmsnorm_backward(&test_ctx, frozen, NULL, c.w, c.inp, c.weight, c.BT, c.C);
  CHECK(!memcmp(frozen, dinp, n * sizeof(real)),
        "rmsnorm backward with a frozen scale: the same input gradient");
  free_norm_case(&c), free(dinp), free(dweight), free(frozen);
}

/* ---- linear ------------------------------------------------------------------- */

typedef struct {
  int BT, C, OC;
  real *inp, *weight, *bias, *out, *w; /* bias NULL: linear_nobias */
} linear_case;

static double linear_loss(void *p) {
  linear_case *c = p;
  lx_linear_forward(&test_ctx, c->out, c->inp, c->weight, c->bias, c->BT, c->C, c->OC);
  return weighted_sum(c->out, c->w, (size_t)c->BT * c->OC);
}

static void test_linear_forward_against_loops(linear_case *c) {
  lx_linear_forward(&test_ctx, c->out, c->inp, c->weight, c->bias, c->BT, c->C, c->OC);
  double worst = 0;
  for (int r = 0; r < c->BT; r++)
    for (int o = 0; o < c->OC; o++) {
      double s = c->bias ? c->bias[o] : 0;
      for (int i = 0; i < c->C; i++)
        s += c->inp[r * c->C + i] * c->weight[o * c->C + i];
      worst = fmax(worst, fabs(s - c->out[r * c->OC + o]));
    }
  CHECK(worst < 1e-12, "linear%s forward equals x W^T + b by loops (max err %.1e)", c->bias ? "" : "_nobias",
        worst);
}

static void test_linear(int with_bias) {
  linear_case c = {.BT = 6, .C = 5, .OC = 7};
  c.inp = random_tensor((size_t)c.BT * c.C, 1);
  c.weight = random_tensor((size_t)c.OC * c.C, 1);
  c.bias = with_bias ? random_tensor((size_t)c.OC, 1) : NULL;
  c.out = zero_tensor((size_t)c.BT * c.OC);
  c.w = random_tensor((size_t)c.BT * c.OC, 1);
  test_linear_forward_against_loops(&c);
  real *dinp = zero_tensor((size_t)c.BT * c.C), *dweight = zero_tensor((size_t)c.OC * c.C);
  real *dbias = with_bias ? zero_tensor((size_t)c.OC) : NULL;
  lx_linear_backward(&test_ctx, dinp, dweight, dbias, c.w, c.inp, c.weight, c.BT, c.C, c.OC, LX_GRAD_ADD);
  const char *name = with_bias ? "linear" : "linear_nobias";
  check_gradient(name, "input", linear_loss, &c, c.inp, dinp, (size_t)c.BT * c.C);
  check_gradient(name, "weight", linear_loss, &c, c.weight, dweight, (size_t)c.OC * c.C);
  if (with_bias) check_gradient(name, "bias", linear_loss, &c, c.bias, dbias, (size_t)c.OC);
  real *written = nan_tensor((size_t)c.BT * c.C);
  lx_linear_backward(&test_ctx, written, NULL, NULL, c.w, c.inp, c.weight, c.BT, c.C, c.OC, LX_GRAD_WRITE);
  check_written(name, written, dinp, (size_t)c.BT * c.C);
  free(c.inp), free(c.weight), free(c.bias), free(c.out), free(c.w), free(dinp), free(dweight), free(dbias);
}

/* ---- LoRA ------------------------------------------------------------------------ */

typedef struct {
  int BT, C, OC, R;
  real scale;
  double p; /* LoRA's dropout of the adapter's input */
  long long col0, c_whole;
  real *inp, *weight, *bias, *a, *b, *out, *down, *w;
} lora_case;

enum { LORA_SEED = 5, LORA_STREAM = 17 };

static double lora_loss(void *p) {
  lora_case *c = p;
  lx_lora_linear_forward(&test_ctx, c->out, c->down, c->inp, c->weight, c->bias, c->a, c->b, c->BT, c->C,
                         c->OC, c->R, c->scale, c->p, LORA_SEED, LORA_STREAM, c->col0, c->c_whole);
  return weighted_sum(c->out, c->w, (size_t)c->BT * c->OC);
}

/* Whether the adapter keeps element (r, i) of its input. */
static int lora_kept(const lora_case *c, int r, int i) {
  return lx_dropout_keep(LORA_SEED, LORA_STREAM, (uint64_t)(r * c->c_whole + c->col0 + i),
                         lx_dropout_threshold(c->p));
}

/* out = x W^T + b + scale (d(x) A^T) B^T, written here with loops (d: the dropout). */
static void test_lora_forward_against_loops(lora_case *c) {
  lora_loss(c);
  double worst = 0;
  for (int r = 0; r < c->BT; r++)
    for (int o = 0; o < c->OC; o++) {
      double s = c->bias[o];
      for (int i = 0; i < c->C; i++)
        s += c->inp[r * c->C + i] * c->weight[o * c->C + i];
      for (int k = 0; k < c->R; k++) {
        double u = 0;
        for (int i = 0; i < c->C; i++)
          u += lora_kept(c, r, i) ? c->inp[r * c->C + i] / (1 - c->p) * c->a[k * c->C + i] : 0;
        s += c->scale * u * c->b[o * c->R + k];
      }
      worst = fmax(worst, fabs(s - c->out[r * c->OC + o]));
    }
  int dropped = 0;
  for (int r = 0; r < c->BT; r++)
    for (int i = 0; i < c->C; i++)
      dropped += !lora_kept(c, r, i);
  CHECK(
      worst < 1e-12 && (c->p == 0) == (dropped == 0),
      "lora_linear forward (dropout %g: %d of %d inputs dropped) equals x W^T + b + scale (d(x) A^T) B^T by "
      "loops (max err %.1e)",
      c->p, dropped, c->BT * c->C, worst);
}

/* Every gradient of the adapted linear against central differences, with a
 * B that is not zero (training starts from B = 0, where dA vanishes); then
 * fine-tuning's calls: W and the bias frozen, and LoRA-FA's, A frozen and no
 * input kept, which must give the same input and B gradients. */
static void test_lora_linear(double p, long long col0, long long c_whole) {
  lora_case c = {
      .BT = 6, .C = 5, .OC = 7, .R = 3, .scale = 8.0 / 3, .p = p, .col0 = col0, .c_whole = c_whole};
  c.inp = random_tensor((size_t)c.BT * c.C, 1);
  c.weight = random_tensor((size_t)c.OC * c.C, 1);
  c.bias = random_tensor((size_t)c.OC, 1);
  c.a = random_tensor((size_t)c.R * c.C, 1);
  c.b = random_tensor((size_t)c.OC * c.R, 1);
  c.out = zero_tensor((size_t)c.BT * c.OC);
  c.down = zero_tensor((size_t)c.BT * c.R);
  c.w = random_tensor((size_t)c.BT * c.OC, 1);
  test_lora_forward_against_loops(&c);
  size_t n_in = (size_t)c.BT * c.C, n_a = (size_t)c.R * c.C, n_b = (size_t)c.OC * c.R;
  real *dinp = zero_tensor(n_in), *dweight = zero_tensor((size_t)c.OC * c.C),
       *dbias = zero_tensor((size_t)c.OC);
  real *da = zero_tensor(n_a), *db = zero_tensor(n_b);
  lx_lora_linear_backward(&test_ctx, dinp, dweight, dbias, da, db, c.w, c.inp, c.down, c.weight, c.a, c.b,
                          c.BT, c.C, c.OC, c.R, c.scale, c.p, LORA_SEED, LORA_STREAM, c.col0, c.c_whole,
                          LX_GRAD_ADD);
  char name[96];
  snprintf(name, sizeof name, "lora_linear (dropout %g, columns %lld.. of %lld)", p, col0, c_whole);
  check_gradient(name, "input", lora_loss, &c, c.inp, dinp, n_in);
  check_gradient(name, "weight", lora_loss, &c, c.weight, dweight, (size_t)c.OC * c.C);
  check_gradient(name, "bias", lora_loss, &c, c.bias, dbias, (size_t)c.OC);
  check_gradient(name, "A", lora_loss, &c, c.a, da, n_a);
  check_gradient(name, "B", lora_loss, &c, c.b, db, n_b);
  lora_loss(&c); /* down as the forward leaves it, for the calls below */
  real *written = nan_tensor(n_in), *fa_db = zero_tensor(n_b), *frozen_da = zero_tensor(n_a);
  lx_lora_linear_backward(&test_ctx, written, NULL, NULL, frozen_da, NULL, c.w, c.inp, c.down, c.weight, c.a,
                          c.b, c.BT, c.C, c.OC, c.R, c.scale, c.p, LORA_SEED, LORA_STREAM, c.col0, c.c_whole,
                          LX_GRAD_WRITE);
  check_written("lora_linear (W frozen)", written, dinp, n_in);
  CHECK(!memcmp(frozen_da, da, n_a * sizeof(real)),
        "lora_linear with W frozen: A's gradient is the same, bit for bit");
  real *fa_written = nan_tensor(n_in);
  lx_lora_linear_backward(&test_ctx, fa_written, NULL, NULL, NULL, fa_db, c.w, NULL, c.down, c.weight, c.a,
                          c.b, c.BT, c.C, c.OC, c.R, c.scale, c.p, LORA_SEED, LORA_STREAM, c.col0, c.c_whole,
                          LX_GRAD_WRITE);
  check_written("lora_linear (LoRA-FA, no input kept)", fa_written, dinp, n_in);
  CHECK(!memcmp(fa_db, db, n_b * sizeof(real)),
        "lora_linear under LoRA-FA: B's gradient is the same, bit for bit");
  free(c.inp), free(c.weight), free(c.bias), free(c.a), free(c.b), free(c.out), free(c.down), free(c.w);
  free(dinp), free(dweight), free(dbias), free(da), free(db), free(fa_db), free(frozen_da);
}

/* ---- attention ---------------------------------------------------------------- */

typedef struct {
  int B, T, H, KVH, D, flash;
  double p;
  uint64_t seed, stream;
  real *qkv, *out, *probs, *lse, *w;
} attn_case;

static size_t attn_qkv_size(const attn_case *c) { return (size_t)c->B * c->T * (c->H + 2 * c->KVH) * c->D; }
static size_t attn_out_size(const attn_case *c) { return (size_t)c->B * c->T * c->H * c->D; }

static attn_case make_attn_case(int H, int KVH, double p, int flash) {
  attn_case c = {.B = 2, .T = 5, .H = H, .KVH = KVH, .D = 4, .flash = flash, .p = p, .seed = 7, .stream = 99};
  size_t scores = (size_t)c.B * c.H * c.T * c.T;
  c.qkv = random_tensor(attn_qkv_size(&c), 1.5);
  c.out = zero_tensor(attn_out_size(&c));
  c.probs = zero_tensor(scores);
  c.lse = zero_tensor((size_t)c.B * c.H * c.T);
  c.w = random_tensor(attn_out_size(&c), 1);
  return c;
}

static void free_attn_case(attn_case *c) {
  free(c->qkv), free(c->out), free(c->probs), free(c->lse), free(c->w);
}

static void attn_forward(attn_case *c) {
  if (c->flash)
    lx_flash_attention_forward(&test_ctx, c->out, c->lse, c->qkv, c->B, c->T, c->H, c->KVH, c->D, c->p,
                               c->seed, c->stream, 0, c->H);
  else
    lx_attention_forward(&test_ctx, c->out, c->probs, c->qkv, c->B, c->T, c->H, c->KVH, c->D, c->p, c->seed,
                         c->stream, 0, c->H);
}

/* forward then backward with dout = w, from the current qkv */
static void attn_backward(attn_case *c, real *dqkv) {
  attn_forward(c);
  if (c->flash)
    lx_flash_attention_backward(&test_ctx, dqkv, c->w, c->qkv, c->out, c->lse, c->B, c->T, c->H, c->KVH, c->D,
                                c->p, c->seed, c->stream, 0, c->H, LX_GRAD_ADD);
  else
    lx_attention_backward(&test_ctx, dqkv, c->w, c->qkv, c->probs, c->B, c->T, c->H, c->KVH, c->D, c->p,
                          c->seed, c->stream, 0, c->H);
}

static double attention_loss(void *p) {
  attn_case *c = p;
  attn_forward(c);
  return weighted_sum(c->out, c->w, attn_out_size(c));
}

static void test_attention_gradient(int flash, double p) {
  attn_case c = make_attn_case(4, 2, p, flash);
  real *dqkv = zero_tensor(attn_qkv_size(&c));
  attn_backward(&c, dqkv);
  char name[64];
  snprintf(name, sizeof name, "%s (H 4, KVH 2, p %.1f)", flash ? "flash_attention" : "attention", p);
  check_gradient(name, "qkv", attention_loss, &c, c.qkv, dqkv, attn_qkv_size(&c));
  if (flash) {
    real *written = nan_tensor(attn_qkv_size(&c));
    attn_forward(&c); /* the saved out and lse of the unperturbed qkv again */
    lx_flash_attention_backward(&test_ctx, written, c.w, c.qkv, c.out, c.lse, c.B, c.T, c.H, c.KVH, c.D, c.p,
                                c.seed, c.stream, 0, c.H, LX_GRAD_WRITE);
    check_written(name, written, dqkv, attn_qkv_size(&c));
  }
  free_attn_case(&c), free(dqkv);
}

/* Tensor parallelism: rank r of 2 holds query heads [r H/2, (r+1) H/2) and
 * their kv heads, and numbers them as the whole model does (head_base): its
 * output is its columns of the whole output, dropout included. */
static void test_attention_split_over_ranks(int flash) {
  attn_case whole = make_attn_case(4, 2, 0.3, flash);
  attn_forward(&whole);
  const int ranks = 2, H = whole.H / ranks, KVH = whole.KVH / ranks, D = whole.D, width = (H + 2 * KVH) * D;
  double worst = 0;
  for (int r = 0; r < ranks; r++) {
    attn_case part = make_attn_case(H, KVH, whole.p, flash);
    for (int row = 0; row < whole.B * whole.T; row++) {
      const real *src = whole.qkv + (size_t)row * (whole.H + 2 * whole.KVH) * D;
      real *dst = part.qkv + (size_t)row * width;
      memcpy(dst, src + (size_t)r * H * D, sizeof(real) * H * D);                         /* q */
      memcpy(dst + H * D, src + (size_t)(whole.H + r * KVH) * D, sizeof(real) * KVH * D); /* k */
      memcpy(dst + (H + KVH) * D, src + (size_t)(whole.H + whole.KVH + r * KVH) * D, sizeof(real) * KVH * D);
    }
    if (flash)
      lx_flash_attention_forward(&test_ctx, part.out, part.lse, part.qkv, part.B, part.T, H, KVH, D, part.p,
                                 whole.seed, whole.stream, r * H, whole.H);
    else
      lx_attention_forward(&test_ctx, part.out, part.probs, part.qkv, part.B, part.T, H, KVH, D, part.p,
                           whole.seed, whole.stream, r * H, whole.H);
    for (int row = 0; row < whole.B * whole.T; row++)
      for (int c = 0; c < H * D; c++)
        worst = fmax(worst, fabs(part.out[(size_t)row * H * D + c] -
                                 whole.out[(size_t)row * whole.H * D + (size_t)r * H * D + c]));
    free_attn_case(&part);
  }
  CHECK(worst == 0,
        "%s split over 2 tensor-parallel ranks by heads: each rank's output is exactly its columns of "
        "the whole output, dropout masks included (max difference %.1e)",
        flash ? "flash_attention" : "attention", worst);
  free_attn_case(&whole);
}

/* Whether x (B, outer, H, inner) holds want's bits in the query heads of kv
 * heads [first, end) and NaN (never written) in every other head's. */
static int attn_piece_written(const attn_case *c, const real *x, const real *want, int first, int end,
                              size_t outer, size_t inner) {
  int ok = 1, group = c->H / c->KVH;
  for (size_t a = 0; a < (size_t)c->B * outer; a++)
    for (int h = 0; h < c->H; h++) {
      int mine = first <= h / group && h / group < end;
      for (size_t e = (a * c->H + h) * inner; e < (a * c->H + h + 1) * inner; e++)
        ok &= mine ? !memcmp(x + e, want + e, sizeof(real)) : isnan(x[e]);
    }
  return ok;
}

/* A recomputation cut by kv heads: lx_attention_forward_heads over `pieces`
 * ranges of kv heads, one after another, writes what lx_attention_forward
 * writes, bit for bit (dropout included); one piece alone leaves the other
 * heads' elements as they were. */
static void test_attention_heads(int H, int KVH, int pieces) {
  attn_case whole = make_attn_case(H, KVH, 0.3, 0), cut = make_attn_case(H, KVH, 0.3, 0);
  memcpy(cut.qkv, whole.qkv, attn_qkv_size(&whole) * sizeof(real));
  attn_forward(&whole);
  size_t out_n = attn_out_size(&whole), scores = (size_t)whole.B * H * whole.T * whole.T;
  real *out = nan_tensor(out_n), *probs = nan_tensor(scores);
  for (int q = 0; q < pieces; q++)
    lx_attention_forward_heads(&test_ctx, out, probs, cut.qkv, cut.B, cut.T, H, KVH, cut.D, cut.p, whole.seed,
                               whole.stream, 0, H, q * KVH / pieces, (q + 1) * KVH / pieces);
  CHECK(
      !memcmp(out, whole.out, out_n * sizeof(real)) && !memcmp(probs, whole.probs, scores * sizeof(real)),
      "attention_forward_heads (H %d, KVH %d) in %d pieces of kv heads, one after another: out and probs of "
      "the whole attention_forward, bit for bit",
      H, KVH, pieces);

  int first = KVH / pieces, end = 2 * KVH / pieces; /* piece 1 */
  real *alone_out = nan_tensor(out_n), *alone_probs = nan_tensor(scores);
  lx_attention_forward_heads(&test_ctx, alone_out, alone_probs, cut.qkv, cut.B, cut.T, H, KVH, cut.D, cut.p,
                             whole.seed, whole.stream, 0, H, first, end);
  CHECK(attn_piece_written(&cut, alone_out, whole.out, first, end, (size_t)cut.T, (size_t)cut.D) &&
            attn_piece_written(&cut, alone_probs, whole.probs, first, end, 1, (size_t)cut.T * cut.T),
        "attention_forward_heads (H %d, KVH %d) of kv heads [%d, %d) alone writes its query heads' elements "
        "and no other",
        H, KVH, first, end);
  free(out), free(probs), free(alone_out), free(alone_probs);
  free_attn_case(&whole), free_attn_case(&cut);
}

/* A recompute that keeps the attention's output: lx_attention_forward with
 * no output writes the probabilities the whole forward writes, bit for bit
 * (dropout included), and of a piece of kv heads those of its query heads
 * alone. */
static void test_attention_probs_alone(int H, int KVH) {
  attn_case whole = make_attn_case(H, KVH, 0.3, 0);
  attn_forward(&whole);
  size_t scores = (size_t)whole.B * H * whole.T * whole.T;
  real *probs = nan_tensor(scores), *piece = nan_tensor(scores);
  lx_attention_forward(&test_ctx, NULL, probs, whole.qkv, whole.B, whole.T, H, KVH, whole.D, whole.p,
                       whole.seed, whole.stream, 0, H);
  int first = KVH / 2, end = KVH;
  lx_attention_forward_heads(&test_ctx, NULL, piece, whole.qkv, whole.B, whole.T, H, KVH, whole.D, whole.p,
                             whole.seed, whole.stream, 0, H, first, end);
  CHECK(!memcmp(probs, whole.probs, scores * sizeof(real)) &&
            attn_piece_written(&whole, piece, whole.probs, first, end, 1, (size_t)whole.T * whole.T),
        "attention_forward without its output (H %d, KVH %d, p 0.3): the whole forward's probs bit for bit, "
        "and of kv heads [%d, %d) their query heads' alone",
        H, KVH, first, end);
  free(probs), free(piece);
  free_attn_case(&whole);
}

/* The two implementations compute one function: same output, same gradients. */
static void test_attention_forms_agree(int H, int KVH, double p) {
  attn_case m = make_attn_case(H, KVH, p, 0), f = make_attn_case(H, KVH, p, 1);
  memcpy(f.qkv, m.qkv, attn_qkv_size(&m) * sizeof(real));
  memcpy(f.w, m.w, attn_out_size(&m) * sizeof(real));
  real *dm = zero_tensor(attn_qkv_size(&m)), *df = zero_tensor(attn_qkv_size(&m));
  attn_backward(&m, dm);
  attn_backward(&f, df);
  double out_err = max_abs_diff(m.out, f.out, attn_out_size(&m)) / max_abs(m.out, attn_out_size(&m));
  double grad_err = max_abs_diff(dm, df, attn_qkv_size(&m)) / max_abs(dm, attn_qkv_size(&m));
  CHECK(out_err < 1e-13, "attention and flash_attention outputs agree (H %d, KVH %d, p %.1f; rel err %.1e)",
        H, KVH, p, out_err);
  CHECK(grad_err < 1e-13,
        "attention and flash_attention gradients agree (H %d, KVH %d, p %.1f; rel err %.1e)", H, KVH, p,
        grad_err);
  /* the log-sum-exp the flash form keeps reproduces the materialized probabilities */
  double lse_err = 0;
  real scale = (real)(1.0 / sqrt((double)m.D));
  for (int b = 0; b < m.B; b++)
    for (int h = 0; h < m.H; h++)
      for (int i = 0; i < m.T; i++) {
        const real *q = m.qkv + ((size_t)b * m.T + i) * (m.H + 2 * m.KVH) * m.D + (size_t)h * m.D;
        const real *k0 =
            m.qkv + (size_t)b * m.T * (m.H + 2 * m.KVH) * m.D + (size_t)(m.H + h / (H / KVH)) * m.D;
        double s0 = scale * lx_dot(q, k0, m.D);
        double p0 = exp(s0 - f.lse[((size_t)b * m.H + h) * m.T + i]);
        lse_err = fmax(lse_err, fabs(p0 - m.probs[(((size_t)b * m.H + h) * m.T + i) * m.T]));
      }
  CHECK(lse_err < 1e-14, "flash log-sum-exp reproduces the softmax probabilities (H %d, KVH %d; err %.1e)", H,
        KVH, lse_err);
  free_attn_case(&m), free_attn_case(&f), free(dm), free(df);
}

/* Changing tokens after position t must leave outputs at 0..t bit for bit. */
static void test_attention_causal(int flash) {
  attn_case c = make_attn_case(4, 2, 0.2, flash);
  attn_forward(&c);
  real *before = copy_tensor(c.out, attn_out_size(&c));
  size_t row = (size_t)(c.H + 2 * c.KVH) * c.D, out_row = (size_t)c.H * c.D;
  for (int b = 0; b < c.B; b++)
    for (int t = 1; t < c.T; t++)
      for (size_t e = 0; e < row; e++)
        c.qkv[((size_t)b * c.T + t) * row + e] += 10;
  attn_forward(&c);
  int same = 1;
  for (int b = 0; b < c.B; b++)
    same &= !memcmp(before + b * c.T * out_row, c.out + b * c.T * out_row, out_row * sizeof(real));
  CHECK(same, "%s at position 0 ignores later tokens (bitwise)", flash ? "flash_attention" : "attention");

  /* with p = 0, position 0 attends only to itself: its output is its kv head's v */
  attn_case z = make_attn_case(4, 2, 0, flash);
  attn_forward(&z);
  int is_v = 1;
  for (int b = 0; b < z.B; b++)
    for (int h = 0; h < z.H; h++) {
      const real *v = z.qkv + (size_t)b * z.T * row + (size_t)(z.H + z.KVH + h / 2) * z.D;
      const real *o = z.out + (size_t)b * z.T * out_row + (size_t)h * z.D;
      for (int d = 0; d < z.D; d++)
        is_v &= fabs(o[d] - v[d]) < 1e-15;
    }
  CHECK(is_v, "%s at position 0 outputs v of kv head h / (H / KVH)", flash ? "flash_attention" : "attention");
  free(before), free_attn_case(&c), free_attn_case(&z);
}

/* The mask is a function of (seed, stream, index): drawn again, the same
 * output; another stream, another mask. */
static void test_attention_dropout_regenerates(void) {
  attn_case c = make_attn_case(4, 2, 0.3, 0);
  size_t scores = (size_t)c.B * c.H * c.T * c.T;
  attn_forward(&c);
  real *probs = copy_tensor(c.probs, scores), *out = copy_tensor(c.out, attn_out_size(&c));
  attn_forward(&c);
  int same =
      !memcmp(probs, c.probs, scores * sizeof(real)) && !memcmp(out, c.out, attn_out_size(&c) * sizeof(real));
  c.stream++;
  attn_forward(&c);
  int other = memcmp(out, c.out, attn_out_size(&c) * sizeof(real)) != 0;
  CHECK(same && other,
        "attention recomputed with the same (seed, stream) regenerates probs and output bit for bit, and "
        "another stream drops other weights");
  free(probs), free(out), free_attn_case(&c);
}

/* ---- rope --------------------------------------------------------------------- */

typedef struct {
  int B, T, H, KVH, D;
  real *inp, *out, *w;
} rope_case;

#define ROPE_BASE 10.0 /* a small base turns every pair visibly within T = 6 */

static size_t rope_size(const rope_case *c) { return (size_t)c->B * c->T * (c->H + 2 * c->KVH) * c->D; }

static double rope_loss(void *p) {
  rope_case *c = p;
  lx_rope_forward(&test_ctx, c->out, c->inp, c->B, c->T, c->H, c->KVH, c->D, ROPE_BASE);
  return weighted_sum(c->out, c->w, rope_size(c));
}

static void test_rope(void) {
  rope_case c = {.B = 2, .T = 6, .H = 2, .KVH = 1, .D = 6};
  size_t n = rope_size(&c), row = n / ((size_t)c.B * c.T);
  c.inp = random_tensor(n, 1), c.out = zero_tensor(n), c.w = random_tensor(n, 1);
  real *dinp = zero_tensor(n);
  lx_rope_backward(&test_ctx, dinp, c.w, c.B, c.T, c.H, c.KVH, c.D, ROPE_BASE);
  check_gradient("rope", "qkv", rope_loss, &c, c.inp, dinp, n);

  lx_rope_forward(&test_ctx, c.out, c.inp, c.B, c.T, c.H, c.KVH, c.D, ROPE_BASE);
  CHECK(!memcmp(c.out, c.inp, row * sizeof(real)), "rope leaves position 0 unchanged");
  size_t v_start = (size_t)(c.H + c.KVH) * c.D;
  int v_same = 1;
  for (size_t r = 0; r < (size_t)c.B * c.T; r++)
    v_same &= !memcmp(c.out + r * row + v_start, c.inp + r * row + v_start, (row - v_start) * sizeof(real));
  CHECK(v_same, "rope passes v through unchanged");
  double pair_err = 0;
  for (size_t e = 0; e < n; e += 2)
    pair_err = fmax(pair_err, fabs(hypot(c.out[e], c.out[e + 1]) - hypot(c.inp[e], c.inp[e + 1])));
  CHECK(pair_err < 1e-14, "rope rotates pairs: their lengths are kept (err %.1e)", pair_err);
  real *back = zero_tensor(n);
  lx_rope_backward(&test_ctx, back, c.out, c.B, c.T, c.H, c.KVH, c.D, ROPE_BASE);
  CHECK(max_abs_diff(back, c.inp, n) < 1e-14,
        "rope backward is the inverse rotation: it maps the output back");
  /* position 1, pair 0 turns by exactly 1 radian */
  double x0 = c.inp[row], x1 = c.inp[row + 1];
  CHECK(fabs(c.out[row] - (x0 * cos(1.0) - x1 * sin(1.0))) < 1e-15 &&
            fabs(c.out[row + 1] - (x0 * sin(1.0) + x1 * cos(1.0))) < 1e-15,
        "rope turns pair 0 at position 1 by 1 radian");
  free(c.inp), free(c.out), free(c.w), free(dinp), free(back);
}

/* ---- elementwise -------------------------------------------------------------- */

typedef struct {
  size_t n;
  int BT, F;
  double p;
  real *a, *b, *out, *w;
} elementwise_case;

static double swiglu_loss(void *p) {
  elementwise_case *c = p;
  lx_swiglu_forward(&test_ctx, c->out, c->a, c->BT, c->F);
  return weighted_sum(c->out, c->w, (size_t)c->BT * c->F);
}

static double add_loss(void *p) {
  elementwise_case *c = p;
  lx_add_forward(&test_ctx, c->out, c->a, c->b, c->n);
  return weighted_sum(c->out, c->w, c->n);
}

static double dropout_loss(void *p) {
  elementwise_case *c = p;
  lx_dropout_forward(&test_ctx, c->out, c->a, c->n, c->p, 5, 6);
  return weighted_sum(c->out, c->w, c->n);
}

static elementwise_case make_elementwise_case(size_t n) {
  return (elementwise_case){.n = n,
                            .a = random_tensor(n, 3),
                            .b = random_tensor(n, 1),
                            .out = zero_tensor(n),
                            .w = random_tensor(n, 1)};
}

static void free_elementwise_case(elementwise_case *c) { free(c->a), free(c->b), free(c->out), free(c->w); }

/* An element-wise map y = f(x): its backward against finite differences of
 * its forward, and f(1) against its closed form. */
typedef struct {
  const char *name;
  void (*forward)(const lx_ctx *, real *, const real *, size_t);
  void (*backward)(const lx_ctx *, real *, const real *, const real *, size_t, lx_grad_mode);
  double at_one; /* f(1) */
  const char *formula;
} map_op;

static const map_op *current_map;

static double map_loss(void *p) {
  elementwise_case *c = p;
  current_map->forward(&test_ctx, c->out, c->a, c->n);
  return weighted_sum(c->out, c->w, c->n);
}

static void test_map(const map_op *m) {
  elementwise_case c = make_elementwise_case(40);
  real *da = zero_tensor(c.n);
  current_map = m;
  m->backward(&test_ctx, da, c.w, c.a, c.n, LX_GRAD_ADD);
  check_gradient(m->name, "input", map_loss, &c, c.a, da, c.n);
  real *written = nan_tensor(c.n);
  m->backward(&test_ctx, written, c.w, c.a, c.n, LX_GRAD_WRITE);
  check_written(m->name, written, da, c.n);
  real x = 1, y;
  m->forward(&test_ctx, &y, &x, 1);
  CHECK_CLOSE(y, m->at_one, 1e-15, "%s(1) is %s", m->name, m->formula);
  free_elementwise_case(&c), free(da);
}

static void test_maps(void) {
  static const map_op maps[] = {
      /* 0.5 (1 + tanh(sqrt(2/pi) (1 + 0.044715))) */
      {"gelu", lx_gelu_forward, lx_gelu_backward, 0.84119199060827680,
       "the tanh approximation's 0.8411919906"},
      {"silu", lx_silu_forward, lx_silu_backward, 0.73105857863000490, "1 / (1 + e^-1) = 0.7310585786"},
  };
  for (size_t k = 0; k < sizeof maps / sizeof maps[0]; k++)
    test_map(&maps[k]);
}

static void test_swiglu(void) {
  elementwise_case c = make_elementwise_case(2 * 3 * 5);
  c.BT = 3, c.F = 5;
  real *da = zero_tensor(c.n);
  lx_swiglu_backward(&test_ctx, da, c.w, c.a, c.BT, c.F, LX_GRAD_ADD);
  check_gradient("swiglu", "input", swiglu_loss, &c, c.a, da, c.n);
  real *written = nan_tensor(c.n);
  lx_swiglu_backward(&test_ctx, written, c.w, c.a, c.BT, c.F, LX_GRAD_WRITE);
  check_written("swiglu", written, da, c.n);
  real in[2] = {1, 2}, out;
  lx_swiglu_forward(&test_ctx, &out, in, 1, 1);
  CHECK_CLOSE(out, 2 / (1 + exp(-1.0)), 1e-15, "swiglu(gate 1, up 2) = silu(1) * 2");
  free_elementwise_case(&c), free(da);
}

static void test_add(void) {
  elementwise_case c = make_elementwise_case(12);
  real *da = zero_tensor(c.n), *db = zero_tensor(c.n);
  lx_add_backward(&test_ctx, da, db, c.w, c.n, LX_GRAD_ADD, LX_GRAD_ADD);
  check_gradient("add", "a", add_loss, &c, c.a, da, c.n);
  check_gradient("add", "b", add_loss, &c, c.b, db, c.n);
  /* each input's own mode: a's added to (a copy of its gradient), b's written over NaNs */
  real *added = copy_tensor(da, c.n), *written = nan_tensor(c.n);
  lx_add_backward(&test_ctx, added, written, c.w, c.n, LX_GRAD_ADD, LX_GRAD_WRITE);
  for (size_t i = 0; i < c.n; i++)
    da[i] += c.w[i]; /* what adding once more gives */
  CHECK(!memcmp(added, da, c.n * sizeof(real)), "add backward with LX_GRAD_ADD for a adds to a's gradient");
  check_written("add (b)", written, db, c.n);
  free(added);
  free_elementwise_case(&c), free(da), free(db);
}

/* The backward draws the forward's mask again: its gradient is the loss's. */
static void test_dropout_gradient(void) {
  elementwise_case c = make_elementwise_case(50);
  c.p = 0.25;
  real *da = zero_tensor(c.n);
  lx_dropout_backward(&test_ctx, da, c.w, c.n, c.p, 5, 6, LX_GRAD_ADD);
  check_gradient("dropout (p 0.25)", "input", dropout_loss, &c, c.a, da, c.n);
  real *written = nan_tensor(c.n); /* the dropped elements too: zeros */
  lx_dropout_backward(&test_ctx, written, c.w, c.n, c.p, 5, 6, LX_GRAD_WRITE);
  check_written("dropout (p 0.25)", written, da, c.n);
  free_elementwise_case(&c), free(da);
}

/* A sequence shard (elements [first, first + m) of the tensor) drawn from
 * counter first: its output and gradient are the whole call's, bit for bit. */
static void test_dropout_shard(void) {
  const size_t n = 64, first = 24, m = 16;
  real *x = random_tensor(n, 1), *dy = random_tensor(n, 1), *y = zero_tensor(n), *dx = zero_tensor(n);
  real *part_y = zero_tensor(m), *part_dx = zero_tensor(m);
  lx_dropout_forward(&test_ctx, y, x, n, 0.3, 9, 2);
  lx_dropout_backward(&test_ctx, dx, dy, n, 0.3, 9, 2, LX_GRAD_ADD);
  lx_dropout_forward_at(&test_ctx, part_y, x + first, m, 0.3, 9, 2, first);
  lx_dropout_backward_at(&test_ctx, part_dx, dy + first, m, 0.3, 9, 2, first, LX_GRAD_ADD);
  CHECK(!memcmp(part_y, y + first, m * sizeof(real)) && !memcmp(part_dx, dx + first, m * sizeof(real)),
        "dropout of elements [%zu, %zu) from counter %zu: the whole call's output and gradient there", first,
        first + m, first);
  free(x), free(dy), free(y), free(dx), free(part_y), free(part_dx);
}

static void test_dropout_mask(void) {
  const size_t n = (size_t)1 << 20;
  const double p = 0.1;
  real *x = random_tensor(n, 1), *y1 = zero_tensor(n), *y2 = zero_tensor(n);
  uint8_t *m1 = LX_MALLOC(n);
  for (size_t i = 0; i < n; i++)
    x[i] = 1 + fabs(x[i]); /* nonzero: an element's mask is whether its output is */
  lx_dropout_forward(&test_ctx, y1, x, n, p, 42, 3);
  lx_dropout_forward(&test_ctx, y2, x, n, p, 42, 3);
  for (size_t i = 0; i < n; i++)
    m1[i] = y1[i] != 0;
  CHECK(!memcmp(y1, y2, n * sizeof(real)),
        "dropout recomputed with the same (seed, stream) regenerates its output bit for bit");
  size_t kept = 0;
  for (size_t i = 0; i < n; i++)
    kept += m1[i];
  double rate = (double)kept / n, sigma = sqrt(p * (1 - p) / n);
  CHECK(fabs(rate - (1 - p)) < 5 * sigma, "dropout keep rate %.5f is 1 - p = %.2f within 5 sigma (%.1e)",
        rate, 1 - p, 5 * sigma);
  int scaled = 1;
  for (size_t i = 0; i < n; i++)
    scaled &= m1[i] ? y1[i] == x[i] * (real)(1 / (1 - p)) : y1[i] == 0;
  CHECK(scaled, "dropout zeroes dropped elements and scales kept ones by 1 / (1 - p)");

  size_t both = 0; /* neighbours must be independent: P(keep i and i+1) = (1-p)^2 */
  for (size_t i = 0; i + 1 < n; i += 2)
    both += m1[i] & m1[i + 1];
  double pair_rate = (double)both / (n / 2), pair_sigma = sqrt(0.81 * 0.19 / (n / 2));
  CHECK(fabs(pair_rate - 0.81) < 5 * pair_sigma,
        "neighbouring elements are kept independently (%.4f, want 0.81)", pair_rate);

  lx_dropout_forward(&test_ctx, y2, x, n, p, 42, 4);
  size_t same = 0;
  for (size_t i = 0; i < n; i++)
    same += m1[i] == (y2[i] != 0);
  /* independent masks agree with probability p^2 + (1-p)^2 = 0.82 */
  CHECK(fabs((double)same / n - 0.82) < 0.005,
        "another stream draws an independent mask (agreement %.4f, want 0.82)", (double)same / n);
  lx_dropout_forward(&test_ctx, y2, x, n, p, 43, 3);
  same = 0;
  for (size_t i = 0; i < n; i++)
    same += m1[i] == (y2[i] != 0);
  CHECK(fabs((double)same / n - 0.82) < 0.005,
        "another seed draws an independent mask (agreement %.4f, want 0.82)", (double)same / n);
  lx_dropout_forward(&test_ctx, y2, x, n, 0, 42, 3);
  CHECK(!memcmp(y2, x, n * sizeof(real)), "dropout with p = 0 is the identity");

  /* Golden value shared with the float build (and any twin of the RNG): the
   * mask is integer arithmetic only, the same in every build. */
  size_t golden = 0;
  for (uint64_t i = 0; i < 4096; i++)
    golden += lx_dropout_keep(1, 2, i, lx_dropout_threshold(0.5));
  CHECK(golden == 2114, "dropout mask golden count (seed 1, stream 2, p 0.5): %zu of 4096 kept", golden);
  free(x), free(y1), free(y2), free(m1);
}

/* ---- cross-entropy ------------------------------------------------------------ */

typedef struct {
  int BT, V, Vp;
  real dloss;
  int *targets;
  real *logits, *lse;
} ce_case;

static double cross_entropy_loss(void *p) {
  ce_case *c = p;
  return c->dloss * lx_cross_entropy_forward(&test_ctx, c->lse, c->logits, c->targets, c->BT, c->V, c->Vp);
}

static void test_cross_entropy(void) {
  ce_case c = {.BT = 6, .V = 7, .Vp = 9, .dloss = (real)0.7};
  size_t n = (size_t)c.BT * c.Vp;
  c.targets = random_tokens((size_t)c.BT, c.V);
  c.logits = random_tensor(n, 3);
  c.lse = zero_tensor((size_t)c.BT);
  real *dlogits = zero_tensor(n);
  lx_cross_entropy_forward(&test_ctx, c.lse, c.logits, c.targets, c.BT, c.V, c.Vp);
  lx_cross_entropy_backward(&test_ctx, dlogits, c.logits, c.lse, c.targets, c.dloss, c.BT, c.V, c.Vp,
                            LX_GRAD_ADD);
  check_gradient("cross_entropy", "logits", cross_entropy_loss, &c, c.logits, dlogits, n);
  int padding_untouched = 1;
  for (int r = 0; r < c.BT; r++)
    for (int v = c.V; v < c.Vp; v++)
      padding_untouched &= dlogits[(size_t)r * c.Vp + v] == 0;
  CHECK(padding_untouched, "cross_entropy gives padded vocabulary columns no gradient");
  /* written: the padding too (zeros, which the LM head reads) */
  real *written = nan_tensor(n);
  lx_cross_entropy_backward(&test_ctx, written, c.logits, c.lse, c.targets, c.dloss, c.BT, c.V, c.Vp,
                            LX_GRAD_WRITE);
  check_written("cross_entropy", written, dlogits, n);

  /* uniform logits: every token has probability 1/V, the loss is log V;
   * the padding holds large values that must not count */
  for (int r = 0; r < c.BT; r++)
    for (int v = 0; v < c.Vp; v++)
      c.logits[(size_t)r * c.Vp + v] = v < c.V ? (real)0.3 : 100;
  real loss = lx_cross_entropy_forward(&test_ctx, c.lse, c.logits, c.targets, c.BT, c.V, c.Vp);
  CHECK_CLOSE(loss, log((double)c.V), 1e-14, "cross_entropy of uniform logits is log(V) = %.6f",
              log((double)c.V));
  free(c.targets), free(c.logits), free(c.lse), free(dlogits);
}

/* A micro-batch's loss run as mini-sequences (MsT): chunks of 5, 4 and 3 of
 * BT = 12 rows. The shares add up to the whole mean, computed here directly
 * from its definition, and the chunks' gradients are the whole one's bits. */
static void test_cross_entropy_rows(void) {
  enum { BT = 12, V = 7, Vp = 9, CHUNKS = 3 };
  const int chunk[CHUNKS] = {5, 4, 3};
  const real dloss = (real)0.7;
  size_t n = (size_t)BT * Vp;
  int *targets = random_tokens(BT, V);
  real *logits = random_tensor(n, 3), *lse = zero_tensor(BT), *lse_rows = zero_tensor(BT);
  real *dlogits = random_tensor(n, 1), *dlogits_rows = zero_tensor(n);
  memcpy(dlogits_rows, dlogits, n * sizeof(real)); /* the backward adds: start both from the same values */

  double want = 0; /* -log softmax(x)[t] = log sum_v exp(x_v) - x_t, averaged over all BT rows */
  for (int r = 0; r < BT; r++) {
    double sum = 0;
    for (int v = 0; v < V; v++)
      sum += exp(logits[(size_t)r * Vp + v]);
    want += log(sum) - logits[(size_t)r * Vp + targets[r]];
  }
  want /= BT;

  real whole = lx_cross_entropy_forward(&test_ctx, lse, logits, targets, BT, V, Vp);
  double shares = 0;
  int first = 0, shares_of_bt = 1;
  for (int k = 0; k < CHUNKS; k++) {
    size_t at = (size_t)first * Vp;
    real share = lx_cross_entropy_forward_rows(&test_ctx, lse_rows + first, logits + at, targets + first,
                                               chunk[k], BT, V, Vp);
    double chunk_want = 0; /* this chunk's rows over BT, not over its own rows */
    for (int r = first; r < first + chunk[k]; r++)
      chunk_want += lse[r] - logits[(size_t)r * Vp + targets[r]];
    shares_of_bt &= fabs(share - chunk_want / BT) <= 1e-14;
    shares += share;
    lx_cross_entropy_backward_rows(&test_ctx, dlogits_rows + at, logits + at, lse_rows + first,
                                   targets + first, dloss, chunk[k], BT, V, Vp, LX_GRAD_ADD);
    first += chunk[k];
  }
  CHECK_CLOSE(whole, want, 1e-14, "cross_entropy of BT = 12 rows is the mean of -log softmax[target]");
  CHECK(shares_of_bt, "cross_entropy_forward_rows returns its rows' summed loss / BT");
  CHECK_CLOSE(shares, whole, 1e-14,
              "cross_entropy_forward_rows shares (5 + 4 + 3 rows) add up to the whole loss");
  CHECK(!memcmp(lse_rows, lse, BT * sizeof(real)),
        "cross_entropy_forward_rows gives the whole forward's lse");

  real *dwant = zero_tensor(n); /* the starting values + dloss / BT (softmax - onehot) */
  memcpy(dwant, dlogits, n * sizeof(real));
  for (int r = 0; r < BT; r++)
    for (int v = 0; v < V; v++)
      dwant[(size_t)r * Vp + v] +=
          dloss / BT * (exp(logits[(size_t)r * Vp + v] - lse[r]) - (v == targets[r]));
  lx_cross_entropy_backward(&test_ctx, dlogits, logits, lse, targets, dloss, BT, V, Vp, LX_GRAD_ADD);
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    worst = fmax(worst, fabs(dlogits[i] - dwant[i]));
  CHECK(worst <= 1e-14, "cross_entropy_backward adds dloss / BT (softmax - onehot) (max err %.1e)", worst);
  CHECK(!memcmp(dlogits_rows, dlogits, n * sizeof(real)),
        "cross_entropy_backward_rows over 5 + 4 + 3 rows gives the whole backward's bits");
  free(targets), free(logits), free(lse), free(lse_rows), free(dlogits), free(dlogits_rows), free(dwant);
}

/* ---- optimizer ---------------------------------------------------------------- */

static void test_adamw(void) {
  /* two steps on one parameter, worked by hand:
   * step 1, g = 0.2:  m = 0.02, v = 0.00004, m^ = 0.2, v^ = 0.04
   *   p = 0.5 - 0.01 (0.2 / (0.2 + 1e-8) + 0.1 * 0.5)
   * step 2, g = -0.1: m = 0.018 - 0.01 = 0.008, v = 0.00003996 + 0.00001 = 0.00004996
   *   m^ = 0.008 / (1 - 0.81), v^ = 0.00004996 / (1 - 0.998001) */
  lx_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  real p = 0.5, g = 0.2, m = 0, v = 0;
  lx_adamw_update(&test_ctx, &p, &g, &m, &v, 1, 0.01, hp, 1);
  double p1 = 0.5 - 0.01 * (0.2 / (0.2 + 1e-8) + 0.1 * 0.5);
  CHECK_CLOSE(p, p1, 1e-15, "AdamW step 1 matches the hand computation");
  CHECK_CLOSE(m, 0.02, 1e-15, "AdamW step 1 first moment");
  CHECK_CLOSE(v, 0.00004, 1e-15, "AdamW step 1 second moment");
  g = -0.1;
  lx_adamw_update(&test_ctx, &p, &g, &m, &v, 1, 0.01, hp, 2);
  double mhat = 0.008 / 0.19, vhat = 0.00004996 / 0.001999;
  double p2 = p1 - 0.01 * (mhat / (sqrt(vhat) + 1e-8) + 0.1 * p1);
  CHECK_CLOSE(p, p2, 1e-14, "AdamW step 2 matches the hand computation (%.12f)", p2);

  /* weight decay is decoupled: a zero gradient still shrinks p by lr * wd * p */
  real q = 2, zero = 0, mq = 0, vq = 0;
  lx_adamw_update(&test_ctx, &q, &zero, &mq, &vq, 1, 0.01, hp, 1);
  CHECK_CLOSE(q, 2 - 0.01 * 0.1 * 2, 1e-15, "AdamW weight decay is decoupled from the gradient");
}

static void test_grad_clip(void) {
  real g[2] = {3, 4};
  double norm = sqrt(lx_grad_norm_squared(&test_ctx, g, 2));
  CHECK_CLOSE(norm, 5, 1e-15, "global gradient norm of (3, 4) is 5");
  real *ones = zero_tensor(1000);
  lx_init_constant(&test_ctx, ones, 1000, 1);
  CHECK_CLOSE(lx_grad_norm_squared(&test_ctx, ones, 1000) + lx_grad_norm_squared(&test_ctx, g, 2), 1025, 1e-15,
              "squared norms of several tensors add up (1000 + 25)");
  lx_scale(&test_ctx, g, 2, lx_grad_clip_factor(norm, 1.0));
  CHECK(fabs(g[0] - 0.6) < 1e-6 && fabs(g[1] - 0.8) < 1e-6, "clipping to 1 scales (3, 4) to (0.6, 0.8)");
  CHECK(lx_grad_clip_factor(0.5, 1.0) == 1.0 && lx_grad_clip_factor(5, 0) == 1.0,
        "no clipping below the bound or when disabled");
  free(ones);
}

static void test_learning_rate(void) {
  CHECK_CLOSE(lx_learning_rate(1, 10, 110, 1e-3, 1e-4, LX_SCHED_COSINE), 1e-4, 1e-15,
              "warm-up step 1 is lr / warmup");
  CHECK_CLOSE(lx_learning_rate(60, 10, 110, 1e-3, 1e-4, LX_SCHED_COSINE), 5.5e-4, 1e-15,
              "cosine halfway is (lr + min_lr) / 2");
  CHECK_CLOSE(lx_learning_rate(110, 10, 110, 1e-3, 1e-4, LX_SCHED_COSINE), 1e-4, 1e-15,
              "cosine ends at min_lr");
  CHECK_CLOSE(lx_learning_rate(35, 10, 110, 1e-3, 1e-4, LX_SCHED_LINEAR), 1e-3 - 0.25 * 9e-4, 1e-15,
              "linear decay a quarter of the way");
}

/* ---- initialization ----------------------------------------------------------- */

static void test_gpt2_init(void) {
  const size_t n = 200000;
  real *w = zero_tensor(n), *again = zero_tensor(n);
  double std = lx_gpt2_init_std(0, 12);
  lx_init_normal(&test_ctx, w, n, std, 1234, 17);
  lx_init_normal(&test_ctx, again, n, std, 1234, 17);
  CHECK(!memcmp(w, again, n * sizeof(real)), "GPT-2 init is a pure function of (seed, tensor stream)");
  double mean = 0, var = 0;
  for (size_t i = 0; i < n; i++)
    mean += w[i];
  mean /= n;
  for (size_t i = 0; i < n; i++)
    var += (w[i] - mean) * (w[i] - mean);
  double sd = sqrt(var / n);
  CHECK(fabs(mean) < 5 * 0.02 / sqrt((double)n) && fabs(sd - 0.02) < 0.02 * 5 / sqrt(2.0 * n),
        "GPT-2 init is normal(0, 0.02): mean %.1e, std %.6f", mean, sd);
  double kurt = 0;
  for (size_t i = 0; i < n; i++)
    kurt += pow((w[i] - mean) / sd, 4);
  CHECK(fabs(kurt / n - 3) < 0.1, "GPT-2 init has a normal kurtosis (%.3f, want 3)", kurt / n);
  CHECK_CLOSE(lx_gpt2_init_std(1, 12), 0.02 / sqrt(24.0), 1e-15, "residual projections use 0.02 / sqrt(2 L)");
  lx_init_normal(&test_ctx, again, n, std, 1234, 18);
  double corr = 0;
  for (size_t i = 0; i < n; i++)
    corr += w[i] * again[i];
  corr /= n * 0.02 * 0.02;
  CHECK(fabs(corr) < 5 / sqrt((double)n), "tensors with different streams are uncorrelated (%.1e)", corr);
  free(w), free(again);
}

/* ---- the kernels composed: a one-block GPT (tests/cpu/tiny_gpt.h) ----------- */

typedef struct {
  acts a;
  params p;
  const int *tokens, *targets;
} tiny_case;

static double tiny_gpt_loss(void *ctx) {
  tiny_case *c = ctx;
  return model_forward(&c->a, &c->p, c->tokens, c->targets, 1);
}

static size_t tiny_param_count(void) {
  size_t n = 0;
  for (int i = 0; i < N_PARAMS; i++)
    n += param_sizes[i];
  return n;
}

/* One forward + backward; returns the parameter gradient (caller frees). */
static real *tiny_gpt_gradient(tiny_case *c) {
  size_t n = tiny_param_count();
  real *dflat = zero_tensor(n);
  params dp;
  params_view(&dp, dflat);
  acts g = acts_alloc();
  model_forward(&c->a, &c->p, c->tokens, c->targets, 1);
  model_backward(&g, &dp, &c->a, &c->p, c->tokens, c->targets, 1);
  acts_free(&g);
  return dflat;
}

/* The whole chain of backwards, every parameter of every op at once, with
 * attention and residual dropout on: the composition an emitted stage runs. */
static void test_tiny_gpt_gradient(void) {
  size_t n = tiny_param_count();
  real *flat = zero_tensor(n);
  tiny_case c = {.a = acts_alloc()};
  params_view(&c.p, flat);
  init_params(&c.p);
  /* larger weights than GPT-2's 0.02, so that every path carries gradient */
  for (size_t i = 0; i < n; i++)
    flat[i] += (real)(0.3 * lx_rng_normal(5, 6, i));
  int *tokens = random_tokens(TG_BT, TG_V), *targets = random_tokens(TG_BT, TG_V);
  c.tokens = tokens, c.targets = targets;
  real *dflat = tiny_gpt_gradient(&c);
  for (int i = 0; i < N_PARAMS; i++) {
    static const char *names[N_PARAMS] = {"wte (embedding + tied lm_head)",
                                          "wpe",
                                          "ln1.weight",
                                          "ln1.bias",
                                          "qkv.weight",
                                          "qkv.bias",
                                          "proj.weight",
                                          "proj.bias",
                                          "rms.weight",
                                          "up.weight",
                                          "down.weight",
                                          "down.bias",
                                          "lnf.weight",
                                          "lnf.bias"};
    check_gradient("tiny GPT block", names[i], tiny_gpt_loss, &c, c.p.t[i], dflat + (c.p.t[i] - flat),
                   param_sizes[i]);
  }

  /* Parameter sums run in a fixed order: any thread count, the same bits. */
#ifdef _OPENMP
  int threads = test_ctx.threads;
  test_ctx.threads = 2;
  real *two = tiny_gpt_gradient(&c);
  test_ctx.threads = 3;
  real *three = tiny_gpt_gradient(&c);
  test_ctx.threads = threads;
  CHECK(!memcmp(two, three, n * sizeof(real)) && !memcmp(two, dflat, n * sizeof(real)),
        "tiny GPT gradient is bit-identical with %d, 2 and 3 OpenMP threads", threads);
  free(two), free(three);
#endif
  double l1 = tiny_gpt_loss(&c), l2 = tiny_gpt_loss(&c);
  CHECK(l1 == l2, "tiny GPT forward recomputed gives the same loss bit for bit (dropout on)");
  free(flat), free(dflat), free(tokens), free(targets), acts_free(&c.a);
}

int main(void) {
#ifdef _OPENMP
  /* Finite differences run thousands of tiny forwards, where starting a
   * thread team costs more than the work, and a busy machine makes spinning
   * teams far worse. Results do not depend on the thread count, which
   * test_tiny_gpt_gradient checks with 1, 2 and 3 threads. */
  omp_set_num_threads(1);
#endif
  test_embeddings();
  test_layernorm();
  test_rmsnorm();
  test_linear(1);
  test_linear(0);
  test_lora_linear(0, 0, 5);
  test_lora_linear(0.3, 0, 5);
  test_lora_linear(0.3, 10, 20); /* a row-parallel rank's columns 10..14 of 20 */
  for (int flash = 0; flash <= 1; flash++) {
    test_attention_gradient(flash, 0);
    test_attention_gradient(flash, 0.3);
    test_attention_causal(flash);
    test_attention_split_over_ranks(flash);
  }
  int kv_heads[3] = {4, 2, 1}; /* multi-head, grouped-query, multi-query */
  for (int k = 0; k < 3; k++) {
    test_attention_forms_agree(4, kv_heads[k], 0);
    test_attention_forms_agree(4, kv_heads[k], 0.2);
  }
  test_attention_dropout_regenerates();
  test_attention_heads(4, 2, 2); /* groups of two */
  test_attention_heads(4, 4, 4); /* groups of one, a kv head a piece */
  test_attention_heads(6, 3, 2); /* pieces of one and two kv heads */
  test_attention_probs_alone(4, 2);
  test_attention_probs_alone(6, 3);
  test_rope();
  test_maps();
  test_swiglu();
  test_add();
  test_dropout_gradient();
  test_dropout_mask();
  test_dropout_shard();
  test_cross_entropy();
  test_cross_entropy_rows();
  test_adamw();
  test_grad_clip();
  test_learning_rate();
  test_gpt2_init();
  test_tiny_gpt_gradient();
  printf("# worst finite-difference relative error over all backwards: %.2e\n", worst_fd_error);
  return check_exit_status();
}
