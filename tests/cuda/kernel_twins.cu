/* kernel_twins.cu — every CUDA kernel of templates/cuda against its CPU twin
 * (templates/cpu, via cpu_twins.c) on random inputs. Inputs are rounded to
 * bf16 first and the CPU gets the rounded values, so the comparison measures
 * the kernels, not the input rounding. Prints "ok - ..." / "not ok - ..."
 * with the max relative error (max |gpu - cpu| / max |cpu|) per output, and
 * exits non-zero on any failure. Without a GPU it prints "skipped: no GPU"
 * and exits 0, so that `make test-gpu` can run anywhere.
 *
 * Also checked: dropout masks equal the CPU's bit for bit (the shared
 * counter-based generator), and the backward kernels give the same bits on
 * a second run (no atomics). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#ifdef LX_CUDNN_ATTENTION /* lx_cuda_cudnn_attention.o calls lynx's launchers and error path: define them    \
                             here */
#define LX_CUDA_API
#endif
#include "lx_cuda_adamw.cuh"
#include "lx_cuda_attention.cuh"
#include "lx_cuda_attention_gemm.cuh"
#include "lx_cuda_elementwise.cuh"
#include "lx_cuda_embedding.cuh"
#include "lx_cuda_loss.cuh"
#include "lx_cuda_matmul.cuh"
#include "lx_cuda_norm.cuh"
#include "lx_cuda_vocab.cuh"

#include "cpu_twins.h"
#include "twin_harness.cuh"

/* ---- linear ---------------------------------------------------------------------- */

static void test_linear(void) {
  const int BT = 520, C = 64, OC = 136; /* three chunks of the bias gradient */
  floats inp = random_bf16((size_t)BT * C, 1), w = random_bf16((size_t)OC * C, 0.2f), bias = random_bf16(OC, 0.5f);
  floats dout = random_bf16((size_t)BT * OC, 1), dinp0 = random_bf16((size_t)BT * C, 0.1f);
  floats dw0 = random_bf16((size_t)OC * C, 0.1f), db0 = random_bf16(OC, 0.1f);
  lx_bf16 *d_inp = to_device_bf16(inp), *d_w = to_device_bf16(w), *d_bias = to_device_bf16(bias);
  lx_bf16 *d_out = to_device_bf16(floats((size_t)BT * OC)), *d_dout = to_device_bf16(dout);
  lx_bf16 *d_dinp = to_device_bf16(dinp0);
  float *d_dw = to_device_f32(dw0), *d_db = to_device_f32(db0);
  float *scratch = device_zeros_f32(lx_cuda_bias_backward_scratch_floats(BT, OC));
  const lx_ctx ctx = context(scratch, lx_cuda_bias_backward_scratch_floats(BT, OC));

  floats out((size_t)BT * OC), dinp = dinp0, dw = dw0, db = db0;
  twin_linear_forward(out.data(), inp.data(), w.data(), bias.data(), BT, C, OC);
  lx_linear_forward(&ctx, d_out, d_inp, d_w, d_bias, BT, C, OC);
  compare("linear_forward", "out", from_device_bf16(d_out, out.size()), out, TOL_BF16);

  twin_linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), BT, C, OC);
  lx_linear_backward(&ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, BT, C, OC, LX_GRAD_ADD);
  compare("linear_backward", "dinp", from_device_bf16(d_dinp, dinp.size()), dinp, TOL_BF16);
  compare("linear_backward", "dweight", from_device_f32(d_dw, dw.size()), dw, TOL_F32);
  compare("linear_backward", "dbias", from_device_f32(d_db, db.size()), db, TOL_F32);
  /* LX_GRAD_WRITE: dout W written over NaNs (the twin adds it to zeros) */
  floats written((size_t)BT * C, 0.0f), unused_dw((size_t)OC * C, 0.0f);
  twin_linear_backward(written.data(), unused_dw.data(), NULL, dout.data(), inp.data(), w.data(), BT, C, OC);
  lx_bf16 *d_written = to_device_bf16(floats(written.size(), NAN));
  lx_linear_backward(&ctx, d_written, NULL, NULL, d_dout, d_inp, d_w, BT, C, OC, LX_GRAD_WRITE);
  compare("linear_backward (written)", "dinp", from_device_bf16(d_written, written.size()), written, TOL_BF16);

  /* linear + gelu epilogue against linear then gelu */
  floats gelu_out(out.size());
  twin_gelu_forward(gelu_out.data(), out.data(), out.size());
  lx_bf16 *d_pre = to_device_bf16(floats(out.size()));
  lx_linear_gelu_forward(&ctx, d_out, d_pre, d_inp, d_w, d_bias, BT, C, OC);
  compare("linear_gelu_forward", "out", from_device_bf16(d_out, out.size()), gelu_out, TOL_BF16);
  compare("linear_gelu_forward", "pre_gelu", from_device_bf16(d_pre, out.size()), out, TOL_BF16);

  /* dgelu epilogue: (dout2 W2) * gelu'(pre) with W2 (OC2, OC) */
  const int OC2 = 72;
  floats w2 = random_bf16((size_t)OC2 * OC, 0.2f), dout2 = random_bf16((size_t)BT * OC2, 1);
  floats pre = from_device_bf16(d_pre, out.size()), dpre_mm((size_t)BT * OC, 0.0f), dpre((size_t)BT * OC, 0.0f);
  floats unused_dw2((size_t)OC2 * OC, 0.0f);
  twin_linear_backward(dpre_mm.data(), unused_dw2.data(), NULL, dout2.data(), pre.data(), w2.data(), BT, OC, OC2);
  twin_gelu_backward(dpre.data(), dpre_mm.data(), pre.data(), dpre.size());
  lx_bf16 *d_w2 = to_device_bf16(w2), *d_dout2 = to_device_bf16(dout2), *d_dpre = to_device_bf16(floats(dpre.size()));
  lx_linear_dgelu_backward(&ctx, d_dpre, d_dout2, d_w2, d_pre, BT, OC, OC2);
  compare("linear_dgelu_backward", "dpre_gelu", from_device_bf16(d_dpre, dpre.size()), dpre, TOL_BF16);
}

/* LoRA (fine-tuning): the base product plus scale (d(x) A^T) B^T, d the
 * adapter's dropout (none, and a row-parallel rank's columns 64.. of 128 at
 * p = 0.25, whose mask both sides draw from the same counters); the backward
 * with W frozen, the adapters' gradients added into fp32, dinp written
 * (LX_GRAD_WRITE over NaNs); LoRA-FA's call (A frozen, no input), added. */
