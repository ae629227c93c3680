/* cpu_attention_test.c — the CPU attention kernels of templates/cpu (both
 * forms: materialised and flash) and rope against finite differences
 * (fd_harness.h) and against each other: causality, dropout regenerated,
 * the split over tensor-parallel ranks, kv-head pieces, the probabilities
 * made alone. */
#include "fd_harness.h"

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

int main(void) {
  fd_single_thread();
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
  fd_report();
  return check_exit_status();
}
