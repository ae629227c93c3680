/* lx_cuda_cudnn_attention.cu — flash attention through cuDNN's fused
 * scaled-dot-product attention (the cuDNN frontend's graph API), the
 * attention of an emitted program built with ATTENTION=cudnn (its Makefile's
 * default; lx_kernels.cu then leaves out lynx's own launchers of these two
 * names, lx_cuda_attention.cuh).
 *
 * Same arguments and layouts as lynx's flash kernels: qkv (B, T, (H + 2 KVH) D)
 * packed q | k | v per token (GQA: H / KVH query heads share a key/value
 * head), out (B, T, H D), lse (B, H, T) the natural log of each row's sum of
 * exp(scale q.k): cuDNN's softmax statistics, what the backward reads. bf16 in
 * and out, fp32 inside. Two differences:
 *   - the backward writes dqkv: the emitted step asks for that
 *     (LX_GRAD_WRITE) where the attention is its input's only use; under
 *     LX_GRAD_ADD, where another op's gradient adds to the same buffer,
 *     lynx's kernels run it (one line on stderr);
 *   - with dropout (p > 0) the mask is cuDNN's own Philox stream, seeded from
 *     (seed, stream_id, head_base), not the CPU twin's: the same distribution,
 *     not the same bits.
 * A graph is built once per shape (on the first call, in step 1, before a
 * CUDA graph captures the step) and kept for the run, with a workspace per
 * CUDA stream, since the recompute stream may run an attention while the
 * compute stream runs another. A shape cuDNN cannot run here (its
 * check_support) runs lynx's kernels instead, forward and backward alike,
 * with one line on stderr.
 *
 * Host code only (no kernels of its own), compiled alone as C++ by nvcc's
 * host compiler: the frontend's headers take about a minute that way, twice
 * that through nvcc's CUDA front end. */
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "lx_cuda_api.h"

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV, SEED, OFFSET };

/* A graph's key: the sizes and the dropout probability, which its graphs hold. */
struct Shape {
  int B, T, H, KVH, D;
  float p;
  bool dropout() const { return p > 0; }
  bool operator<(const Shape &o) const {
    return std::tie(B, T, H, KVH, D, p) < std::tie(o.B, o.T, o.H, o.KVH, o.D, o.p);
  }
};

/* One shape's graphs: both, or neither (lynx's kernels then run both ways). */
struct Graphs {
  std::shared_ptr<fe::graph::Graph> forward, backward;
};

cudnnHandle_t handle;
std::map<Shape, Graphs> graphs;
std::unordered_map<cudaStream_t, std::pair<void *, int64_t>> workspaces;

void check_cudnn(cudnnStatus_t status, const char *call, int line) {
  if (status != CUDNN_STATUS_SUCCESS)
    lx_cuda_fail_at(__FILE__, line, call, "cuDNN", cudnnGetErrorString(status));
}
#define CUDNN_CHECK(call) check_cudnn((call), #call, __LINE__)

/* A (B, heads, T, D) view of q, k, v (or their gradients) inside the packed qkv rows. */
std::vector<int64_t> qkv_stride(const Shape &s) {
  int64_t row = (int64_t)(s.H + 2 * s.KVH) * s.D;
  return {(int64_t)s.T * row, s.D, row, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> packed(fe::graph::Graph &g, const char *name, int64_t uid,
                                                     const Shape &s, int heads) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({s.B, heads, s.T, s.D})
                      .set_stride(qkv_stride(s)));
}

/* out's (B, H, T, D) view of its (B, T, H D) rows. */
std::vector<int64_t> out_stride(const Shape &s) {
  return {(int64_t)s.T * s.H * s.D, s.D, (int64_t)s.H * s.D, 1};
}