static void test_lora_linear(twin_lora_dropout d) {
  const int BT = 520, C = 64, OC = 136, R = 8;
  const float scale = 2.0f;
  char label[64];
  snprintf(label, sizeof label, "lora_linear p=%g", d.p);
  floats inp = random_bf16((size_t)BT * C, 1), w = random_bf16((size_t)OC * C, 0.2f), bias = random_bf16(OC, 0.5f);
  floats a = random_bf16((size_t)R * C, 0.3f), b = random_bf16((size_t)OC * R, 0.3f);
  floats dout = random_bf16((size_t)BT * OC, 1), da0 = random_bf16((size_t)R * C, 0.1f);
  floats db0 = random_bf16((size_t)OC * R, 0.1f);
  lx_bf16 *d_inp = to_device_bf16(inp), *d_w = to_device_bf16(w), *d_bias = to_device_bf16(bias);
  lx_bf16 *d_a = to_device_bf16(a), *d_b = to_device_bf16(b), *d_dout = to_device_bf16(dout);
  lx_bf16 *d_out = to_device_bf16(floats((size_t)BT * OC)), *d_down = to_device_bf16(floats((size_t)BT * R));
  float *d_da = to_device_f32(da0), *d_db = to_device_f32(db0);
  size_t floats_needed = lx_cuda_lora_scratch_floats(BT, R, C) + lx_cuda_bias_backward_scratch_floats(BT, OC);
  const lx_ctx ctx = context(device_zeros_f32(floats_needed), floats_needed);
#define DROPOUT_ARGS d.p, d.seed, d.stream, d.col0, d.c_whole

  floats out((size_t)BT * OC), down((size_t)BT * R);
  twin_lora_linear_forward(out.data(), down.data(), inp.data(), w.data(), bias.data(), a.data(), b.data(), BT, C, OC,
                           R, scale, d);
  lx_lora_linear_forward(&ctx, d_out, d_down, d_inp, d_w, d_bias, d_a, d_b, BT, C, OC, R, scale, DROPOUT_ARGS);
  compare((std::string(label) + " forward").c_str(), "out", from_device_bf16(d_out, out.size()), out, TOL_BF16);
  compare((std::string(label) + " forward").c_str(), "down", from_device_bf16(d_down, down.size()), down, TOL_BF16);

  floats gpu_down = from_device_bf16(d_down, down.size()); /* both backwards read the same u */
  floats dinp((size_t)BT * C, 0.0f), da = da0, db = db0;
  twin_lora_linear_backward(dinp.data(), da.data(), db.data(), dout.data(), inp.data(), gpu_down.data(), w.data(),
                            a.data(), b.data(), BT, C, OC, R, scale, d);
  lx_bf16 *d_dinp = to_device_bf16(floats(dinp.size(), NAN));
  lx_lora_linear_backward(&ctx, d_dinp, NULL, NULL, d_da, d_db, d_dout, d_inp, d_down, d_w, d_a, d_b, BT, C, OC, R,
                          scale, DROPOUT_ARGS, LX_GRAD_WRITE);
  std::string backward = std::string(label) + " backward";
  compare((backward + " (written)").c_str(), "dinp", from_device_bf16(d_dinp, dinp.size()), dinp, TOL_BF16);
  /* dA = du^T d(x) from du in bf16 (the scratch), the twin's in float: a bf16 tolerance */
  compare(backward.c_str(), "dlora_a", from_device_f32(d_da, da.size()), da, TOL_BF16);
  compare(backward.c_str(), "dlora_b", from_device_f32(d_db, db.size()), db, TOL_F32);
  floats fa_db = db0, fa_dinp((size_t)BT * C, 0.0f);
  twin_lora_linear_backward(fa_dinp.data(), NULL, fa_db.data(), dout.data(), NULL, gpu_down.data(), w.data(),
                            a.data(), b.data(), BT, C, OC, R, scale, d);
  float *d_fa_db = to_device_f32(db0);
  lx_bf16 *d_fa_dinp = to_device_bf16(floats(dinp.size(), 0.0f));
  lx_lora_linear_backward(&ctx, d_fa_dinp, NULL, NULL, NULL, d_fa_db, d_dout, NULL, d_down, d_w, d_a, d_b, BT, C, OC,
                          R, scale, DROPOUT_ARGS, LX_GRAD_ADD);
#undef DROPOUT_ARGS
  compare((backward + " (LoRA-FA)").c_str(), "dinp", from_device_bf16(d_fa_dinp, dinp.size()), fa_dinp, TOL_BF16);
  compare((backward + " (LoRA-FA)").c_str(), "dlora_b", from_device_f32(d_fa_db, db.size()), fa_db, TOL_F32);
}

/* ---- norms ----------------------------------------------------------------------- */

/* shape: how the kernels take the rows, for the test names */
static void test_norms(int BT, int C, const char *shape) {
  auto named = [&](const char *op) { return std::string(op) + shape; };
  size_t N = (size_t)BT * C;
  floats x = random_bf16(N, 2), branch = random_bf16(N, 1), w = random_bf16(C, 1), b = random_bf16(C, 0.5f);
  floats dout = random_bf16(N, 1), dinp0 = random_bf16(N, 0.1f), dw0 = random_bf16(C, 0.1f), db0 = random_bf16(C, 0.1f);
  lx_bf16 *d_x = to_device_bf16(x), *d_branch = to_device_bf16(branch), *d_w = to_device_bf16(w);
  lx_bf16 *d_b = to_device_bf16(b), *d_out = to_device_bf16(floats(N)), *d_res = to_device_bf16(floats(N));
  lx_bf16 *d_dout = to_device_bf16(dout);
  float *scratch = device_zeros_f32(lx_cuda_norm_backward_scratch_floats(BT, C));
  const lx_ctx ctx = context(scratch, lx_cuda_norm_backward_scratch_floats(BT, C));

  floats out(N);
  twin_layernorm_forward(out.data(), x.data(), w.data(), b.data(), BT, C);
  lx_layernorm_forward(&ctx, d_out, d_x, d_w, d_b, BT, C);
  compare(named("layernorm_forward").c_str(), "out", from_device_bf16(d_out, N), out, TOL_BF16);

  floats sum(N);
  for (size_t i = 0; i < N; i++)
    sum[i] = lx_to_float(lx_to_bf16(x[i] + branch[i]));
  twin_layernorm_forward(out.data(), sum.data(), w.data(), b.data(), BT, C);
  lx_residual_layernorm_forward(&ctx, d_res, d_out, d_x, d_branch, d_w, d_b, BT, C);
  compare(named("residual_layernorm_forward").c_str(), "residual", from_device_bf16(d_res, N), sum, TOL_BF16);
  compare(named("residual_layernorm_forward").c_str(), "out", from_device_bf16(d_out, N), out, TOL_BF16);

  floats dinp = dinp0, dw = dw0, db = db0;
  lx_bf16 *d_dinp = to_device_bf16(dinp0);
  float *d_dw = to_device_f32(dw0), *d_db = to_device_f32(db0);
  twin_layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), BT, C);
  lx_layernorm_backward(&ctx, d_dinp, d_dw, d_db, d_dout, d_x, d_w, BT, C);
  compare(named("layernorm_backward").c_str(), "dinp", from_device_bf16(d_dinp, N), dinp, TOL_BF16);
  compare(named("layernorm_backward").c_str(), "dweight", from_device_f32(d_dw, C), dw, TOL_F32);
  compare(named("layernorm_backward").c_str(), "dbias", from_device_f32(d_db, C), db, TOL_F32);

  twin_rmsnorm_forward(out.data(), x.data(), w.data(), BT, C);
  lx_rmsnorm_forward(&ctx, d_out, d_x, d_w, BT, C);
  compare(named("rmsnorm_forward").c_str(), "out", from_device_bf16(d_out, N), out, TOL_BF16);
  twin_rmsnorm_forward(out.data(), sum.data(), w.data(), BT, C);
  lx_residual_rmsnorm_forward(&ctx, d_res, d_out, d_x, d_branch, d_w, BT, C);
  compare(named("residual_rmsnorm_forward").c_str(), "out", from_device_bf16(d_out, N), out, TOL_BF16);

  dinp = dinp0, dw = dw0;
  lx_bf16 *d_dinp2 = to_device_bf16(dinp0);
  float *d_dw2 = to_device_f32(dw0);
  twin_rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), BT, C);
  lx_rmsnorm_backward(&ctx, d_dinp2, d_dw2, d_dout, d_x, d_w, BT, C);
  compare(named("rmsnorm_backward").c_str(), "dinp", from_device_bf16(d_dinp2, N), dinp, TOL_BF16);
  compare(named("rmsnorm_backward").c_str(), "dweight", from_device_f32(d_dw2, C), dw, TOL_F32);
}

