/* lx_cuda_elementwise.cuh — gelu, silu, swiglu, residual add and dropout, the GPU
 * twins of templates/cpu/lx_elementwise.h. Every element is independent: a
 * thread takes a piece of eight (one 128-bit load) where the tensors allow,
 * else one; backward kernels add into their gradients. */
#ifndef LX_CUDA_ELEMENTWISE_CUH
#define LX_CUDA_ELEMENTWISE_CUH

#include "lx_cuda_common.cuh"
#include "lx_cuda_rng.cuh"

#define LX_CUDA_ELEMENTWISE_THREADS 256

/* Enough blocks to fill any GPU, each striding over the rest: the element
 * that a thread handles depends only on N, never on the device. */
LX_CUDA_API unsigned lx_cuda_elementwise_blocks(size_t N) {
  unsigned blocks = lx_ceil_div(N, LX_CUDA_ELEMENTWISE_THREADS);
  return blocks < 65536u ? (blocks ? blocks : 1u) : 65536u;
}

#define LX_CUDA_FOR_EACH(i, N)                                                                               \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (N); i += (size_t)gridDim.x * blockDim.x)

/* The same over pieces of W elements (lx_load_piece): i is each piece's first
 * element; N is a multiple of W. */
#define LX_CUDA_FOR_EACH_PIECE(i, N, W)                                                                      \
  for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * (W); i < (N);                            \
       i += (size_t)gridDim.x * blockDim.x * (W))

/* A gradient piece before this kernel's term: what the buffer holds
 * (LX_GRAD_ADD), or zeros (LX_GRAD_WRITE: the buffer is not read). */
template <int W>
__device__ inline void lx_load_grad_piece(float g[W], const lx_bf16 *p, lx_grad_mode mode) {
  if (mode == LX_GRAD_ADD)
    lx_load_piece<W>(g, p);
  else
    for (int k = 0; k < W; k++)
      g[k] = 0.0f;
}

/* kernel<W><<<...>>>(args...) over N elements: W = LX_VEC where `fit`
 * (lx_pieces_fit), else 1. */
#define LX_CUDA_LAUNCH_PIECES(kernel, N, fit, stream, ...)                                                   \
  do {                                                                                                       \
    if (fit)                                                                                                 \
      kernel<LX_VEC><<<lx_cuda_elementwise_blocks((N) / LX_VEC), LX_CUDA_ELEMENTWISE_THREADS, 0, stream>>>(  \
          __VA_ARGS__);                                                                                      \
    else                                                                                                     \
      kernel<1><<<lx_cuda_elementwise_blocks(N), LX_CUDA_ELEMENTWISE_THREADS, 0, stream>>>(__VA_ARGS__);      \
    LX_CUDA_LAUNCHED();                                                                                      \
  } while (0)

/* ---- gelu, tanh approximation (as GPT-2) ----------------------------------- */

#define LX_CUDA_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define LX_CUDA_GELU_C 0.044715f

__device__ inline float lx_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(LX_CUDA_GELU_K * (x + LX_CUDA_GELU_C * x * x * x)));
}

