/* lx_cuda_embedding.cuh — token and learned position embeddings, the GPU
 * twins of templates/cpu/lx_embedding.h.
 *
 * The token embedding's weight gradient is a scatter-add: two positions may
 * hold the same token. Atomics would make the sum's order (and so its bits)
 * vary from run to run; sorting the tokens would need scratch and a sort.
 * Instead each block owns a range of vocabulary rows, scans the token ids in
 * position order, and adds the matching dout rows in that order: every
 * dwte element is written by one thread, in the order the CPU uses. */
#ifndef LX_CUDA_EMBEDDING_CUH
#define LX_CUDA_EMBEDDING_CUH

#include "lx_cuda_common.cuh"

#define LX_CUDA_EMBED_THREADS 256
/* Vocabulary rows per block of the backward: the token ids are read once per
 * block, so V / 64 times in all (a few MB of L2 traffic for GPT-2). */
#define LX_CUDA_EMBED_ROWS_PER_BLOCK 64

/* out[r] = wte[tokens[r] - first] when this table holds the token (rows
 * first .. first + rows - 1 of the vocabulary), else 0: one block per position. */
__global__ void lx_cuda_embedding_forward_kernel(lx_bf16 *out,       // (B, T, C)
                                                 const int *tokens,  // (B, T)
                                                 const lx_bf16 *wte, // (rows, C)
                                                 int C, int first, int rows) {
  size_t r = blockIdx.x;
  int row = tokens[r] - first;
  bool held = row >= 0 && row < rows;
  const lx_bf16 *src = wte + (size_t)(held ? row : 0) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    out[r * C + c] = held ? src[c] : lx_to_bf16(0.0f);
}

/* Checks the ids on the device once, so the copy kernels need no branch: a
 * token out of range is a data error; flag it for the host to report. */
__global__ void lx_cuda_check_tokens_kernel(int *bad,          // (1) set to 1 on an id outside [0, V)
                                            const int *tokens, // (BT)
                                            int BT, int V) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < BT; r += gridDim.x * blockDim.x)
    if (tokens[r] < 0 || tokens[r] >= V) *bad = 1; /* an integer flag: any writer's 1 is the same */
}

/* Leaves *bad at 1 if any id is outside [0, V); the caller zeroes it first and
 * reads it when it next synchronises (the data loader's check, on device). */
LX_CUDA_API void lx_cuda_check_tokens(int *bad,          // (1)
                                        const int *tokens, // (BT)
                                        int BT, int V, cudaStream_t stream) {
  lx_cuda_check_tokens_kernel<<<lx_ceil_div((size_t)BT, 256), 256, 0, stream>>>(bad, tokens, BT, V);
  LX_CUDA_LAUNCHED();
}

/* A vocabulary-parallel rank's part: its rows first .. first + rows - 1 of
 * the table, zeros for the other tokens (the tensor-parallel all-reduce sums
 * the ranks' parts). */
LX_CUDA_API void lx_embedding_forward_shard(const lx_ctx *ctx,
                                            lx_bf16 *out,       // (B, T, C)
                                            const int *tokens,  // (B, T)
                                            const lx_bf16 *wte, // (rows, C)
                                            int B, int T, int C, int V, int first, int rows) {
  LX_CUDA_REQUIRE(B > 0 && T > 0 && C > 0 && V > 0 && first >= 0 && rows > 0);
  lx_cuda_embedding_forward_kernel<<<B * T, LX_CUDA_EMBED_THREADS, 0, ctx->stream>>>(out, tokens, wte, C, first,
                                                                                     rows);
  LX_CUDA_LAUNCHED();
}

LX_CUDA_API void lx_embedding_forward(const lx_ctx *ctx,
                                      lx_bf16 *out,       // (B, T, C)
                                      const int *tokens,  // (B, T)
                                      const lx_bf16 *wte, // (V, C)
                                      int B, int T, int C, int V) {
  lx_embedding_forward_shard(ctx, out, tokens, wte, B, T, C, V, 0, V);
}

/* dwte[v] += dout[r] for every r with tokens[r] == v, r in increasing order.
 * Block b owns rows [b * 64, b * 64 + 64); its threads scan the ids 256 at a
 * time, compact the matching positions in order (warp ballots plus a prefix
 * over the warps), then add each matching dout row across the channels. */
__global__ void __launch_bounds__(LX_CUDA_EMBED_THREADS)
    lx_cuda_embedding_backward_kernel(float *dwte,         // (rows, C): vocabulary rows first ..
                                      const lx_bf16 *dout, // (B, T, C)
                                      const int *tokens,   // (B, T)
                                      int BT, int C, int first, int rows) {
  __shared__ int matches[LX_CUDA_EMBED_THREADS];
  __shared__ int warp_counts[LX_CUDA_EMBED_THREADS / LX_WARP];
  int v0 = first + blockIdx.x * LX_CUDA_EMBED_ROWS_PER_BLOCK;
  int v1 = min(first + rows, v0 + LX_CUDA_EMBED_ROWS_PER_BLOCK);
  int lane = threadIdx.x % LX_WARP, warp = threadIdx.x / LX_WARP;
  for (int base = 0; base < BT; base += LX_CUDA_EMBED_THREADS) {
    int r = base + threadIdx.x;
    bool mine = r < BT && tokens[r] >= v0 && tokens[r] < v1;
    unsigned ballot = __ballot_sync(LX_FULL_MASK, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < LX_CUDA_EMBED_THREADS / LX_WARP; w++) {
      if (w < warp) before += warp_counts[w];
      total += warp_counts[w];
    }
    if (mine) matches[before + __popc(ballot & ((1u << lane) - 1u))] = r;
    __syncthreads();
    for (int m = 0; m < total; m++) {
      int row = matches[m];
      float *dw = dwte + (size_t)(tokens[row] - first) * C;
      const lx_bf16 *dy = dout + (size_t)row * C;
      for (int c = threadIdx.x; c < C; c += blockDim.x)
        dw[c] += lx_to_float(dy[c]);
    }
    __syncthreads(); /* matches and warp_counts are rewritten next round */
  }
}