/* The softmax statistics, lse's (B, H, T) as cuDNN's (B, H, T, 1), fp32. */
fe::graph::Tensor_attributes &as_statistics(fe::graph::Tensor_attributes &t, const Shape &s) {
  return t.set_uid(STATS)
      .set_dim({s.B, s.H, s.T, 1})
      .set_stride({(int64_t)s.H * s.T, s.T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Tensor_attributes> scalar(fe::graph::Graph &g, const char *name, int64_t uid) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_is_pass_by_value(true)
                      .set_data_type(fe::DataType_t::INT64));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const Shape &s) {
  auto g = new_graph();
  auto q = packed(*g, "q", Q, s, s.H), k = packed(*g, "k", K, s, s.KVH), v = packed(*g, "v", V, s, s.KVH);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("lx_attention_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale((float)(1.0 / sqrt((double)s.D)));
  if (s.dropout()) options.set_dropout(s.p, scalar(*g, "seed", SEED), scalar(*g, "offset", OFFSET));
  auto [o, stats] = g->sdpa(q, k, v, options);
  o->set_output(true).set_uid(O).set_dim({s.B, s.H, s.T, s.D}).set_stride(out_stride(s));
  as_statistics(*stats, s).set_output(true);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Shape &s) {
  auto g = new_graph();
  auto q = packed(*g, "q", Q, s, s.H), k = packed(*g, "k", K, s, s.KVH), v = packed(*g, "v", V, s, s.KVH);
  auto view = fe::graph::Tensor_attributes().set_dim({s.B, s.H, s.T, s.D}).set_stride(out_stride(s));
  auto o = g->tensor(fe::graph::Tensor_attributes(view).set_name("o").set_uid(O));
  auto dout = g->tensor(fe::graph::Tensor_attributes(view).set_name("dout").set_uid(DO));
  fe::graph::Tensor_attributes lse;
  auto stats = g->tensor(as_statistics(lse.set_name("stats"), s));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("lx_attention_backward")
                     .set_causal_mask(true)
                     .set_deterministic_algorithm(true) /* a step's gradients are the same bits every run */
                     .set_attn_scale((float)(1.0 / sqrt((double)s.D)));
  if (s.dropout()) options.set_dropout(s.p, scalar(*g, "seed", SEED), scalar(*g, "offset", OFFSET));
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_uid(DQ).set_dim({s.B, s.H, s.T, s.D}).set_stride(qkv_stride(s));
  dk->set_output(true).set_uid(DK).set_dim({s.B, s.KVH, s.T, s.D}).set_stride(qkv_stride(s));
  dv->set_output(true).set_uid(DV).set_dim({s.B, s.KVH, s.T, s.D}).set_stride(qkv_stride(s));
  return g;
}

/* Validated, planned and built: "", or the reason it cannot run here. */
std::string build(fe::graph::Graph &g) {
  if (auto e = g.validate(); !e.is_good()) return e.get_message();
  if (auto e = g.build_operation_graph(handle); !e.is_good()) return e.get_message();
  if (auto e = g.create_execution_plans({fe::HeurMode_t::A}); !e.is_good()) return e.get_message();
  if (auto e = g.check_support(handle); !e.is_good()) return e.get_message();
  if (auto e = g.build_plans(handle); !e.is_good()) return e.get_message();
  return "";
}

/* The shape's graphs, built on first use; both empty when cuDNN cannot run it. */
const Graphs &graphs_of(const Shape &s) {
  auto found = graphs.find(s);
  if (found != graphs.end()) return found->second;
  if (!handle) CUDNN_CHECK(cudnnCreate(&handle));
  Graphs made = {forward_graph(s), backward_graph(s)};
  std::string why = build(*made.forward);
  if (why.empty()) why = build(*made.backward);
  if (!why.empty()) {
    fprintf(
        stderr,
        "lynx: cuDNN cannot run attention B %d T %d H %d KVH %d D %d here (%s): lynx's own kernels run it\n",
        s.B, s.T, s.H, s.KVH, s.D, why.c_str());
    made.forward = made.backward = nullptr;
  }
  return graphs.emplace(s, made).first->second;
}

void *workspace(cudaStream_t stream, const fe::graph::Graph &g) {
  int64_t need = 0;
  if (!g.get_workspace_size(need).is_good())
    lx_cuda_fail_at(__FILE__, __LINE__, "get_workspace_size", "cuDNN", "");
  auto &w = workspaces[stream];
  if (need > w.second) {
    if (w.first) CUDA_CHECK(cudaFree(w.first));
    CUDA_CHECK(cudaMalloc(&w.first, (size_t)need));
    w.second = need;
  }
  return w.first;
}

void execute(fe::graph::Graph &g, std::unordered_map<int64_t, void *> &pack, cudaStream_t stream) {
  CUDNN_CHECK(cudnnSetStream(handle, stream));
  fe::error_object e = g.execute(handle, pack, workspace(stream, g));
  if (!e.is_good()) lx_cuda_fail_at(__FILE__, __LINE__, "execute", "cuDNN", e.get_message().c_str());
  CUDA_CHECK(cudaGetLastError());
}

Shape shape_of(int B, int T, int H, int KVH, int D, double p) {
  if (!(B > 0 && T > 0 && H > 0 && KVH > 0 && H % KVH == 0 && D > 0 && p >= 0 && p < 1))
    lx_cuda_fail_at(__FILE__, __LINE__, "lx_flash_attention", "shape",
                    "B, T, H, KVH, D > 0, KVH divides H, 0 <= p < 1");
  return Shape{B, T, H, KVH, D, (float)p};
}

/* cuDNN's dropout stream of this call: a splitmix64 mix of (seed, stream_id),
 * the rank's heads apart (tensor parallelism), so that no two calls share one. */
int64_t dropout_seed(uint64_t seed, uint64_t stream_id, int head_base) {
  uint64_t z = seed ^ (stream_id * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)head_base << 48);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (int64_t)(z ^ (z >> 31));
}

} // namespace