/* ---- attention ------------------------------------------------------------------- */

#ifdef LX_CUDNN_ATTENTION
/* Built against lx_cuda_cudnn_attention.cu (kernel_twins_cudnn): cuDNN runs the
 * flash launchers. Its dropout is its own stream, not the CPU twin's, so only
 * p = 0 is compared, and its backward writes dqkv (the step zeroes it first)
 * where lynx's kernels add to it. */
static const bool cudnn_flash = true;
#else
static const bool cudnn_flash = false;
#endif

/* The elements of x (B, outer, H, inner) in query heads [h0, h1), or (inside
 * false) in every other head, in order. */
template <typename T>
static std::vector<T> heads_part(const std::vector<T> &x, int B, size_t outer, int H, size_t inner, int h0, int h1,
                                 bool inside) {
  std::vector<T> part;
  for (size_t a = 0; a < (size_t)B * outer; a++)
    for (int h = 0; h < H; h++)
      if ((h0 <= h && h < h1) == inside)
        part.insert(part.end(), x.begin() + (a * H + h) * inner, x.begin() + (a * H + h + 1) * inner);
  return part;
}

template <typename T> static bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T> static bool all_equal(const std::vector<T> &x, T value) {
  return std::all_of(x.begin(), x.end(), [&](T e) { return e == value; });
}

/* head_base, heads_total: a tensor-parallel rank's heads, whose dropout draws
 * are numbered in the whole model's heads. */