/* The same for a vocabulary-parallel rank's rows first .. first + rows - 1. */
LX_CUDA_API void lx_embedding_backward_shard(const lx_ctx *ctx,
                                             float *dwte,         // (rows, C)
                                             const lx_bf16 *dout, // (B, T, C)
                                             const int *tokens,   // (B, T)
                                             int B, int T, int C, int V, int first, int rows) {
  LX_CUDA_REQUIRE(B > 0 && T > 0 && C > 0 && V > 0 && first >= 0 && rows > 0);
  lx_cuda_embedding_backward_kernel<<<lx_ceil_div((size_t)rows, LX_CUDA_EMBED_ROWS_PER_BLOCK),
                                      LX_CUDA_EMBED_THREADS, 0, ctx->stream>>>(dwte, dout, tokens, B * T, C, first,
                                                                               rows);
  LX_CUDA_LAUNCHED();
}

LX_CUDA_API void lx_embedding_backward(const lx_ctx *ctx,
                                       float *dwte,         // (V, C)
                                       const lx_bf16 *dout, // (B, T, C)
                                       const int *tokens,   // (B, T)
                                       int B, int T, int C, int V) {
  lx_embedding_backward_shard(ctx, dwte, dout, tokens, B, T, C, V, 0, V);
}

/* out[r] = wpe[(first + r) % T]: rows [first, first + rows) of the (B, T)
 * positions, which count from 0 in every sequence; one block per row. */
__global__ void lx_cuda_position_embedding_forward_kernel(lx_bf16 *out,       // (rows, C)
                                                          const lx_bf16 *wpe, // (T, C)
                                                          int T, int C, int first) {
  size_t r = blockIdx.x;
  const lx_bf16 *src = wpe + ((first + r) % T) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    out[r * C + c] = src[c];
}

/* dwpe[t][c] += the sum of dout[r, c] over the rows r at position t, in row
 * order (rows [first, first + rows) of the (B, T) positions); a thread per (t, c). */
__global__ void lx_cuda_position_embedding_backward_kernel(float *dwpe,         // (T, C)
                                                           const lx_bf16 *dout, // (rows, C)
                                                           int T, int C, int first, int rows) {
  size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x, TC = (size_t)T * C;
  if (e >= TC) return;
  int t = (int)(e / C);
  float sum = 0.0f;
  for (int r = (t - first % T + T) % T; r < rows; r += T)
    sum += lx_to_float(dout[(size_t)r * C + e % C]);
  dwpe[e] += sum;
}

/* Sequence parallelism: rows [first, first + rows) of the (B, T) positions. */
LX_CUDA_API void lx_position_embedding_forward_rows(const lx_ctx *ctx,
                                                    lx_bf16 *out,       // (rows, C)
                                                    const lx_bf16 *wpe, // (T, C)
                                                    int T, int C, int first, int rows) {
  lx_cuda_position_embedding_forward_kernel<<<rows, LX_CUDA_EMBED_THREADS, 0, ctx->stream>>>(out, wpe, T, C,
                                                                                             first);
  LX_CUDA_LAUNCHED();
}

LX_CUDA_API void lx_position_embedding_forward(const lx_ctx *ctx,
                                               lx_bf16 *out,       // (B, T, C)
                                               const lx_bf16 *wpe, // (T, C)
                                               int B, int T, int C) {
  lx_position_embedding_forward_rows(ctx, out, wpe, T, C, 0, B * T);
}

LX_CUDA_API void lx_position_embedding_backward_rows(const lx_ctx *ctx,
                                                     float *dwpe,         // (T, C)
                                                     const lx_bf16 *dout, // (rows, C)
                                                     int T, int C, int first, int rows) {
  lx_cuda_position_embedding_backward_kernel<<<lx_ceil_div((size_t)T * C, 256), 256, 0, ctx->stream>>>(
      dwpe, dout, T, C, first, rows);
  LX_CUDA_LAUNCHED();
}

/* dwpe[t] += sum over b of dout[b, t], b in order. */
LX_CUDA_API void lx_position_embedding_backward(const lx_ctx *ctx,
                                                float *dwpe,         // (T, C)
                                                const lx_bf16 *dout, // (B, T, C)
                                                int B, int T, int C) {
  lx_position_embedding_backward_rows(ctx, dwpe, dout, T, C, 0, B * T);
}

#endif
