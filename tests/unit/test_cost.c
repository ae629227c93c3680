/* test_cost.c — the cost model against closed forms computed here, from the
 * model's shapes and the datasheet figures, not from the IR's annotations. */
#define _POSIX_C_SOURCE 200809L /* glob */
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analyze.h"
#include "check.h"
#include "analysis/cost.h"
#include "diag.h"
#include "frontend/frontend.h"

static const char *GPT13B = "examples/gpt13b.model";

/* gpt13b.model's shapes: micro-batch 4, sequence 2048, hidden 2048, 16 heads. */
static const double B = 4, S = 2048, H = 2048, HEADS = 16;

static char *read_text(const char *path) {
  FILE *in = fopen(path, "rb");
  if (!in) return NULL;
  fseek(in, 0, SEEK_END);
  long n = ftell(in);
  fseek(in, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  size_t got = fread(text, 1, (size_t)n, in);
  text[got] = 0;
  fclose(in);
  return text;
}

/* Returns a copy of text with every `from` replaced by `to`. */
static char *replace_all(const char *text, const char *from, const char *to) {
  size_t n = 0, lf = strlen(from), lt = strlen(to);
  for (const char *c = strstr(text, from); c; c = strstr(c + lf, from)) n++;
  char *out = malloc(strlen(text) + n * (lt > lf ? lt - lf : 0) + 1), *w = out;
  for (const char *c = text;;) {
    const char *hit = strstr(c, from);
    size_t keep = hit ? (size_t)(hit - c) : strlen(c);
    memcpy(w, c, keep);
    w += keep;
    if (!hit) break;
    memcpy(w, to, lt);
    w += lt;
    c = hit + lf;
  }
  *w = 0;
  return out;
}

/* Parses and analyses a model file, with one textual substitution (or none). */
static bool load_model(const char *path, const char *from, const char *to, lx_ir *ir) {
  char *text = read_text(path);
  if (!text) return false;
  char *edited = from ? replace_all(text, from, to) : text;
  lx_ir_init(ir);
  int errors = lx_parse_model(path, edited, strlen(edited), ir);
  if (!errors) errors = lx_analyze(ir);
  if (edited != text) free(edited);
  free(text);
  return errors == 0;
}

static const lx_op *op_named(const lx_graph *g, const char *name) {
  for (int i = 0; i < g->n_ops; i++)
    if (!strcmp(g->ops[i].name, name)) return &g->ops[i];
  return NULL;
}

static void test_hardware_tables(void) {
  for (int k = LX_GPU_V100_32GB; k <= LX_GPU_H200_141GB; k++) {
    const lx_gpu_spec *g = lx_gpu_spec_of((lx_gpu)k);
    CHECK(g && !strcmp(g->name, lx_gpu_name((lx_gpu)k)) && g->memory_bytes > 0 && g->tensor_flops > g->fp32_flops &&
              g->fp32_flops > 0 && g->hbm_bytes_per_s > 0 && lx_link_spec_of(g->nvlink) && g->source && *g->source,
          "GPU %s has positive figures, an NVLink and a source", lx_gpu_name((lx_gpu)k));
  }
  for (int k = LX_LINK_NVLINK2; k <= LX_LINK_IB_NDR; k++) {
    const lx_link_spec *l = lx_link_spec_of((lx_link)k);
    CHECK(l && !strcmp(l->name, lx_link_name((lx_link)k)) && l->bytes_per_s > 0 && l->latency_s > 0 && l->source &&
              *l->source,
          "link %s has a bandwidth, a latency and a source", lx_link_name((lx_link)k));
  }
  CHECK(!lx_gpu_spec_of(LX_GPU_NONE) && !lx_link_spec_of(LX_LINK_NONE), "no spec for 'none'");
  const lx_gpu_spec *a100 = lx_gpu_spec_of(LX_GPU_A100_80GB);
  CHECK(a100->tensor_flops == 312e12 && a100->fp32_flops == 19.5e12 && a100->hbm_bytes_per_s == 2039e9,
        "A100-80GB datasheet: 312 TFLOP/s bf16, 19.5 fp32, 2039 GB/s");
  CHECK(lx_gpu_spec_of(LX_GPU_H100_80GB)->tensor_flops == 989e12, "H100 datasheet: 989 TFLOP/s bf16 dense");
}

static void test_gemm_and_elementwise(const lx_ir *ir, const lx_cost_model *cm) {
  CHECK(!strcmp(cm->gpu.name, "A100-SXM4-80GB") && !strcmp(cm->intra.name, "nvlink3") &&
            !strcmp(cm->inter.name, "ib-hdr"),
        "gpt13b: A100-80GB, NVLink 3 inside a node, HDR between nodes");
  const lx_graph *g = &ir->block;
  const lx_op *qkv = op_named(g, "linear_0");
  double flops = 2 * (B * S) * H * (3 * H);
  double peak = 312e12, eff = cm->matmul_efficiency;
  CHECK(eff >= 0.75 && eff <= 0.8, "large-GEMM efficiency %.2f is in [0.75, 0.80]", eff);
  CHECK_CLOSE(lx_cost_op_fwd(cm, ir, g, qkv), flops / (eff * peak) + cm->launch_s, 1e-12,
              "qkv GEMM (8192 x 2048 x 6144) forward = flops / (eff x peak) + launch");
  CHECK_CLOSE(lx_cost_op_bwd(cm, ir, g, qkv), 2 * flops / (eff * peak) + 2 * cm->launch_s, 1e-12,
              "qkv GEMM backward = two GEMMs of the forward's size + two launches");

  const lx_op *gelu = op_named(g, "gelu_0");
  double bytes = 2 * (B * S * 4 * H * 2); /* read the 4h-wide bf16 input, write the output */
  double hbm = 2039e9;
  CHECK(10 * B * S * 4 * H / (cm->vector_efficiency * 19.5e12) < bytes / (cm->memory_efficiency * hbm),
        "gelu's arithmetic takes less time than its traffic");
  CHECK_CLOSE(lx_cost_op_fwd(cm, ir, g, gelu), bytes / (cm->memory_efficiency * hbm) + cm->launch_s, 1e-12,
              "gelu forward is bandwidth-bound: bytes / (mem_eff x HBM) + launch");
  CHECK_CLOSE(lx_cost_op_bwd(cm, ir, g, gelu), 1.5 * bytes / (cm->memory_efficiency * hbm) + cm->launch_s, 1e-12,
              "gelu backward reads grad and saved input, writes the input grad");
}

static void test_skinny_gemm(const lx_cost_model *cm) {
  double eff = cm->matmul_efficiency, knee = cm->skinny_gemm_knee;
  CHECK_CLOSE(lx_cost_gemm_efficiency(cm, 8192, 8192, 8192), eff, 1e-15, "a large GEMM keeps the full efficiency");
  CHECK_CLOSE(lx_cost_gemm_efficiency(cm, 8192, 8192, knee), eff, 1e-15, "no loss at the knee");
  CHECK_CLOSE(lx_cost_gemm_efficiency(cm, 8192, knee / 2, 8192), eff * 2 * 0.5 / 1.5, 1e-15,
              "half the knee: 2x/(1+x) = 2/3 of the efficiency");
  CHECK(lx_cost_gemm_efficiency(cm, 64, 8192, 8192) < lx_cost_gemm_efficiency(cm, 256, 8192, 8192),
        "a skinnier GEMM is less efficient");
}

static void test_fp32_uses_fp32_peak(void) {
  lx_ir ir;
  lx_cost_model cm;
  bool ok = load_model(GPT13B, "DTYPE_BF16", "DTYPE_FP32", &ir) && lx_cost_model_init(&cm, &ir, NULL);
  CHECK(ok, "gpt13b in fp32 loads");
  if (!ok) return;
  double flops = 2 * (B * S) * H * (3 * H);
  CHECK_CLOSE(lx_cost_op_fwd(&cm, &ir, &ir.block, op_named(&ir.block, "linear_0")),
              flops / (cm.matmul_efficiency * 19.5e12) + cm.launch_s, 1e-12,
              "an fp32 GEMM runs at the fp32 peak, not the tensor peak");
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

static void test_collectives(const lx_cost_model *cm) {
  double sz = 64e6, bw = cm->intra.bytes_per_s, a = cm->intra.latency_s;
  int n = 8;
  CHECK_CLOSE(lx_cost_p2p(cm, (int64_t)sz, false), sz / bw + a, 1e-12, "p2p = S/B + alpha");
  CHECK_CLOSE(lx_cost_allreduce(cm, (int64_t)sz, n, false), 2.0 * (n - 1) / n * sz / bw + 2 * (n - 1) * a, 1e-12,
              "ring all-reduce = 2(n-1)/n S/B + 2(n-1) alpha");
  CHECK_CLOSE(lx_cost_reduce_scatter(cm, (int64_t)sz, n, false), 1.0 * (n - 1) / n * sz / bw + (n - 1) * a, 1e-12,
              "reduce-scatter = (n-1)/n S/B + (n-1) alpha");
  CHECK_CLOSE(lx_cost_all_gather(cm, (int64_t)sz, n, false), 1.0 * (n - 1) / n * sz / bw + (n - 1) * a, 1e-12,
              "all-gather = (n-1)/n S/B + (n-1) alpha");
  double ib = cm->inter.bytes_per_s, ia = cm->inter.latency_s;
  CHECK_CLOSE(lx_cost_allreduce(cm, (int64_t)sz, 4, true), 2.0 * 3 / 4 * sz / ib + 6 * ia, 1e-12,
              "cross-node all-reduce uses the inter-node link");
  CHECK(lx_cost_allreduce(cm, (int64_t)sz, 1, false) == 0 && lx_cost_p2p(cm, 0, false) == 0,
        "one rank or no bytes: no communication");

  lx_cost_model fast = *cm;
  fast.intra.bytes_per_s *= 2;
  double slow_term = lx_cost_allreduce(cm, (int64_t)sz, n, false) - 2 * (n - 1) * a;
  double fast_term = lx_cost_allreduce(&fast, (int64_t)sz, n, false) - 2 * (n - 1) * a;
  CHECK_CLOSE(fast_term, slow_term / 2, 1e-12, "doubling the bandwidth halves the bandwidth term");
  CHECK_CLOSE(lx_cost_p2p(&fast, (int64_t)sz, false) - a, (lx_cost_p2p(cm, (int64_t)sz, false) - a) / 2, 1e-12,
              "... of a p2p transfer too");
}

static void test_profile_overrides(const lx_ir *ir) {
  lx_cost_model cm;
  lx_cost_model_init(&cm, ir, NULL);
  const lx_graph *g = &ir->block;
  const lx_op *qkv = op_named(g, "linear_0"), *proj = op_named(g, "linear_1"), *attn = op_named(g, "attention_0");
  double proj_fwd = lx_cost_op_fwd(&cm, ir, g, proj);
  const char *profile = "# measured on a DGX A100\n"
                        "op linear 8192 2048 6144 bf16 1.5 3.25   # qkv\n"
                        "op attention 8192 6144 2048 bf16 9 9 impl=flash\n"
                        "op attention 8192 6144 2048 bf16 2.5 6 seq=2048 heads=16 impl=materialized\n"
                        "link nvlink3 100 10\n"
                        "interference 1.3\n";
  bool ok = lx_cost_load_profile(&cm, "dgx.prof", profile);
  CHECK(ok && cm.n_profile == 3, "a well-formed profile loads");
  CHECK_CLOSE(lx_cost_op_fwd(&cm, ir, g, qkv), 1.5e-3, 1e-15, "a profile entry overrides the forward time");
  CHECK_CLOSE(lx_cost_op_bwd(&cm, ir, g, qkv), 3.25e-3, 1e-15, "... and the backward time");
  CHECK(lx_cost_op_fwd(&cm, ir, g, proj) == proj_fwd, "an op of another shape keeps the model's time");
  CHECK_CLOSE(lx_cost_op_fwd(&cm, ir, g, attn), 2.5e-3, 1e-15,
              "attributes pick the entry of the op's implementation, heads and sequence");
  CHECK_CLOSE(lx_cost_p2p(&cm, 1000000000, false), 1e9 / 100e9 + 10e-6, 1e-12, "a link line overrides the link");
  CHECK(cm.interference == 1.3, "an interference line sets the factor");
  lx_cost_model_free(&cm);
}

/* In mini-sequences a profile times one piece's call, keyed by its tokens:
 * gpt13b's micro-batch of 4 x 2048 tokens in 4 pieces of 2048. The op takes
 * 4 calls forward; the MLP's first linear, whose output exists one piece at
 * a time, runs its forward again in the backward. */
static void test_profile_of_pieces(void) {
  lx_ir ir;
  bool ok = load_model(GPT13B, ".micro_batch = 4,", ".micro_batch = 4, .mini_sequences = 4,", &ir);
  CHECK(ok, "gpt13b in 4 mini-sequences loads");
  if (!ok) return;
  lx_cost_model cm;
  lx_cost_model_init(&cm, &ir, NULL);
  const lx_graph *g = &ir.block;
  const lx_op *up = op_named(g, "linear_2"), *down = op_named(g, "linear_3");
  const char *profile = "op linear 2048 2048 8192 bf16 1 2\n"
                        "op linear 2048 8192 2048 bf16 1.5 3\n";
  ok = lx_cost_load_profile(&cm, "pieces.prof", profile) && up && down && up->chunks == 4;
  CHECK(ok, "a profile of one piece's calls loads");
  if (ok) {
    CHECK_CLOSE(lx_cost_op_fwd(&cm, &ir, g, up), 4 * 1e-3, 1e-15, "forward: 4 pieces of the measured call");
    CHECK_CLOSE(lx_cost_op_bwd(&cm, &ir, g, up), 4 * (2e-3 + 1e-3), 1e-15,
                "backward of a maker of chunk-local pieces: 4 x (its backward + its forward again)");
    CHECK_CLOSE(lx_cost_op_bwd(&cm, &ir, g, down), 4 * 3e-3, 1e-15,
                "backward of the run's last linear (whole output): 4 x its backward");
  }
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

static bool error_output_starts_with(FILE *sink, const char *want) {
  char got[512] = "";
  rewind(sink);
  size_t n = fread(got, 1, sizeof got - 1, sink);
  got[n] = 0;
  bool ok = !strncmp(got, want, strlen(want));
  if (!ok) printf("     diagnostic was: %s", got);
  return ok;
}

static void check_malformed(const lx_ir *ir, const char *profile, const char *want, const char *why) {
  lx_cost_model cm;
  lx_cost_model_init(&cm, ir, NULL);
  FILE *sink = tmpfile();
  lx_diag_set_sink(sink);
  int errors_before = lx_error_count();
  bool ok = lx_cost_load_profile(&cm, "bad.prof", profile);
  lx_diag_set_sink(NULL);
  CHECK(!ok && lx_error_count() > errors_before && cm.n_profile == 0, "malformed profile is rejected: %s", why);
  CHECK(error_output_starts_with(sink, want), "located error '%s' for %s", want, why);
  fclose(sink);
  lx_cost_model_free(&cm);
}

static void test_malformed_profiles(const lx_ir *ir) {
  check_malformed(ir, "# header\nop linear 8192 2048 x6144 bf16 1 2\n", "bad.prof:2:21: error: expected a positive integer",
                  "a bad width");
  check_malformed(ir, "op linear 8192 2048 6144 bf16 1\n", "bad.prof:1:1: error: too few fields", "a missing time");
  check_malformed(ir, "\n\n  opp linear\n", "bad.prof:3:3: error: unknown directive 'opp'", "an unknown directive");
  check_malformed(ir, "op convolution 1 1 1 bf16 1 1\n", "bad.prof:1:4: error: unknown op kind", "an unknown kind");
  check_malformed(ir, "op gelu 1 1 1 bf16 1 -1\n",
                  "bad.prof:1:22: error: expected 0 or a number from 1e-9 to 1e9", "a negative time");
  /* a time this large made the step infinite, and the trace's tick loop never ended */
  check_malformed(ir, "op gelu 128 256 256 fp32 1e308 1\n", "bad.prof:1:26: error: expected 0 or a number",
                  "a time beyond 1e9 ms");
  check_malformed(ir, "link nvlink3 1e-300 1\n", "bad.prof:1:14: error: expected a number from 1e-9 to 1e9",
                  "a link too slow to finish");
  check_malformed(ir, "op gelu 1 1 1 bf16 1 1 seq=0\n", "bad.prof:1:28: error: expected a positive integer",
                  "a zero attribute");
  check_malformed(ir, "link nvlink9 10 1\n", "bad.prof:1:6: error: unknown link", "an unknown link");
  check_malformed(ir, "interference 0.5\n", "bad.prof:1:14: error: interference factor", "a speed-up as interference");
  lx_cost_model cm;
  lx_cost_model_init(&cm, ir, NULL);
  FILE *sink = tmpfile();
  lx_diag_set_sink(sink);
  bool ok = lx_cost_load_profile(&cm, "/nonexistent/lynx.prof", NULL);
  lx_diag_set_sink(NULL);
  CHECK(!ok && error_output_starts_with(sink, "/nonexistent/lynx.prof: error: cannot read the profile"),
        "a missing profile file is an error naming it");
  fclose(sink);
  lx_cost_model_free(&cm);
}

static int check_graph_times(const lx_cost_model *cm, const lx_ir *ir, const lx_graph *g) {
  int bad = 0;
  for (int i = 0; i < g->n_ops; i++) {
    const lx_op *op = &g->ops[i];
    double f = lx_cost_op_fwd(cm, ir, g, op), b = lx_cost_op_bwd(cm, ir, g, op);
    bool ok = op->kind == LX_OP_INPUT ? f == 0 && b == 0 : isfinite(f) && isfinite(b) && f > 0 && b > 0;
    if (!ok) printf("     %s %s.%s: fwd %g bwd %g\n", cm->gpu.name, g->name, op->name, f, b);
    bad += !ok;
  }
  return bad;
}

/* Every example, on every GPU kind, in bf16 and fp32: inputs cost nothing,
 * every other op a positive finite time. */
static void test_every_example_op(void) {
  glob_t found;
  int files = glob("examples/*.model", 0, NULL, &found) == 0 ? (int)found.gl_pathc : 0;
  CHECK(files > 0, "examples/*.model found (%d)", files);
  for (int f = 0; f < files; f++) {
    const char *path = found.gl_pathv[f];
    for (int fp32 = 0; fp32 < 2; fp32++) {
      lx_ir ir;
      bool ok = load_model(path, fp32 ? "DTYPE_BF16" : NULL, "DTYPE_FP32", &ir);
      CHECK(ok, "%s loads%s", path, fp32 ? " with its dtype replaced by fp32" : "");
      if (!ok) continue;
      const char *dtype = lx_dtype_name(ir.training.dtype);
      int bad = 0;
      for (int k = LX_GPU_V100_32GB; k <= LX_GPU_H200_141GB; k++) {
        ir.cluster.gpu = (lx_gpu)k;
        lx_cost_model cm;
        lx_cost_model_init(&cm, &ir, NULL);
        bad += check_graph_times(&cm, &ir, &ir.prologue) + check_graph_times(&cm, &ir, &ir.block) +
               check_graph_times(&cm, &ir, &ir.epilogue);
        lx_cost_model_free(&cm);
      }
      CHECK(bad == 0, "%s (%s): every op has a positive finite time on every GPU (inputs: zero)", path, dtype);
      lx_ir_free(&ir);
    }
  }
  if (files) globfree(&found);
}

static double layer_forward(const lx_cost_model *cm, const lx_ir *ir) {
  double sum = 0;
  for (int i = 0; i < ir->block.n_ops; i++) sum += lx_cost_op_fwd(cm, ir, &ir->block, &ir->block.ops[i]);
  return sum;
}

/* One GPT-3 1.3B layer, micro-batch 4 x 2048 tokens, on an A100-80GB.
 * Its matmul FLOPs (Narayanan et al.: 24 b s h^2 + 4 b s^2 h) are 961
 * GFLOP. Lower bound: all of them at the large-GEMM efficiency (0.8 of 312
 * TFLOP/s) = 3.85 ms; nothing is faster. Upper bound: 30% of peak = 10.3 ms;
 * Megatron-LM trains GPT models on A100s at 44-52% of peak end to end
 * (Narayanan et al. 2021) with an attention that multiplies the whole s x s
 * square (lynxgen's stops each block of rows at its last key), so a layer's forward
 * alone must not be slower than that. */
static void test_layer_forward_range(const lx_ir *ir, const lx_cost_model *cm) {
  double flops = 24 * B * S * H * H + 4 * B * S * S * H;
  double lo = flops / (0.8 * 312e12), hi = flops / (0.3 * 312e12);
  double t = layer_forward(cm, ir);
  CHECK(t >= lo && t <= hi, "1.3B layer forward on A100 = %.2f ms, in [%.2f, %.2f] ms", t * 1e3, lo * 1e3, hi * 1e3);

  lx_ir flash;
  lx_cost_model fcm;
  bool ok = load_model(GPT13B, "attention(qkv", "flash_attention(qkv", &flash) && lx_cost_model_init(&fcm, &flash, NULL);
  CHECK(ok, "gpt13b with flash attention loads");
  if (!ok) return;
  double tf = layer_forward(&fcm, &flash);
  CHECK(tf < t && tf >= lo, "flash attention makes the layer faster (%.2f ms) and still above the bound", tf * 1e3);
  const lx_op *attn = op_named(&flash.block, "flash_attention_0");
  if (!attn) attn = op_named(&flash.block, "attention_0");
  double attn_flops = 4 * B * HEADS * S * S * (H / HEADS);
  CHECK(attn && attn->flops_fwd == attn_flops, "attention core = 4 b a s^2 d FLOPs");
  if (attn)
    CHECK_CLOSE(lx_cost_op_fwd(&fcm, &flash, &flash.block, attn),
                attn_flops / (fcm.flash_attention_efficiency * 312e12) + fcm.launch_s, 1e-12,
                "flash attention forward = flops / (flash eff x peak) + launch");
  lx_cost_model_free(&fcm);
  lx_ir_free(&flash);
}

/* gpt13b's attention at sequence T: the products' FLOPs times `covered`,
 * the bytes per score below over HBM, and `blocks` blocks of 3 launches
 * forward and 6 backward. */
static void check_attention_costs(const lx_ir *ir, const lx_cost_model *cm, double T, double covered,
                                  double blocks) {
  const lx_op *attn = op_named(&ir->block, "attention_0");
  CHECK(attn && attn->attention_impl == LX_ATTN_MATERIALIZED,
        "gpt13b's attention at sequence %.0f is materialised", T);
  if (!attn) return;
  double causal = (T + 1) / (2 * T);
  double flops = 4 * B * HEADS * T * T * (H / HEADS), scores = B * HEADS * T * T;
  double rate = cm->attention_efficiency * 312e12, hbm = cm->memory_efficiency * 2039e9;
  double forward = 8 * covered + 4 * causal + 2, backward = 14 * covered + 10 * causal;
  CHECK_CLOSE(
      lx_cost_op_fwd(cm, ir, &ir->block, attn),
      covered * flops / rate + scores * forward / hbm + 3 * blocks * cm->launch_s, 1e-12,
      "sequence %.0f: attention forward = %.4f of 4 b a s^2 d / rate + %.3f bytes per score / HBM + %.0f "
      "launches",
      T, covered, forward, 3 * blocks);
  CHECK_CLOSE(
      lx_cost_op_bwd(cm, ir, &ir->block, attn),
      2 * covered * flops / rate + scores * backward / hbm + 6 * blocks * cm->launch_s, 1e-12,
      "sequence %.0f: attention backward = %.4f of 2 x the forward FLOPs / rate + %.3f bytes per score / "
      "HBM + %.0f launches",
      T, covered, backward, 6 * blocks);
  /* a recompute that keeps the output: QK^T (half the products) and the softmax (fp32 scores written
   * where covered and read where causal, probs written), 2 launches a block */
  double probs_alone = 4 * covered + 4 * causal + 2;
  CHECK_CLOSE(
      lx_cost_internals_share(cm, ir, &ir->block, attn) * lx_cost_op_fwd(cm, ir, &ir->block, attn),
      covered * flops / 2 / rate + scores * probs_alone / hbm + 2 * blocks * cm->launch_s, 1e-12,
      "sequence %.0f: the probabilities alone = %.4f of 2 b a s^2 d / rate + %.3f bytes per score / HBM + "
      "%.0f launches",
      T, covered, probs_alone, 2 * blocks);
}

/* Materialised attention (gpt13b: dropout 0.1, bf16, s = 2048) as the CUDA
 * programs run it: eight blocks of 256 query rows, block m's products up to
 * key 256 m, so they cover (1 + ... + 8) / 64 = 36 / 64 of the s x s square;
 * the softmax kernels read the causal part, 2049 / 4096 of it. All 16 heads
 * fit one block's scratch, so a micro-batch of 4 runs 32 blocks: 3 launches
 * each forward (QK^T, softmax, PV), 6 backward (the dropped probs, dV, dP,
 * softmax, dQ, dK). Only the probs are saved: the dropped probs (the
 * weights) are a block's, in bf16 after its fp32 scores, and the mask is
 * drawn again. Bytes per score: forward 8 x 36/64 (fp32 scores written,
 * weights written and read by PV) + 4 x 2049/4096 (scores read) + 2 (probs
 * written); backward 14 x 36/64 (weights written and read by dV, fp32 dP
 * written, dS written and read twice) + 10 x 2049/4096 (probs read for the
 * weights, dP, weights and probs read by the softmax backward). */
static void test_materialized_attention(const lx_ir *ir, const lx_cost_model *cm) {
  check_attention_costs(ir, cm, S, 36.0 / 64, 32);
}

/* A head-split recompute's pieces at sequence 8192 (lx_cost_op_fwd_heads):
 * a piece of n of the 16 kv heads runs n/16 of the forward's FLOPs and
 * bytes, and blocks of its own heads: up to 8 a block, so a piece of 8 or
 * of 4 runs 4 x 1 x 32 = 128 blocks, as many as half the whole call's 256. */
static void check_head_pieces(const lx_ir *ir, const lx_cost_model *cm) {
  const lx_op *attn = op_named(&ir->block, "attention_0");
  if (!attn) return;
  double whole = lx_cost_op_fwd(cm, ir, &ir->block, attn), launches = 3 * 256 * cm->launch_s;
  for (int n = 4; n <= 8; n *= 2)
    CHECK_CLOSE(lx_cost_op_fwd_heads(cm, ir, &ir->block, attn, n),
                n / 16.0 * (whole - launches) + 3 * 128 * cm->launch_s, 1e-12,
                "sequence 8192: a piece of %d of the 16 kv heads = %d/16 of the forward less its launches + "
                "384 launches of its own",
                n, n);
  CHECK_CLOSE(lx_cost_op_fwd_heads(cm, ir, &ir->block, attn, 16), whole, 1e-15,
              "sequence 8192: all 16 kv heads cost the whole forward");
}

/* The same attention at sequence 8192: 32 row blocks, their products
 * covering (1 + ... + 32) / 32^2 = 33/64 of the square. A backward block of
 * one head needs 256 x 8192 x 6 bytes = 12 MiB of the 96 MiB scratch: 8 of
 * the 16 heads a block backward (2 slices), and forward too under dropout (6
 * bytes a score: fp32 scores, bf16 weights), so a micro-batch of 4 runs 4 x
 * 2 x 32 = 256 blocks either way. */
static void test_materialized_attention_sliced(void) {
  lx_ir ir;
  lx_cost_model cm;
  bool ok =
      load_model(GPT13B, "#define SEQ 2048", "#define SEQ 8192", &ir) && lx_cost_model_init(&cm, &ir, NULL);
  CHECK(ok, "gpt13b at sequence 8192 loads");
  if (!ok) return;
  check_attention_costs(&ir, &cm, 8192, 33.0 / 64, 256);
  check_head_pieces(&ir, &cm);
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
}

int main(void) {
  test_hardware_tables();
  lx_ir ir;
  lx_cost_model cm;
  bool ok = load_model(GPT13B, NULL, NULL, &ir) && lx_cost_model_init(&cm, &ir, NULL);
  CHECK(ok, "%s loads and the cost model initialises", GPT13B);
  if (!ok) return check_exit_status();
  test_gemm_and_elementwise(&ir, &cm);
  test_skinny_gemm(&cm);
  test_fp32_uses_fp32_peak();
  test_collectives(&cm);
  test_profile_overrides(&ir);
  test_profile_of_pieces();
  test_malformed_profiles(&ir);
  test_every_example_op();
  test_layer_forward_range(&ir, &cm);
  test_materialized_attention(&ir, &cm);
  test_materialized_attention_sliced();
  lx_cost_model_free(&cm);
  lx_ir_free(&ir);
  return check_exit_status();
}