static void test_attention(int B, int T, int H, int KVH, int D, double p, int head_base, int heads_total) {
  char name[128];
  const uint64_t seed = 1234, stream_id = 77;
  size_t W = (size_t)(H + 2 * KVH) * D, qkv_n = (size_t)B * T * W, out_n = (size_t)B * T * H * D;
  size_t rows = (size_t)B * H * T, scores = rows * T;
  floats qkv = random_bf16(qkv_n, 1.5f), dout = random_bf16(out_n, 1), dqkv0 = random_bf16(qkv_n, 0.05f);
  lx_bf16 *d_qkv = to_device_bf16(qkv), *d_dout = to_device_bf16(dout), *d_out = to_device_bf16(floats(out_n));
  size_t scratch_floats =
      std::max(lx_cuda_flash_attention_scratch_floats(B, T, H), lx_cuda_attention_scratch_floats(T, KVH));
  float *d_lse = device_zeros_f32(rows), *scratch = device_zeros_f32(scratch_floats);
  const lx_ctx ctx = context(scratch, scratch_floats);

  /* flash */
  floats out(out_n), lse(rows);
  if (!cudnn_flash || p == 0) {
    twin_flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, H, KVH, D, p, seed, stream_id,
                                 head_base, heads_total);
    lx_flash_attention_forward(&ctx, d_out, d_lse, d_qkv, B, T, H, KVH, D, p, seed, stream_id, head_base,
                               heads_total);
    snprintf(name, sizeof name, "flash_attention_forward D=%d p=%.1f heads %d+%d of %d", D, p, head_base, H,
             heads_total);
    compare(name, "out", from_device_bf16(d_out, out_n), out, TOL_BF16);
    compare(name, "lse", from_device_f32(d_lse, rows), lse, TOL_F32);

    /* the backward reads the GPU's own saved out and lse, the CPU its own. LX_GRAD_ADD adds to
     * dqkv0 (cuDNN's build runs lynx's kernels for it); LX_GRAD_WRITE writes over NaNs (cuDNN's
     * backward in its build), against the twin's sum onto zeros. */
    floats dqkv = dqkv0, written(qkv_n, 0.0f);
    twin_flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, H, KVH,
                                  D, p, seed, stream_id, head_base, heads_total);
    twin_flash_attention_backward(written.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, H, KVH,
                                  D, p, seed, stream_id, head_base, heads_total);
    lx_bf16 *d_dqkv = to_device_bf16(dqkv0);
    lx_flash_attention_backward(&ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, H, KVH, D, p, seed,
                                stream_id, head_base, heads_total, LX_GRAD_ADD);
    snprintf(name, sizeof name, "flash_attention_backward D=%d p=%.1f", D, p);
    compare(name, "dqkv", from_device_bf16(d_dqkv, qkv_n), dqkv, TOL_BF16);
    floats first;
    for (int run = 0; run < 2; run++) {
      CUDA_CHECK(cudaMemcpy(d_dqkv, to_device_bf16(floats(qkv_n, NAN)), qkv_n * sizeof(lx_bf16),
                            cudaMemcpyDeviceToDevice));
      lx_flash_attention_backward(&ctx, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, H, KVH, D, p, seed,
                                  stream_id, head_base, heads_total, LX_GRAD_WRITE);
      floats got = from_device_bf16(d_dqkv, qkv_n);
      if (run == 0) {
        snprintf(name, sizeof name, "flash_attention_backward (written) D=%d p=%.1f", D, p);
        compare(name, "dqkv", got, written, TOL_BF16);
        first = got;
      } else {
        snprintf(name, sizeof name, "flash_attention_backward D=%d p=%.1f is bitwise reproducible", D, p);
        expect_true(name, memcmp(first.data(), got.data(), qkv_n * sizeof(float)) == 0);
      }
    }
  }

  /* materialized: the dropout mask is drawn again by the backward, not stored; a
   * draw that differed from the CPU's would move out and dqkv far past bf16's bound */
  floats probs(scores);
  twin_attention_forward(out.data(), probs.data(), qkv.data(), B, T, H, KVH, D, p, seed, stream_id, head_base,
                         heads_total);
  lx_bf16 *d_probs = to_device_bf16(floats(scores));
  lx_attention_forward(&ctx, d_out, d_probs, d_qkv, B, T, H, KVH, D, p, seed, stream_id, head_base,
                       heads_total);
  snprintf(name, sizeof name, "attention_forward D=%d p=%.1f", D, p);
  compare(name, "out", from_device_bf16(d_out, out_n), out, TOL_BF16);
  compare(name, "probs", from_device_bf16(d_probs, scores), probs, TOL_BF16);
  floats dqkv = dqkv0;
  lx_bf16 *d_dqkv = to_device_bf16(dqkv0);
  twin_attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, H, KVH, D, p, seed,
                          stream_id, head_base, heads_total);
  lx_attention_backward(&ctx, d_dqkv, d_dout, d_qkv, d_probs, B, T, H, KVH, D, p, seed, stream_id, head_base,
                        heads_total);
  snprintf(name, sizeof name, "attention_backward D=%d p=%.1f", D, p);
  compare(name, "dqkv", from_device_bf16(d_dqkv, qkv_n), dqkv, TOL_BF16);

  /* A piece of a recomputation cut by kv heads, into buffers of sentinels: in
   * its query heads the whole call's values bit for bit (the call above) and
   * the CPU twin's within bf16, and every other element left as it was. */
  const int kv_first = KVH / 2, kv_end = KVH, h0 = kv_first * (H / KVH), h1 = kv_end * (H / KVH);
  const float unwritten = -7.0f; /* exact in bf16 */
  const size_t TT = (size_t)T * T;
  auto part = [&](const auto &x, size_t outer, size_t inner, bool inside) {
    return heads_part(x, B, outer, H, inner, h0, h1, inside);
  };
  floats whole_out = from_device_bf16(d_out, out_n), whole_probs = from_device_bf16(d_probs, scores);
  floats piece_out(out_n, unwritten), piece_probs(scores, unwritten);
  twin_attention_forward_heads(piece_out.data(), piece_probs.data(), qkv.data(), B, T, H, KVH, D, p, seed,
                               stream_id, head_base, heads_total, kv_first, kv_end);
  lx_bf16 *d_piece_out = to_device_bf16(floats(out_n, unwritten));
  lx_bf16 *d_piece_probs = to_device_bf16(floats(scores, unwritten));
  lx_attention_forward_heads(&ctx, d_piece_out, d_piece_probs, d_qkv, B, T, H, KVH, D, p, seed, stream_id,
                             head_base, heads_total, kv_first, kv_end);
  floats gpu_out = from_device_bf16(d_piece_out, out_n), gpu_probs = from_device_bf16(d_piece_probs, scores);
  snprintf(name, sizeof name, "attention_forward_heads D=%d p=%.1f kv [%d, %d) of %d", D, p, kv_first, kv_end, KVH);
  compare(name, "out", part(gpu_out, T, D, true), part(piece_out, T, D, true), TOL_BF16);
  compare(name, "probs", part(gpu_probs, 1, TT, true), part(piece_probs, 1, TT, true), TOL_BF16);
  bool whole_bits = same_bits(part(gpu_out, T, D, true), part(whole_out, T, D, true)) &&
                    same_bits(part(gpu_probs, 1, TT, true), part(whole_probs, 1, TT, true));
  bool untouched =
      all_equal(part(gpu_out, T, D, false), unwritten) && all_equal(part(gpu_probs, 1, TT, false), unwritten);
  snprintf(name, sizeof name,
           "attention_forward_heads D=%d p=%.1f kv [%d, %d): its heads' elements are the whole call's, bit for bit", D,
           p, kv_first, kv_end);
  expect_true(name, whole_bits);
  snprintf(name, sizeof name,
           "attention_forward_heads D=%d p=%.1f kv [%d, %d): the other heads' elements are untouched", D, p, kv_first,
           kv_end);
  expect_true(name, untouched);
  /* A recompute that keeps the output: no output, the whole call's probs bit for bit */
  lx_bf16 *d_alone_probs = to_device_bf16(floats(scores, unwritten));
  lx_attention_forward(&ctx, NULL, d_alone_probs, d_qkv, B, T, H, KVH, D, p, seed, stream_id, head_base,
                       heads_total);
  snprintf(name, sizeof name, "attention_forward D=%d p=%.1f without its output: the whole call's probs, bit for bit",
           D, p);
  expect_true(name, same_bits(from_device_bf16(d_alone_probs, scores), whole_probs));
}

static void test_rope(void) {
  const lx_ctx ctx = context(NULL, 0);
  const int B = 2, T = 50, H = 4, KVH = 2, D = 32;
  size_t N = (size_t)B * T * (H + 2 * KVH) * D;
  floats x = random_bf16(N, 1), dout = random_bf16(N, 1), dinp0 = random_bf16(N, 0.1f), out(N), dinp = dinp0;
  lx_bf16 *d_x = to_device_bf16(x), *d_out = to_device_bf16(floats(N)), *d_dout = to_device_bf16(dout);
  lx_bf16 *d_dinp = to_device_bf16(dinp0);
  twin_rope_forward(out.data(), x.data(), B, T, H, KVH, D, 10000.0);
  lx_rope_forward(&ctx, d_out, d_x, B, T, H, KVH, D, 10000.0);
  compare("rope_forward", "out", from_device_bf16(d_out, N), out, TOL_BF16);
  twin_rope_backward(dinp.data(), dout.data(), B, T, H, KVH, D, 10000.0);
  lx_rope_backward(&ctx, d_dinp, d_dout, B, T, H, KVH, D, 10000.0);
  compare("rope_backward", "dinp", from_device_bf16(d_dinp, N), dinp, TOL_BF16);
}

/* ---- elementwise ------------------------------------------------------------------- */