void lx_flash_attention_forward(const lx_ctx *ctx, lx_bf16 *out, float *lse, const lx_bf16 *qkv, int B, int T,
                                int H, int KVH, int D, double p, uint64_t seed, uint64_t stream_id,
                                int head_base, int heads_total) {
  Shape s = shape_of(B, T, H, KVH, D, p);
  const Graphs &g = graphs_of(s);
  if (!g.forward) {
    lx_lynx_flash_attention_forward(ctx, out, lse, qkv, B, T, H, KVH, D, p, seed, stream_id, head_base,
                                    heads_total);
    return;
  }
  int64_t dseed = dropout_seed(seed, stream_id, head_base), offset = 0;
  lx_bf16 *q = (lx_bf16 *)qkv;
  std::unordered_map<int64_t, void *> pack = {
      {Q, q}, {K, q + (size_t)H * D}, {V, q + (size_t)(H + KVH) * D}, {O, out}, {STATS, lse}};
  if (s.dropout()) pack[SEED] = &dseed, pack[OFFSET] = &offset;
  execute(*g.forward, pack, ctx->stream);
}

void lx_flash_attention_backward(const lx_ctx *ctx, lx_bf16 *dqkv, const lx_bf16 *dout, const lx_bf16 *qkv,
                                 const lx_bf16 *out, const float *lse, int B, int T, int H, int KVH, int D,
                                 double p, uint64_t seed, uint64_t stream_id, int head_base,
                                 int heads_total, lx_grad_mode mode) {
  Shape s = shape_of(B, T, H, KVH, D, p);
  const Graphs &g = graphs_of(s);
  if (!g.backward || mode == LX_GRAD_ADD) {
    static bool told;
    if (g.backward && !told) {
      fprintf(stderr, "lynx: an attention's input gradient has other contributions, which cuDNN's backward "
                      "would overwrite: lynx's kernels run that backward\n");
      told = true;
    }
    lx_lynx_flash_attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, H, KVH, D, p, seed, stream_id,
                                     head_base, heads_total, mode);
    return;
  }
  int64_t dseed = dropout_seed(seed, stream_id, head_base), offset = 0;
  lx_bf16 *q = (lx_bf16 *)qkv, *dq = dqkv;
  std::unordered_map<int64_t, void *> pack = {
      {Q, q},           {K, q + (size_t)H * D},   {V, q + (size_t)(H + KVH) * D},
      {O, (void *)out}, {DO, (void *)dout},       {STATS, (void *)lse},
      {DQ, dq},         {DK, dq + (size_t)H * D}, {DV, dq + (size_t)(H + KVH) * D}};
  if (s.dropout()) pack[SEED] = &dseed, pack[OFFSET] = &offset;
  execute(*g.backward, pack, ctx->stream);
}
