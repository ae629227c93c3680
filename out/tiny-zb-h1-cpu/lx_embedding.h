/* lx_embedding.h — token and learned position embeddings.
 *
 * The prologue adds them with add(): each is its own op with its own output,
 * as the model file writes it. The token embedding saves its token ids for
 * the scatter-add of its weight gradient; the position embedding saves
 * nothing (its gradient only sums dout over the batch). */
#ifndef LX_EMBEDDING_H
#define LX_EMBEDDING_H

#include "lx_common.h"

/* Channels per parallel task of the scatter-adds below. */
#define LX_EMBED_CHANNEL_BLOCK 64

/* A vocabulary-parallel rank holds rows [first, first + rows) of the table:
 * tokens outside them give zero rows, and the tensor-parallel all-reduce
 * after this op sums the ranks' outputs into the whole lookup. */
static inline void lx_embedding_forward_shard(const lx_ctx *ctx,
                                              real *out,         // (B, T, C)
                                              const int *tokens, // (B, T)
                                              const real *wte,   // (rows, C)
                                              int B, int T, int C, int V, int first, int rows) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < B * T; r++) {
    int tok = tokens[r];
    LX_CHECK(tok >= 0 && tok < V);
    if (tok >= first && tok < first + rows)
      memcpy(out + (size_t)r * C, wte + (size_t)(tok - first) * C, (size_t)C * sizeof(real));
    else
      memset(out + (size_t)r * C, 0, (size_t)C * sizeof(real));
  }
}

static inline void lx_embedding_forward(const lx_ctx *ctx,
                                        real *out,         // (B, T, C)
                                        const int *tokens, // (B, T)
                                        const real *wte,   // (V, C)
                                        int B, int T, int C, int V) {
  lx_embedding_forward_shard(ctx, out, tokens, wte, B, T, C, V, 0, V);
}

/* dwte[tokens[r]] += dout[r]. Two positions may hold the same token, so rows
 * cannot be split over threads; channels can: each task owns a block of
 * channels and adds the rows in order, the same order for any thread count. */
static inline void lx_embedding_backward_shard(const lx_ctx *ctx,
                                               real *dwte,        // (rows, C)
                                               const real *dout,  // (B, T, C)
                                               const int *tokens, // (B, T)
                                               int B, int T, int C, int V, int first, int rows) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int c0 = 0; c0 < C; c0 += LX_EMBED_CHANNEL_BLOCK) {
    int c1 = c0 + LX_EMBED_CHANNEL_BLOCK < C ? c0 + LX_EMBED_CHANNEL_BLOCK : C;
    for (int r = 0; r < B * T; r++) {
      int tok = tokens[r];
      LX_CHECK(tok >= 0 && tok < V);
      if (tok < first || tok >= first + rows) continue;
      real *dw = dwte + (size_t)(tok - first) * C;
      const real *dy = dout + (size_t)r * C;
      for (int c = c0; c < c1; c++)
        dw[c] += dy[c];
    }
  }
}

static inline void lx_embedding_backward(const lx_ctx *ctx,
                                         real *dwte,        // (V, C)
                                         const real *dout,  // (B, T, C)
                                         const int *tokens, // (B, T)
                                         int B, int T, int C, int V) {
  lx_embedding_backward_shard(ctx, dwte, dout, tokens, B, T, C, V, 0, V);
}

/* Rows [first, first + rows) of the (B, T) positions: a sequence shard. */
static inline void lx_position_embedding_forward_rows(const lx_ctx *ctx,
                                                      real *out,       // (rows, C)
                                                      const real *wpe, // (T, C)
                                                      int T, int C, int first, int rows) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int r = 0; r < rows; r++)
    memcpy(out + (size_t)r * C, wpe + (size_t)((first + r) % T) * C, (size_t)C * sizeof(real));
}

/* out[b, t] = wpe[t]: positions count from 0 in every sequence. */
static inline void lx_position_embedding_forward(const lx_ctx *ctx,
                                                 real *out,       // (B, T, C)
                                                 const real *wpe, // (T, C)
                                                 int B, int T, int C) {
  lx_position_embedding_forward_rows(ctx, out, wpe, T, C, 0, B * T);
}

/* dwpe[t] += the sum of dout over the rows at position t, in row order:
 * rows [first, first + rows) of the (B, T) positions. */
static inline void lx_position_embedding_backward_rows(const lx_ctx *ctx,
                                                       real *dwpe,       // (T, C)
                                                       const real *dout, // (rows, C)
                                                       int T, int C, int first, int rows) {
#pragma omp parallel for num_threads(ctx->threads)
  for (int t = 0; t < T; t++)
    for (int r = (t - first % T + T) % T; r < rows; r += T)
      lx_axpy(dwpe + (size_t)t * C, 1, dout + (size_t)r * C, C);
}

/* dwpe[t] += sum over b of dout[b, t], b in order. */
static inline void lx_position_embedding_backward(const lx_ctx *ctx,
                                                  real *dwpe,       // (T, C)
                                                  const real *dout, // (B, T, C)
                                                  int B, int T, int C) {
  lx_position_embedding_backward_rows(ctx, dwpe, dout, T, C, 0, B * T);
}

#endif