/* shape: how the kernels take the elements, for the test names */
static void test_elementwise(int BT, int F, const char *shape) {
  auto named = [&](const char *op) { return std::string(op) + shape; };
  const lx_ctx ctx = context(NULL, 0);
  size_t N = (size_t)BT * F;
  floats x = random_bf16(2 * N, 3), dout = random_bf16(2 * N, 1), dinp0 = random_bf16(2 * N, 0.1f);
  lx_bf16 *d_x = to_device_bf16(x), *d_out = to_device_bf16(floats(2 * N)), *d_dout = to_device_bf16(dout);

  floats out(2 * N), dinp = dinp0;
  struct map_op {
    const char *forward_name, *backward_name;
    void (*twin_forward)(float *, const float *, size_t);
    void (*twin_backward)(float *, const float *, const float *, size_t);
    void (*forward)(const lx_ctx *, lx_bf16 *, const lx_bf16 *, size_t);
    void (*backward)(const lx_ctx *, lx_bf16 *, const lx_bf16 *, const lx_bf16 *, size_t, lx_grad_mode);
  };
  /* LX_GRAD_WRITE: a backward into NaNs against its twin added to zeros */
  floats zeros(2 * N, 0.0f);
  auto written = [&](const char *op, size_t n, const floats &want, auto launch) {
    lx_bf16 *d_written = to_device_bf16(floats(n, NAN));
    launch(d_written);
    compare(named((std::string(op) + " (written)").c_str()).c_str(), "dinp", from_device_bf16(d_written, n), want,
            TOL_BF16);
  };
  const map_op maps[] = {
      {"gelu_forward", "gelu_backward", twin_gelu_forward, twin_gelu_backward, lx_gelu_forward, lx_gelu_backward},
      {"silu_forward", "silu_backward", twin_silu_forward, twin_silu_backward, lx_silu_forward, lx_silu_backward},
  };
  for (const map_op &m : maps) {
    m.twin_forward(out.data(), x.data(), 2 * N);
    m.forward(&ctx, d_out, d_x, 2 * N);
    compare(named(m.forward_name).c_str(), "out", from_device_bf16(d_out, 2 * N), out, TOL_BF16);
    dinp = dinp0;
    lx_bf16 *d_dinp = to_device_bf16(dinp0);
    m.twin_backward(dinp.data(), dout.data(), x.data(), 2 * N);
    m.backward(&ctx, d_dinp, d_dout, d_x, 2 * N, LX_GRAD_ADD);
    compare(named(m.backward_name).c_str(), "dinp", from_device_bf16(d_dinp, 2 * N), dinp, TOL_BF16);
    floats fresh = zeros;
    m.twin_backward(fresh.data(), dout.data(), x.data(), 2 * N);
    written(m.backward_name, 2 * N, fresh,
            [&](lx_bf16 *d) { m.backward(&ctx, d, d_dout, d_x, 2 * N, LX_GRAD_WRITE); });
  }

  floats swi(N);
  twin_swiglu_forward(swi.data(), x.data(), BT, F);
  lx_swiglu_forward(&ctx, d_out, d_x, BT, F);
  compare(named("swiglu_forward").c_str(), "out", from_device_bf16(d_out, N), swi, TOL_BF16);
  dinp = dinp0;
  lx_bf16 *d_dinp2 = to_device_bf16(dinp0);
  twin_swiglu_backward(dinp.data(), dout.data(), x.data(), BT, F);
  lx_swiglu_backward(&ctx, d_dinp2, d_dout, d_x, BT, F, LX_GRAD_ADD);
  compare(named("swiglu_backward").c_str(), "dinp", from_device_bf16(d_dinp2, 2 * N), dinp, TOL_BF16);
  floats fresh = zeros;
  twin_swiglu_backward(fresh.data(), dout.data(), x.data(), BT, F);
  written("swiglu_backward", 2 * N, fresh,
          [&](lx_bf16 *d) { lx_swiglu_backward(&ctx, d, d_dout, d_x, BT, F, LX_GRAD_WRITE); });

  /* dropout: nothing stored; the mask is where the output is zero and the input not, which
   * must be the CPU's, element for element (the backward draws it again) */
  const double p = 0.3;
  auto dropped_where = [](const floats &y, const float *in, size_t n) {
    std::vector<bool> d(n);
    for (size_t i = 0; i < n; i++)
      d[i] = y[i] == 0 && in[i] != 0;
    return d;
  };
  twin_dropout_forward(out.data(), x.data(), 2 * N, p, 99, 5);
  lx_dropout_forward(&ctx, d_out, d_x, 2 * N, p, 99, 5);
  floats gpu_dropped = from_device_bf16(d_out, 2 * N);
  compare(named("dropout_forward").c_str(), "out", gpu_dropped, out, TOL_BF16);
  expect_true(named("dropout_forward drops the elements the CPU drops").c_str(),
              dropped_where(gpu_dropped, x.data(), 2 * N) == dropped_where(out, x.data(), 2 * N));
  dinp = dinp0;
  lx_bf16 *d_dinp3 = to_device_bf16(dinp0);
  twin_dropout_backward(dinp.data(), dout.data(), 2 * N, p, 99, 5);
  lx_dropout_backward(&ctx, d_dinp3, d_dout, 2 * N, p, 99, 5, LX_GRAD_ADD);
  compare(named("dropout_backward").c_str(), "dinp", from_device_bf16(d_dinp3, 2 * N), dinp, TOL_BF16);
  fresh = zeros; /* the dropped elements' gradient: zeros */
  twin_dropout_backward(fresh.data(), dout.data(), 2 * N, p, 99, 5);
  written("dropout_backward", 2 * N, fresh,
          [&](lx_bf16 *d) { lx_dropout_backward(&ctx, d, d_dout, 2 * N, p, 99, 5, LX_GRAD_WRITE); });
  /* sequence parallelism: the second half as a shard draws the whole tensor's mask from counter N */
  floats shard_out(N);
  twin_dropout_forward_at(shard_out.data(), x.data() + N, N, p, 99, 5, N);
  lx_dropout_forward_at(&ctx, d_out, d_x + N, N, p, 99, 5, N);
  floats gpu_shard = from_device_bf16(d_out, N);
  compare(named("dropout_forward_at").c_str(), "out", gpu_shard, shard_out, TOL_BF16);
  std::vector<bool> whole_dropped = dropped_where(out, x.data(), 2 * N),
                    shard_dropped = dropped_where(shard_out, x.data() + N, N);
  expect_true(named("dropout_forward_at drops the CPU's elements, the whole tensor's second half").c_str(),
              dropped_where(gpu_shard, x.data() + N, N) == shard_dropped &&
                  std::vector<bool>(whole_dropped.begin() + N, whole_dropped.end()) == shard_dropped);
  lx_bf16 *d_shard_dinp = to_device_bf16(floats(N));
  lx_dropout_backward_at(&ctx, d_shard_dinp, d_dout + N, N, p, 99, 5, N, LX_GRAD_ADD);
  floats shard_dinp(dinp.begin() + N, dinp.end()), shard_want(N);
  for (size_t i = 0; i < N; i++)
    shard_want[i] = shard_dinp[i] - dinp0[N + i]; /* the whole backward's second half, added to zeros */
  compare(named("dropout_backward_at").c_str(), "dinp", from_device_bf16(d_shard_dinp, N), shard_want,
          TOL_BF16);

  /* residual add: the backward into one buffer twice (add(x, x)) */
  floats sum(2 * N), da = dinp0;
  for (size_t i = 0; i < 2 * N; i++)
    sum[i] = x[i] + dout[i], da[i] += 2 * dout[i];
  lx_add_forward(&ctx, d_out, d_x, d_dout, 2 * N);
  compare(named("add_forward").c_str(), "out", from_device_bf16(d_out, 2 * N), sum, TOL_BF16);
  lx_bf16 *d_da = to_device_bf16(dinp0);
  lx_add_backward(&ctx, d_da, d_da, d_dout, 2 * N, LX_GRAD_ADD, LX_GRAD_ADD);
  compare(named("add_backward (aliased)").c_str(), "da", from_device_bf16(d_da, 2 * N), da, TOL_BF16);
  /* each input its own mode: a added to dinp0, b written over NaNs */
  floats added = dinp0;
  for (size_t i = 0; i < 2 * N; i++)
    added[i] += dout[i];
  lx_bf16 *d_added = to_device_bf16(dinp0);
  written("add_backward", 2 * N, dout,
          [&](lx_bf16 *d) { lx_add_backward(&ctx, d_added, d, d_dout, 2 * N, LX_GRAD_ADD, LX_GRAD_WRITE); });
  compare(named("add_backward (added)").c_str(), "da", from_device_bf16(d_added, 2 * N), added, TOL_BF16);
}

