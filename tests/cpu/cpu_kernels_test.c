/* cpu_kernels_test.c — the CPU kernels of templates/cpu against finite
 * differences (fd_harness.h) and against closed forms: embeddings, norms,
 * linear and LoRA, the element-wise ops, cross-entropy, the optimizer, the
 * initialization and a one-block GPT composed of them all. The attention
 * and rope kernels: cpu_attention_test.c. */
#include "fd_harness.h"
#include "lx_lr_schedule.h"
#include "tiny_gpt.h"

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
  fd_single_thread();
  test_embeddings();
  test_layernorm();
  test_rmsnorm();
  test_linear(1);
  test_linear(0);
  test_lora_linear(0, 0, 5);
  test_lora_linear(0.3, 0, 5);
  test_lora_linear(0.3, 10, 20); /* a row-parallel rank's columns 10..14 of 20 */
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
  fd_report();
  return check_exit_status();
}
