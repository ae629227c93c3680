/* cpu_kernels_float_test.c — the CPU kernels in float, the build the emitted
 * programs use. Finite differences are too coarse in float, so this checks
 * what float can check: the products against loops, the two attention forms
 * against each other, the dropout mask against the double build's golden
 * count, and a tiny one-block GPT (every kernel, wired as an emitted stage
 * would wire them) overfitting one batch under AdamW. */
#include "lx_lr_schedule.h"
#include "tiny_gpt.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static void test_linear_against_loops(void) {
  int BT = 9, C = 13, OC = 11;
  real *x = random_tensor((size_t)BT * C, 1), *w = random_tensor((size_t)OC * C, 1),
       *b = random_tensor((size_t)OC, 1);
  real *y = zero_tensor((size_t)BT * OC);
  lx_linear_forward(&test_ctx, y, x, w, b, BT, C, OC);
  double worst = 0;
  for (int r = 0; r < BT; r++)
    for (int o = 0; o < OC; o++) {
      double s = b[o];
      for (int i = 0; i < C; i++)
        s += (double)x[r * C + i] * w[o * C + i];
      worst = fmax(worst, fabs(s - y[r * OC + o]));
    }
  CHECK(worst < 1e-5, "float linear forward equals loops (max err %.1e)", worst);
  free(x), free(w), free(b), free(y);
}

static void test_attention_forms_agree(void) {
  int B = 2, T = 7, H = 4, KVH = 2, D = 8;
  double p = 0.1;
  size_t nqkv = (size_t)B * T * (H + 2 * KVH) * D, nout = (size_t)B * T * H * D,
         scores = (size_t)B * H * T * T;
  real *qkv = random_tensor(nqkv, 1.5), *dout = random_tensor(nout, 1);
  real *out_m = zero_tensor(nout), *out_f = zero_tensor(nout), *probs = zero_tensor(scores);
  real *lse = zero_tensor((size_t)B * H * T);
  real *dm = zero_tensor(nqkv), *df = zero_tensor(nqkv);
  lx_attention_forward(&test_ctx, out_m, probs, qkv, B, T, H, KVH, D, p, 3, 4, 0, H);
  lx_attention_backward(&test_ctx, dm, dout, qkv, probs, B, T, H, KVH, D, p, 3, 4, 0, H);
  lx_flash_attention_forward(&test_ctx, out_f, lse, qkv, B, T, H, KVH, D, p, 3, 4, 0, H);
  lx_flash_attention_backward(&test_ctx, df, dout, qkv, out_f, lse, B, T, H, KVH, D, p, 3, 4, 0, H,
                              LX_GRAD_ADD);
  double out_err = max_abs_diff(out_m, out_f, nout) / max_abs(out_m, nout);
  double grad_err = max_abs_diff(dm, df, nqkv) / max_abs(dm, nqkv);
  CHECK(out_err < 1e-5 && grad_err < 1e-5, "float attention and flash_attention agree (out %.1e, grad %.1e)",
        out_err, grad_err);
  free(qkv), free(dout), free(out_m), free(out_f), free(probs), free(lse), free(dm), free(df);
}

static void test_cross_entropy_uniform(void) {
  int BT = 4, V = 50, Vp = 64;
  real *logits = zero_tensor((size_t)BT * Vp), *lse = zero_tensor((size_t)BT);
  int targets[4] = {0, 7, 49, 3};
  real loss = lx_cross_entropy_forward(&test_ctx, lse, logits, targets, BT, V, Vp);
  CHECK_CLOSE(loss, log(50.0), 1e-6, "float cross_entropy of uniform logits is log(V)");
  free(logits), free(lse);
}

static void test_dropout_golden(void) {
  size_t golden = 0;
  for (uint64_t i = 0; i < 4096; i++)
    golden += lx_dropout_keep(1, 2, i, lx_dropout_threshold(0.5));
  CHECK(golden == 2114, "float build draws the double build's dropout mask (golden count %zu)", golden);
}

static void test_tiny_gpt_overfits(void) {
  size_t n = 0;
  for (int i = 0; i < N_PARAMS; i++)
    n += param_sizes[i];
  real *flat = zero_tensor(n), *dflat = zero_tensor(n), *m = zero_tensor(n), *v = zero_tensor(n);
  params p, dp;
  params_view(&p, flat);
  params_view(&dp, dflat);
  init_params(&p);
  acts a = acts_alloc(), g = acts_alloc();
  int *tokens = random_tokens(TG_BT, TG_V), *targets = random_tokens(TG_BT, TG_V);
  lx_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0};
  real first = 0, last = 0;
  double norm = 0;
  int finite = 1;
  for (int step = 1; step <= 60; step++) {
    real loss = model_forward(&a, &p, tokens, targets, (uint64_t)step);
    if (step == 1) first = loss;
    last = loss;
    lx_zero(dflat, n);
    acts_zero(&g);
    model_backward(&g, &dp, &a, &p, tokens, targets, (uint64_t)step);
    norm = sqrt(lx_grad_norm_squared(&test_ctx, dflat, n));
    finite &= isfinite(loss) && isfinite(norm);
    lx_scale(&test_ctx, dflat, n, lx_grad_clip_factor(norm, 1.0));
    lx_adamw_update(&test_ctx, flat, dflat, m, v, n, lx_learning_rate(step, 5, 60, 1e-2, 1e-3, LX_SCHED_COSINE), hp,
                    step);
  }
  CHECK(fabs(first - log((double)TG_V)) < 0.3, "tiny GPT starts near log(V) = %.3f (loss %.3f)",
        log((double)TG_V), first);
  CHECK(finite && last < 0.5 * first, "tiny GPT (every kernel, float) overfits one batch: loss %.3f -> %.3f",
        first, last);
  free(flat), free(dflat), free(m), free(v), free(tokens), free(targets);
  acts_free(&a), acts_free(&g);
}

int main(void) {
#ifdef _OPENMP
  /* The kernels here are tiny: a thread team costs more than the work, and
   * spinning teams crawl on a busy machine. cpu_kernels_test checks that
   * results are the same for any thread count. */
  omp_set_num_threads(1);
#endif
  test_linear_against_loops();
  test_attention_forms_agree();
  test_cross_entropy_uniform();
  test_dropout_golden();
  test_tiny_gpt_overfits();
  return check_exit_status();
}