/* ---- embeddings and loss -------------------------------------------------------------- */

static void test_embedding(void) {
  const lx_ctx ctx = context(NULL, 0);
  const int B = 3, T = 40, C = 96, V = 150;
  floats wte = random_bf16((size_t)V * C, 1), wpe = random_bf16((size_t)T * C, 1);
  floats dout = random_bf16((size_t)B * T * C, 1), dwte0 = random_bf16((size_t)V * C, 0.1f);
  floats dwpe0 = random_bf16((size_t)T * C, 0.1f);
  std::vector<int> tokens(B * T);
  for (int r = 0; r < B * T; r++) /* a small id range, so that ids repeat */
    tokens[r] = (int)((uniform_pm1() + 1) * 10) % 20 + (r % 2) * 100;
  lx_bf16 *d_wte = to_device_bf16(wte), *d_wpe = to_device_bf16(wpe), *d_dout = to_device_bf16(dout);
  lx_bf16 *d_out = to_device_bf16(floats((size_t)B * T * C));
  int *d_tokens = to_device_raw(tokens);
  float *d_dwte = to_device_f32(dwte0), *d_dwpe = to_device_f32(dwpe0);

  floats out((size_t)B * T * C), dwte = dwte0, dwpe = dwpe0;
  twin_embedding_forward(out.data(), tokens.data(), wte.data(), B, T, C, V);
  lx_embedding_forward(&ctx, d_out, d_tokens, d_wte, B, T, C, V);
  compare("embedding_forward", "out", from_device_bf16(d_out, out.size()), out, 0);
  twin_embedding_backward(dwte.data(), dout.data(), tokens.data(), B, T, C, V);
  lx_embedding_backward(&ctx, d_dwte, d_dout, d_tokens, B, T, C, V);
  compare("embedding_backward", "dwte", from_device_f32(d_dwte, dwte.size()), dwte, TOL_F32);

  twin_position_embedding_forward(out.data(), wpe.data(), B, T, C);
  lx_position_embedding_forward(&ctx, d_out, d_wpe, B, T, C);
  compare("position_embedding_forward", "out", from_device_bf16(d_out, out.size()), out, 0);
  twin_position_embedding_backward(dwpe.data(), dout.data(), B, T, C);
  lx_position_embedding_backward(&ctx, d_dwpe, d_dout, B, T, C);
  compare("position_embedding_backward", "dwpe", from_device_f32(d_dwpe, dwpe.size()), dwpe, TOL_F32);
  /* sequence parallelism: a shard of 50 rows from row 70 (positions 30 .. 39, 0 .. 39) */
  const int pos_first = 70, pos_rows = 50;
  floats pos_out((size_t)pos_rows * C);
  twin_position_embedding_forward_rows(pos_out.data(), wpe.data(), T, C, pos_first, pos_rows);
  lx_position_embedding_forward_rows(&ctx, d_out, d_wpe, T, C, pos_first, pos_rows);
  compare("position_embedding_forward_rows", "out", from_device_bf16(d_out, pos_out.size()), pos_out, 0);
  twin_position_embedding_backward_rows(dwpe.data(), dout.data(), T, C, pos_first, pos_rows);
  lx_position_embedding_backward_rows(&ctx, d_dwpe, d_dout, T, C, pos_first, pos_rows);
  compare("position_embedding_backward_rows", "dwpe", from_device_f32(d_dwpe, dwpe.size()), dwpe, TOL_F32);

  /* a vocabulary-parallel rank's rows 64 .. 127 of the table */
  const int first = 64, rows = 64;
  floats shard(wte.begin() + (size_t)first * C, wte.begin() + (size_t)(first + rows) * C);
  floats dshard0(dwte0.begin(), dwte0.begin() + (size_t)rows * C), dshard = dshard0;
  lx_bf16 *d_shard = to_device_bf16(shard);
  float *d_dshard = to_device_f32(dshard0);
  twin_embedding_forward_shard(out.data(), tokens.data(), shard.data(), B, T, C, V, first, rows);
  lx_embedding_forward_shard(&ctx, d_out, d_tokens, d_shard, B, T, C, V, first, rows);
  compare("embedding_forward_shard", "out", from_device_bf16(d_out, out.size()), out, 0);
  twin_embedding_backward_shard(dshard.data(), dout.data(), tokens.data(), B, T, C, V, first, rows);
  lx_embedding_backward_shard(&ctx, d_dshard, d_dout, d_tokens, B, T, C, V, first, rows);
  compare("embedding_backward_shard", "dwte", from_device_f32(d_dshard, dshard.size()), dshard, TOL_F32);

  int *d_bad = to_device_raw(std::vector<int>(1, 0));
  lx_cuda_check_tokens(d_bad, d_tokens, B * T, V, stream);
  expect_true("check_tokens accepts ids in range", from_device_raw(d_bad, 1)[0] == 0);
  lx_cuda_check_tokens(d_bad, d_tokens, B * T, 50, stream);
  expect_true("check_tokens flags an id out of range", from_device_raw(d_bad, 1)[0] == 1);
}