__device__ inline float lx_gelu_derivative(float x) {
  float th = tanhf(LX_CUDA_GELU_K * (x + LX_CUDA_GELU_C * x * x * x));
  float du_dx = LX_CUDA_GELU_K * (1.0f + 3.0f * LX_CUDA_GELU_C * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
}

/* ---- element-wise maps y = f(x) (gelu, silu): one kernel pair for all ------- */

template <float (*f)(float), int W>
__global__ void lx_cuda_map_forward_kernel(lx_bf16 *out,       // (N)
                                           const lx_bf16 *inp, // (N)
                                           size_t N) {
  LX_CUDA_FOR_EACH_PIECE(i, N, W) {
    float v[W];
    lx_load_piece<W>(v, inp + i);
    for (int k = 0; k < W; k++)
      v[k] = f(v[k]);
    lx_store_piece<W>(out + i, v);
  }
}

/* dinp += f'(x) dout (= under LX_GRAD_WRITE) */
template <float (*derivative)(float), int W>
__global__ void lx_cuda_map_backward_kernel(lx_bf16 *dinp,       // (N)
                                            const lx_bf16 *dout, // (N)
                                            const lx_bf16 *inp,  // (N)
                                            size_t N, lx_grad_mode mode) {
  LX_CUDA_FOR_EACH_PIECE(i, N, W) {
    float x[W], dy[W], dx[W];
    lx_load_piece<W>(x, inp + i);
    lx_load_piece<W>(dy, dout + i);
    lx_load_grad_piece<W>(dx, dinp + i, mode);
    for (int k = 0; k < W; k++)
      dx[k] += derivative(x[k]) * dy[k];
    lx_store_piece<W>(dinp + i, dx);
  }
}

template <float (*f)(float)>
inline void lx_cuda_map_forward(lx_bf16 *out, const lx_bf16 *inp, size_t N, cudaStream_t stream) {
  if (lx_pieces_fit(N, {out, inp}))
    lx_cuda_map_forward_kernel<f, LX_VEC>
        <<<lx_cuda_elementwise_blocks(N / LX_VEC), LX_CUDA_ELEMENTWISE_THREADS, 0, stream>>>(out, inp, N);
  else
    lx_cuda_map_forward_kernel<f, 1><<<lx_cuda_elementwise_blocks(N), LX_CUDA_ELEMENTWISE_THREADS, 0, stream>>>(
        out, inp, N);
  LX_CUDA_LAUNCHED();
}

template <float (*derivative)(float)>
inline void lx_cuda_map_backward(lx_bf16 *dinp, const lx_bf16 *dout, const lx_bf16 *inp, size_t N,
                                 lx_grad_mode mode, cudaStream_t stream) {
  if (lx_pieces_fit(N, {dinp, dout, inp}))
    lx_cuda_map_backward_kernel<derivative, LX_VEC>
        <<<lx_cuda_elementwise_blocks(N / LX_VEC), LX_CUDA_ELEMENTWISE_THREADS, 0, stream>>>(dinp, dout, inp, N,
                                                                                             mode);
  else
    lx_cuda_map_backward_kernel<derivative, 1>
        <<<lx_cuda_elementwise_blocks(N), LX_CUDA_ELEMENTWISE_THREADS, 0, stream>>>(dinp, dout, inp, N, mode);
  LX_CUDA_LAUNCHED();
}

/* The launchers of element-wise op `name`, y = f(x), dinp += derivative(x) dout. */
#define LX_CUDA_MAP_OP(name, f, derivative)                                                                  \
  LX_CUDA_API void lx_##name##_forward(const lx_ctx *ctx, lx_bf16 *out, const lx_bf16 *inp, size_t N) {      \
    lx_cuda_map_forward<f>(out, inp, N, ctx->stream);                                                        \
  }                                                                                                          \
  LX_CUDA_API void lx_##name##_backward(const lx_ctx *ctx, lx_bf16 *dinp, const lx_bf16 *dout,               \
                                        const lx_bf16 *inp, size_t N, lx_grad_mode mode) {                   \
    lx_cuda_map_backward<derivative>(dinp, dout, inp, N, mode, ctx->stream);                                 \
  }

LX_CUDA_MAP_OP(gelu, lx_gelu, lx_gelu_derivative)

/* ---- silu: x sigmoid(x) ------------------------------------------------------ */

__device__ inline float lx_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ inline float lx_silu(float x) { return x * lx_sigmoid(x); }