static void test_loss(void) {
  const int BT = 21, V = 300, Vp = 320;
  floats logits = random_bf16((size_t)BT * Vp, 4), dlogits0 = random_bf16((size_t)BT * Vp, 0.01f);
  std::vector<int> targets(BT);
  for (int r = 0; r < BT; r++)
    targets[r] = (r * 37) % V;
  lx_bf16 *d_logits = to_device_bf16(logits), *d_dlogits = to_device_bf16(dlogits0);
  int *d_targets = to_device_raw(targets);
  float *d_loss = device_zeros_f32(1), *d_lse = device_zeros_f32(BT), *d_losses = device_zeros_f32(BT);
  const lx_ctx ctx = context(d_losses, BT); /* the loss kernels' scratch: the rows' losses */

  floats lse(BT), dlogits = dlogits0;
  floats loss(1, twin_cross_entropy_forward(lse.data(), logits.data(), targets.data(), BT, V, Vp));
  lx_cross_entropy_forward(&ctx, d_loss, d_lse, d_logits, d_targets, BT, V, Vp);
  compare("cross_entropy_forward", "loss", from_device_f32(d_loss, 1), loss, TOL_F32);
  compare("cross_entropy_forward", "lse", from_device_f32(d_lse, BT), lse, TOL_F32);
  twin_cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0.5f, BT, V, Vp);
  lx_cross_entropy_backward(&ctx, d_dlogits, d_logits, d_lse, d_targets, 0.5f, BT, V, Vp, LX_GRAD_ADD);
  compare("cross_entropy_backward", "dlogits", from_device_bf16(d_dlogits, dlogits.size()), dlogits, TOL_BF16);
  /* LX_GRAD_WRITE over NaNs: the gradient and zero padding (the twin adds to zeros) */
  floats written((size_t)BT * Vp, 0.0f);
  twin_cross_entropy_backward(written.data(), logits.data(), lse.data(), targets.data(), 0.5f, BT, V, Vp);
  lx_bf16 *d_written = to_device_bf16(floats(written.size(), NAN));
  lx_cross_entropy_backward(&ctx, d_written, d_logits, d_lse, d_targets, 0.5f, BT, V, Vp, LX_GRAD_WRITE);
  compare("cross_entropy_backward (written)", "dlogits", from_device_bf16(d_written, written.size()), written,
          TOL_BF16);
  lx_bf16 *d_dlogits2 = to_device_bf16(dlogits0);
  lx_cross_entropy_forward_backward(&ctx, d_loss, d_lse, d_dlogits2, d_logits, d_targets, 0.5f, BT, V, Vp);
  compare("cross_entropy_forward_backward", "loss", from_device_f32(d_loss, 1), loss, TOL_F32);
  compare("cross_entropy_forward_backward", "dlogits", from_device_bf16(d_dlogits2, dlogits.size()), dlogits,
          TOL_BF16);

  /* The same micro-batch as two mini-sequences of 13 and 8 rows: the first
   * overwrites a stale loss, the second adds its share; both over BT. */
  const int CHUNKS = 2, chunk[CHUNKS] = {13, 8};
  float *d_loss_rows = to_device_f32(floats(1, 1000.0f)), *d_lse_rows = device_zeros_f32(BT);
  lx_bf16 *d_dlogits_rows = to_device_bf16(dlogits0);
  for (int k = 0, first = 0; k < CHUNKS; k++) {
    size_t at = (size_t)first * Vp;
    lx_cross_entropy_forward_rows(&ctx, d_loss_rows, k > 0, d_lse_rows + first, d_logits + at,
                                  d_targets + first, chunk[k], BT, V, Vp);
    lx_cross_entropy_backward_rows(&ctx, d_dlogits_rows + at, d_logits + at, d_lse_rows + first,
                                   d_targets + first, 0.5f, chunk[k], BT, V, Vp, LX_GRAD_ADD);
    first += chunk[k];
  }
  compare("cross_entropy_forward_rows (13 + 8)", "loss", from_device_f32(d_loss_rows, 1), loss, TOL_F32);
  compare("cross_entropy_forward_rows (13 + 8)", "lse", from_device_f32(d_lse_rows, BT), lse, TOL_F32);
  compare("cross_entropy_backward_rows (13 + 8)", "dlogits", from_device_bf16(d_dlogits_rows, dlogits.size()),
          dlogits, TOL_BF16);
}

/* The vocabulary-parallel cross-entropy of two ranks (the second holds the
 * padding), the all-reduces done on the host, against the whole loss on
 * the CPU; the backward of each slice against lx_cross_entropy_backward_slice. */
static void test_vocab_parallel(void) {
  const lx_ctx ctx = context(NULL, 0);
  const int BT = 21, V = 300, Vp = 320, RANKS = 2, Vr = Vp / RANKS;
  floats logits = random_bf16((size_t)BT * Vp, 4), dslice0 = random_bf16((size_t)BT * Vr, 0.01f);
  std::vector<int> targets(BT);
  for (int r = 0; r < BT; r++)
    targets[r] = (r * 37) % V;
  floats lse(BT), loss(1, twin_cross_entropy_forward(lse.data(), logits.data(), targets.data(), BT, V, Vp));
  int *d_targets = to_device_raw(targets);
  lx_bf16 *d_slice[RANKS];
  floats slice[RANKS], row_max(BT, -INFINITY), picked(BT, 0.0f), sums(BT, 0.0f);
  float *d_max = device_zeros_f32(BT), *d_picked = device_zeros_f32(BT), *d_sums = device_zeros_f32(BT);
  for (int k = 0; k < RANKS; k++) {
    slice[k] = floats((size_t)BT * Vr);
    for (int r = 0; r < BT; r++)
      for (int v = 0; v < Vr; v++)
        slice[k][(size_t)r * Vr + v] = logits[(size_t)r * Vp + k * Vr + v];
    d_slice[k] = to_device_bf16(slice[k]);
    lx_cuda_vocab_cross_entropy_max(d_max, d_picked, d_slice[k], d_targets, BT, V, Vr, k * Vr, stream);
    floats part_max = from_device_f32(d_max, BT), part_picked = from_device_f32(d_picked, BT);
    for (int r = 0; r < BT; r++)
      row_max[r] = fmaxf(row_max[r], part_max[r]), picked[r] += part_picked[r];
  }
  float *d_row_max = to_device_f32(row_max);
  for (int k = 0; k < RANKS; k++) {
    lx_cuda_vocab_cross_entropy_sum(d_sums, d_slice[k], d_row_max, BT, V, Vr, k * Vr, stream);
    floats part = from_device_f32(d_sums, BT);
    for (int r = 0; r < BT; r++)
      sums[r] += part[r];
  }
  float *d_lse = to_device_f32(sums), *d_all_picked = to_device_f32(picked), *d_loss = device_zeros_f32(1);
  float *d_losses = device_zeros_f32(BT);
  lx_cuda_vocab_cross_entropy_finish(d_loss, 0, d_lse, d_losses, d_row_max, d_all_picked, BT, BT, stream);
  compare("vocab_cross_entropy (2 slices)", "loss", from_device_f32(d_loss, 1), loss, TOL_F32);
  compare("vocab_cross_entropy (2 slices)", "lse", from_device_f32(d_lse, BT), lse, TOL_F32);
  /* the finish of two mini-sequences (13 + 8 rows) adds up to the same loss */
  float *d_lse_rows = to_device_f32(sums), *d_loss_rows = to_device_f32(floats(1, 1000.0f));
  lx_cuda_vocab_cross_entropy_finish(d_loss_rows, 0, d_lse_rows, d_losses, d_row_max, d_all_picked, 13, BT,
                                     stream);
  lx_cuda_vocab_cross_entropy_finish(d_loss_rows, 1, d_lse_rows + 13, d_losses, d_row_max + 13,
                                     d_all_picked + 13, 8, BT, stream);
  compare("vocab_cross_entropy_finish (13 + 8)", "loss", from_device_f32(d_loss_rows, 1), loss, TOL_F32);
  compare("vocab_cross_entropy_finish (13 + 8)", "lse", from_device_f32(d_lse_rows, BT), lse, TOL_F32);
  for (int k = 0; k < RANKS; k++) {
    floats dslice = dslice0;
    twin_cross_entropy_backward_slice(dslice.data(), slice[k].data(), lse.data(), targets.data(), 0.5f, BT, V,
                                      Vr, k * Vr);
    lx_bf16 *d_dslice = to_device_bf16(dslice0);
    lx_cross_entropy_backward_slice(&ctx, d_dslice, d_slice[k], d_lse, d_targets, 0.5f, BT, V, Vr, k * Vr, LX_GRAD_ADD);
    compare(k ? "cross_entropy_backward_slice (second)" : "cross_entropy_backward_slice (first)", "dlogits",
            from_device_bf16(d_dslice, dslice.size()), dslice, TOL_BF16);
  }
}

/* ---- optimizer ---------------------------------------------------------------------------- */

static void test_adamw(void) {
  const size_t N = 100003;
  floats params = random_bf16(N, 1), grads = random_bf16(N, 0.1f), m = random_bf16(N, 0.01f), v(N);
  for (size_t i = 0; i < N; i++)
    v[i] = fabsf(random_bf16(1, 0.001f)[0]);
  lx_bf16 *d_params = to_device_bf16(params);
  float *d_master = to_device_f32(params), *d_grads = to_device_f32(grads), *d_m = to_device_f32(m);
  float *d_v = to_device_f32(v), *d_norm = device_zeros_f32(1), *d_factor = device_zeros_f32(1);
  float *scratch = device_zeros_f32(lx_cuda_grad_norm_scratch_floats());

  floats norm(1, (float)twin_grad_norm_squared(grads.data(), N));
  lx_cuda_grad_norm_squared(d_norm, scratch, d_grads, N, 0, stream);
  floats gpu_norm = from_device_f32(d_norm, 1);
  compare("grad_norm_squared", "sum", gpu_norm, norm, TOL_F32);
  lx_cuda_grad_norm_squared(d_norm, scratch, d_grads, N, 0, stream);
  expect_true("grad_norm_squared is bitwise reproducible", from_device_f32(d_norm, 1)[0] == gpu_norm[0]);

  /* clip to half the norm: factor, then AdamW with the factor folded in */
  double max_norm = 0.5 * sqrt((double)norm[0]);
  floats factor(1, (float)twin_grad_clip_factor(sqrt((double)norm[0]), max_norm));
  lx_cuda_grad_clip_factor(d_factor, d_norm, max_norm, stream);
  compare("grad_clip_factor", "factor", from_device_f32(d_factor, 1), factor, TOL_F32);
  floats scaled = grads;
  for (size_t i = 0; i < N; i++)
    scaled[i] *= factor[0];
  float *d_scaled = to_device_f32(grads);
  lx_cuda_scale(d_scaled, d_factor, N, stream);
  compare("scale", "x", from_device_f32(d_scaled, N), scaled, 1e-6);

  lx_cuda_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
  twin_adamw_update(params.data(), scaled.data(), m.data(), v.data(), N, 3e-4, hp.beta1, hp.beta2, hp.eps,
                    hp.weight_decay, 3);
  lx_cuda_adamw_update(d_params, d_master, d_grads, d_m, d_v, d_factor, N, 3e-4, hp, 3, stream);
  compare("adamw_update", "master", from_device_f32(d_master, N), params, 1e-5);
  compare("adamw_update", "params", from_device_bf16(d_params, N), params, TOL_BF16);
  compare("adamw_update", "m", from_device_f32(d_m, N), m, 1e-5);
  compare("adamw_update", "v", from_device_f32(d_v, N), v, 1e-5);
}

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    return 0;
  }
  int nccl_version = 0;
  NCCL_CHECK(ncclGetVersion(&nccl_version));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("# %s (sm_%d%d), NCCL %d\n", prop.name, prop.major, prop.minor, nccl_version);
  CUDA_CHECK(cudaStreamCreate(&stream));
  void *workspace;
  CUDA_CHECK(cudaMalloc(&workspace, LX_CUDA_MATMUL_WORKSPACE_BYTES));
  lx_cuda_matmul_init(&matmul, workspace, LX_CUDA_MATMUL_WORKSPACE_BYTES);

  test_linear();
  test_lora_linear(twin_lora_dropout{0, 0, 0, 0, 64});
  test_lora_linear(twin_lora_dropout{0.25, 3, 11, 64, 128});
  test_norms(301, 200, " (8 a load)"); /* two chunks of the column reductions, the second partial */
  test_norms(37, 100, " (one a load)"); /* 100: not a multiple of 8 */
  test_attention(2, 67, 4, 2, 64, 0.0, 0, 4);
  test_attention(2, 67, 4, 2, 64, 0.2, 0, 4);
  test_attention(2, 67, 4, 2, 64, 0.2, 4, 12); /* tensor parallelism: the second rank's heads of three */
  test_attention(1, 45, 6, 3, 40, 0.1, 0, 6);  /* head size not a multiple of 32 */
  test_attention(1, 33, 2, 1, 128, 0.0, 0, 2); /* the D <= 128 kernels */
  test_attention(1, 20, 2, 2, 256, 0.1, 0, 2); /* the D <= 256 kernels (opt-in shared memory) */
  test_attention(1, 520, 4, 2, 64, 0.1, 0, 4); /* three row blocks of the materialized form, 8-wide pieces */
  test_attention(1, 520, 4, 2, 64, 0.1, 4,
                 12); /* ... on the second rank of three: the 8-wide draws at a head base */
  test_rope();
  test_elementwise(33, 160, " (8 a load)");
  test_elementwise(33, 157, " (one a load)"); /* odd: the second half's tensors are not 16-byte aligned */
  test_embedding();
  test_loss();
  test_vocab_parallel();
  test_adamw();

  lx_cuda_matmul_destroy(&matmul);
  printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