__device__ inline float lx_silu_derivative(float x) {
  float s = lx_sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

LX_CUDA_MAP_OP(silu, lx_silu, lx_silu_derivative)

/* ---- swiglu: silu(gate) * up, gate and up the two halves of each row ------ */

__global__ void lx_cuda_swiglu_forward_kernel(lx_bf16 *out,       // (BT, F)
                                              const lx_bf16 *inp, // (BT, 2F): gate | up
                                              int BT, int F) {
  LX_CUDA_FOR_EACH(e, (size_t)BT * F) {
    size_t r = e / F, i = e % F;
    float gate = lx_to_float(inp[r * 2 * F + i]), up = lx_to_float(inp[r * 2 * F + F + i]);
    out[e] = lx_to_bf16(gate * lx_sigmoid(gate) * up);
  }
}

__global__ void lx_cuda_swiglu_backward_kernel(lx_bf16 *dinp,       // (BT, 2F)
                                               const lx_bf16 *dout, // (BT, F)
                                               const lx_bf16 *inp,  // (BT, 2F)
                                               int BT, int F, lx_grad_mode mode) {
  bool add = mode == LX_GRAD_ADD;
  LX_CUDA_FOR_EACH(e, (size_t)BT * F) {
    size_t r = e / F, i = e % F, g = r * 2 * F + i, u = g + F;
    float gate = lx_to_float(inp[g]), up = lx_to_float(inp[u]), dy = lx_to_float(dout[e]);
    float s = lx_sigmoid(gate), dsilu = s * (1.0f + gate * (1.0f - s));
    dinp[g] = lx_to_bf16((add ? lx_to_float(dinp[g]) : 0.0f) + dy * up * dsilu);
    dinp[u] = lx_to_bf16((add ? lx_to_float(dinp[u]) : 0.0f) + dy * gate * s);
  }
}

LX_CUDA_API void lx_swiglu_forward(const lx_ctx *ctx,
                                   lx_bf16 *out,       // (BT, F)
                                   const lx_bf16 *inp, // (BT, 2F)
                                   int BT, int F) {
  size_t N = (size_t)BT * F;
  lx_cuda_swiglu_forward_kernel<<<lx_cuda_elementwise_blocks(N), LX_CUDA_ELEMENTWISE_THREADS, 0, ctx->stream>>>(
      out, inp, BT, F);
  LX_CUDA_LAUNCHED();
}

LX_CUDA_API void lx_swiglu_backward(const lx_ctx *ctx,
                                    lx_bf16 *dinp,       // (BT, 2F)
                                    const lx_bf16 *dout, // (BT, F)
                                    const lx_bf16 *inp,  // (BT, 2F)
                                    int BT, int F, lx_grad_mode mode) {
  size_t N = (size_t)BT * F;
  lx_cuda_swiglu_backward_kernel<<<lx_cuda_elementwise_blocks(N), LX_CUDA_ELEMENTWISE_THREADS, 0, ctx->stream>>>(
      dinp, dout, inp, BT, F, mode);
  LX_CUDA_LAUNCHED();
}

/* ---- residual add --------------------------------------------------------------- */

/* out[i .. i + W) = a + b there (a taken as zeros under LX_GRAD_WRITE): one
 * piece, loaded before it is stored */
template <int W>
__device__ inline void lx_add_piece(lx_bf16 *out, const lx_bf16 *a, const lx_bf16 *b, size_t i,
                                    lx_grad_mode mode = LX_GRAD_ADD) {
  float x[W], y[W];
  lx_load_grad_piece<W>(x, a + i, mode);
  lx_load_piece<W>(y, b + i);
  for (int k = 0; k < W; k++)
    x[k] += y[k];
  lx_store_piece<W>(out + i, x);
}

template <int W>
__global__ void lx_cuda_add_forward_kernel(lx_bf16 *out,     // (N)
                                           const lx_bf16 *a, // (N)
                                           const lx_bf16 *b, // (N)
                                           size_t N) {
  LX_CUDA_FOR_EACH_PIECE(i, N, W) lx_add_piece<W>(out, a, b, i);
}

/* da and db may be the same buffer (add(x, x), both LX_GRAD_ADD): one thread
 * does both adds to a piece, in order (the second reads what the first
 * stored), so it gets dout twice, as on the CPU. */
template <int W>
__global__ void lx_cuda_add_backward_kernel(lx_bf16 *da,         // (N)
                                            lx_bf16 *db,         // (N)
                                            const lx_bf16 *dout, // (N)
                                            size_t N, lx_grad_mode mode_a, lx_grad_mode mode_b) {
  LX_CUDA_FOR_EACH_PIECE(i, N, W) {
    lx_add_piece<W>(da, da, dout, i, mode_a);
    lx_add_piece<W>(db, db, dout, i, mode_b);
  }
}

LX_CUDA_API void lx_add_forward(const lx_ctx *ctx,
                                lx_bf16 *out,     // (N)
                                const lx_bf16 *a, // (N)
                                const lx_bf16 *b, // (N)
                                size_t N) {
  LX_CUDA_LAUNCH_PIECES(lx_cuda_add_forward_kernel, N, lx_pieces_fit(N, {out, a, b}), ctx->stream, out, a, b, N);
}

LX_CUDA_API void lx_add_backward(const lx_ctx *ctx,
                                 lx_bf16 *da,         // (N)
                                 lx_bf16 *db,         // (N)
                                 const lx_bf16 *dout, // (N)
                                 size_t N, lx_grad_mode mode_a, lx_grad_mode mode_b) {
  LX_CUDA_LAUNCH_PIECES(lx_cuda_add_backward_kernel, N, lx_pieces_fit(N, {da, db, dout}), ctx->stream, da, db, dout,
                        N, mode_a, mode_b);
}

/* ---- dropout (inverted: kept elements scaled by 1 / (1 - p)) --------------- */

/* Element i is kept iff lx_dropout_keep(seed, stream, first + i) on the CPU:
 * the same integer test on the same bits, so both targets draw the same mask,
 * and the backward draws the forward's again (nothing is stored; a sequence
 * shard draws the whole tensor's, from counter `first`). */
template <int W>
__global__ void lx_cuda_dropout_forward_kernel(lx_bf16 *out,       // (N)
                                               const lx_bf16 *inp, // (N)
                                               size_t N, uint64_t key, uint32_t threshold, float scale,
                                               uint64_t first) {
  LX_CUDA_FOR_EACH_PIECE(i, N, W) {
    float v[W];
    lx_load_piece<W>(v, inp + i);
    for (int k = 0; k < W; k++)
      v[k] = lx_cuda_dropout_keep(key, first + i + k, threshold) ? v[k] * scale : 0.0f;
    lx_store_piece<W>(out + i, v);
  }
}

/* dinp += dout * scale where kept (a dropped element's gradient is stored
 * back unchanged; under LX_GRAD_WRITE the sum starts from zeros) */
template <int W>
__global__ void lx_cuda_dropout_backward_kernel(lx_bf16 *dinp,       // (N)
                                                const lx_bf16 *dout, // (N)
                                                size_t N, uint64_t key, uint32_t threshold, float scale,
                                                uint64_t first, lx_grad_mode mode) {
  LX_CUDA_FOR_EACH_PIECE(i, N, W) {
    float dy[W], dx[W];
    lx_load_piece<W>(dy, dout + i);
    lx_load_grad_piece<W>(dx, dinp + i, mode);
    for (int k = 0; k < W; k++)
      if (lx_cuda_dropout_keep(key, first + i + k, threshold)) dx[k] += dy[k] * scale;
    lx_store_piece<W>(dinp + i, dx);
  }
}

/* Sequence parallelism: element i draws counter first + i. */
LX_CUDA_API void lx_dropout_forward_at(const lx_ctx *ctx,
                                       lx_bf16 *out,       // (N)
                                       const lx_bf16 *inp, // (N)
                                       size_t N, double p, uint64_t seed, uint64_t stream_id,
                                       uint64_t first) {
  LX_CUDA_LAUNCH_PIECES(lx_cuda_dropout_forward_kernel, N, lx_pieces_fit(N, {out, inp}), ctx->stream, out,
                        inp, N, lx_cuda_rng_key(seed, stream_id), lx_cuda_dropout_threshold(p),
                        (float)(1.0 / (1.0 - p)), first);
}

LX_CUDA_API void lx_dropout_forward(const lx_ctx *ctx,
                                    lx_bf16 *out,       // (N)
                                    const lx_bf16 *inp, // (N)
                                    size_t N, double p, uint64_t seed, uint64_t stream_id) {
  lx_dropout_forward_at(ctx, out, inp, N, p, seed, stream_id, 0);
}

/* The forward's p, seed, stream_id and first: its mask drawn again. */
LX_CUDA_API void lx_dropout_backward_at(const lx_ctx *ctx,
                                        lx_bf16 *dinp,       // (N)
                                        const lx_bf16 *dout, // (N)
                                        size_t N, double p, uint64_t seed, uint64_t stream_id, uint64_t first,
                                        lx_grad_mode mode) {
  LX_CUDA_LAUNCH_PIECES(lx_cuda_dropout_backward_kernel, N, lx_pieces_fit(N, {dinp, dout}), ctx->stream, dinp,
                        dout, N, lx_cuda_rng_key(seed, stream_id), lx_cuda_dropout_threshold(p),
                        (float)(1.0 / (1.0 - p)), first, mode);
}

LX_CUDA_API void lx_dropout_backward(const lx_ctx *ctx,
                                     lx_bf16 *dinp,       // (N)
                                     const lx_bf16 *dout, // (N)
                                     size_t N, double p, uint64_t seed, uint64_t stream_id,
                                     lx_grad_mode mode) {
  lx_dropout_backward_at(ctx, dinp, dout, N, p, seed, stream_id, 0, mode);
}

#endif
