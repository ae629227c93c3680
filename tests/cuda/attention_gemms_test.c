/* attention_gemms_test.c — the materialized attention of the CUDA programs
 * (lx_cuda_attention_gemm.cuh) as it cuts its work into strided-batched
 * products (lx_attention_gemms.h), run on the CPU without a GPU:
 *   - every product goes through lx_gemm_colmajor, the problem cuBLASLt is
 *     handed, and is evaluated here by cuBLAS's documented column-major
 *     semantics (C = alpha op(A) op(B) + beta C, element (i, j) of a
 *     column-major X at X[i + j ld], batch p at X + p stride);
 *   - the softmax between them is this test's own (what the kernels compute),
 *     the dropout decisions drawn from the counters the kernels draw them
 *     from (lx_rng.h), and under dropout the weights a block's own, in the
 *     scratch's second place, formed by the forward and again by the
 *     backward before its dV;
 *   - the results are compared with templates/cpu/lx_attention.h (the CPU
 *     twins), forward (out, probs) and backward (dqkv), on shapes that make
 *     several row blocks, partial last blocks, kv-head slices and grouped
 *     queries; and the blocks must cover every (b, h, i) exactly once;
 *   - a forward cut by kv heads (lx_attention_forward_heads): its pieces, run
 *     one after another, write exactly what the whole call writes, and one
 *     piece alone leaves the other heads' elements as they were.
 * The kernels' own bf16 arithmetic is checked on a GPU (kernel_twins.cu). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_twins.h"
#include "lx_attention_gemms.h"
#include "lx_rng.h"

#define SEED 1234
#define STREAM 77

/* Column-major op(X)(i, l) of one batch matrix. */
static double colmajor_at(const float *x, const lx_colmajor_matrix *m, int transpose, long long i,
                          long long l) {
  return transpose ? x[l + i * m->ld] : x[i + l * m->ld];
}

/* cuBLASLt's problem on the CPU: d = alpha op(first) op(second) + beta d. */
static void run_colmajor(const lx_colmajor_gemm *g, const float *first, const float *second, float *d,
                         float alpha, float beta) {
  long long rows = g->d.rows, cols = g->d.cols;
  long long inner = g->transpose_first ? g->first.rows : g->first.cols;
  long long first_rows = g->transpose_first ? g->first.cols : g->first.rows;
  long long second_cols = g->transpose_second ? g->second.rows : g->second.cols;
  long long second_inner = g->transpose_second ? g->second.cols : g->second.rows;
  if (first_rows != rows || second_cols != cols || second_inner != inner) {
    printf("not ok - inconsistent column-major problem\n");
    check_failures++;
    return;
  }
  for (int p = 0; p < g->batch; p++) {
    const float *f = first + p * g->first.stride, *s = second + p * g->second.stride;
    float *out = d + p * g->d.stride;
    for (long long i = 0; i < rows; i++)
      for (long long j = 0; j < cols; j++) {
        double sum = 0;
        for (long long l = 0; l < inner; l++)
          sum += colmajor_at(f, &g->first, g->transpose_first, i, l) *
                 colmajor_at(s, &g->second, g->transpose_second, l, j);
        out[i + j * g->d.ld] = (float)(alpha * sum + beta * out[i + j * g->d.ld]);
      }
  }
}

/* One product of the table: A, B and D are the buffers it names. */
static void run_product(lx_attn_product p, lx_attn_sizes s, lx_attn_block k, const float *a, const float *b,
                        float *d) {
  lx_attn_gemm g = lx_attn_gemm_of(p, s, k);
  lx_colmajor_gemm cm = lx_gemm_colmajor(&g.shape);
  run_colmajor(&cm, b + g.b_at, a + g.a_at, d + g.d_at, g.alpha, g.accumulate ? 1.0f : 0.0f);
}

typedef struct {
  lx_attn_sizes s; /* its dropout flag: p > 0 */
  double p;
  int heads; /* kv heads per block */
} attn_case;

static double max_rel_diff(const float *got, const float *want, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)got[i] - want[i]));
    ref = fmax(ref, fabs((double)want[i]));
  }
  return diff / (ref > 1e-30 ? ref : 1e-30);
}

static float *random_floats(size_t n, float amplitude, uint64_t *state) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = amplitude * (float)((double)(*state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return x;
}

/* Score (b, h, i, j)'s dropout decision, drawn as the kernels draw it (all
 * heads on one rank: its counter is its place in (B, H, T, T)). */
static int kept(long long at, int j, double p) {
  return lx_dropout_keep(SEED, STREAM, (uint64_t)(at + j), lx_dropout_threshold(p));
}

/* A block's row x, i: its offset in the scratch's (heads, rows, T) and in
 * the (B, H, T, T) probs. */
static long long pitch_of(lx_attn_block k, int x, int i, int T) {
  return ((long long)x * (k.i1 - k.i0) + i - k.i0) * T;
}
static long long score_of(lx_attn_sizes s, lx_attn_block k, int x, int i) {
  return lx_attn_score(s, k.b, (k.g0 + x) * (s.H / s.KVH) + k.r, i);
}

/* The weights of a block's columns [0, i1) from its probs, into the
 * scratch's second place (second): P / (1 - p) where kept, else 0. */
static void block_weights(lx_attn_sizes s, lx_attn_block k, const float *probs, float *second, double p) {
  for (int x = 0; x < k.heads; x++)
    for (int i = k.i0; i < k.i1; i++) {
      long long at = score_of(s, k, x, i), row = pitch_of(k, x, i, s.T);
      for (int j = 0; j < k.i1; j++)
        second[row + j] = j <= i && kept(at, j, p) ? (float)(probs[at + j] / (1 - p)) : 0.0f;
    }
}

/* The forward kernel's softmax over a block's fp32 scores: probs, and under
 * dropout the block's weights. */
static void block_softmax(lx_attn_sizes s, lx_attn_block k, const float *scores, float *probs, float *second,
                          double p) {
  for (int x = 0; x < k.heads; x++)
    for (int i = k.i0; i < k.i1; i++) {
      const float *row = scores + pitch_of(k, x, i, s.T);
      long long at = score_of(s, k, x, i);
      double max = -INFINITY, sum = 0;
      for (int j = 0; j <= i; j++)
        max = fmax(max, row[j]);
      for (int j = 0; j <= i; j++)
        sum += exp(row[j] - max);
      for (int j = 0; j < s.T; j++)
        probs[at + j] = j <= i ? (float)(exp(row[j] - max) / sum) : 0.0f;
    }
  if (s.dropout) block_weights(s, k, probs, second, p);
}

/* The backward kernel: dS = P (keep dP / (1 - p) - Di) / sqrt(D), Di the row's
 * sum of weights times dP; zero past the diagonal (the products read up to
 * i1). Under dropout the weights are the block's in second, which dS then
 * overwrites; else the probs. */
static void block_softmax_backward(lx_attn_sizes s, lx_attn_block k, const float *dprobs, float *second,
                                   const float *probs, double p) {
  for (int x = 0; x < k.heads; x++)
    for (int i = k.i0; i < k.i1; i++) {
      long long row = pitch_of(k, x, i, s.T), at = score_of(s, k, x, i);
      const float *weights = s.dropout ? second + row : probs + at;
      double Di = 0;
      for (int j = 0; j <= i; j++)
        Di += (double)weights[j] * dprobs[row + j];
      for (int j = 0; j < k.i1; j++) {
        double keep = kept(at, j, p) / (1 - p);
        second[row + j] = j <= i ? (float)(probs[at + j] * (keep * dprobs[row + j] - Di) / sqrt(s.D)) : 0.0f;
      }
    }
}

/* The forward's blocks over the kv heads of v: out and probs; seen counts
 * the blocks that cover each (b, h, i). Returns how many blocks ran. */
static int run_forward(lx_attn_sizes s, lx_attn_slices v, const float *qkv, double p, float *out,
                       float *probs, int *seen) {
  size_t block_n = (size_t)v.per_block * lx_attn_block_rows(s.T) * s.T;
  float *scores = calloc(block_n, sizeof *scores), *second = calloc(block_n, sizeof *second);
  int blocks = 0;
  lx_attn_block k = lx_attn_first_block(s, v);
  do {
    run_product(LX_ATTN_SCORES, s, k, qkv, qkv, scores);
    block_softmax(s, k, scores, probs, second, p);
    run_product(LX_ATTN_OUT, s, k, s.dropout ? second : probs, qkv, out);
    for (int x = 0; x < k.heads; x++)
      for (int i = k.i0; i < k.i1; i++)
        seen[((size_t)k.b * s.H + (k.g0 + x) * (s.H / s.KVH) + k.r) * s.T + i]++;
    blocks++;
  } while (lx_attn_next_block(s, v, &k));
  free(scores), free(second);
  return blocks;
}

static void check_case(attn_case c) {
  lx_attn_sizes s = c.s;
  size_t W = (size_t)lx_attn_width(s), qkv_n = (size_t)s.B * s.T * W, out_n = (size_t)s.B * s.T * s.H * s.D;
  size_t scores_n = (size_t)s.B * s.H * s.T * s.T, block_n = (size_t)c.heads * lx_attn_block_rows(s.T) * s.T;
  uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(s.T * 131 + s.H);
  float *qkv = random_floats(qkv_n, 1.5f, &state), *dout = random_floats(out_n, 1, &state);
  float *dqkv0 = random_floats(qkv_n, 0.05f, &state);
  float *out = calloc(out_n, sizeof *out), *probs = calloc(scores_n, sizeof *probs);
  float *dqkv = malloc(qkv_n * sizeof *dqkv);
  twin_attention_forward(out, probs, qkv, s.B, s.T, s.H, s.KVH, s.D, c.p, SEED, STREAM, 0, s.H);
  memcpy(dqkv, dqkv0, qkv_n * sizeof *dqkv);
  twin_attention_backward(dqkv, dout, qkv, probs, s.B, s.T, s.H, s.KVH, s.D, c.p, SEED, STREAM, 0, s.H);

  float *got_out = calloc(out_n, sizeof *got_out), *got_probs = calloc(scores_n, sizeof *got_probs);
  float *got_dqkv = malloc(qkv_n * sizeof *got_dqkv);
  float *scratch = calloc(block_n, sizeof *scratch), *second = calloc(block_n, sizeof *second);
  int *seen = calloc((size_t)s.B * s.H * s.T, sizeof *seen);
  memcpy(got_dqkv, dqkv0, qkv_n * sizeof *got_dqkv);
  lx_attn_slices all = {0, s.KVH, c.heads};
  run_forward(s, all, qkv, c.p, got_out, got_probs, seen);
  lx_attn_block k = lx_attn_first_block(s, all);
  do {
    if (s.dropout) block_weights(s, k, got_probs, second, c.p);
    run_product(LX_ATTN_DV, s, k, s.dropout ? second : got_probs, dout, got_dqkv);
    run_product(LX_ATTN_DP, s, k, dout, qkv, scratch);
    block_softmax_backward(s, k, scratch, second, got_probs, c.p);
    run_product(LX_ATTN_DQ, s, k, second, qkv, got_dqkv);
    run_product(LX_ATTN_DK, s, k, second, qkv, got_dqkv);
  } while (lx_attn_next_block(s, all, &k));

  int once = 1;
  for (size_t i = 0; i < (size_t)s.B * s.H * s.T; i++)
    once &= seen[i] == 1;
  char name[128];
  snprintf(name, sizeof name, "B=%d T=%d H=%d KVH=%d D=%d p=%.1f, %d kv heads a block", s.B, s.T, s.H, s.KVH,
           s.D, c.p, c.heads);
  CHECK(once, "%s: the blocks cover every (b, h, i) once", name);
  double tol = 1e-5;
  CHECK(max_rel_diff(got_out, out, out_n) <= tol, "%s: out equals the CPU's (%.1e)", name,
        max_rel_diff(got_out, out, out_n));
  CHECK(max_rel_diff(got_probs, probs, scores_n) <= tol, "%s: probs equal the CPU's (%.1e)", name,
        max_rel_diff(got_probs, probs, scores_n));
  CHECK(max_rel_diff(got_dqkv, dqkv, qkv_n) <= tol, "%s: dqkv equals the CPU's (%.1e)", name,
        max_rel_diff(got_dqkv, dqkv, qkv_n));
  free(qkv), free(dout), free(dqkv0), free(out), free(probs), free(dqkv);
  free(got_out), free(got_probs), free(got_dqkv), free(scratch), free(second), free(seen);
}

#define SENTINEL (-1e30f) /* what no block writes: softmaxes are finite */

/* out (out_n) and probs (scores_n), all sentinels */
static void fill_sentinels(float *bufs[2], size_t out_n, size_t scores_n) {
  for (int b = 0; b < 2; b++)
    for (size_t i = 0; i < (b ? scores_n : out_n); i++)
      bufs[b][i] = SENTINEL;
}

/* Piece q of `pieces` of the kv heads, [q KVH / pieces, (q + 1) KVH / pieces). */
static lx_attn_slices piece_of(lx_attn_sizes s, int heads, int q, int pieces) {
  lx_attn_slices v = {q * s.KVH / pieces, (q + 1) * s.KVH / pieces, heads};
  return v;
}

/* Whether x holds exactly want's values in the elements of the query heads
 * of kv heads [v.first, v.end) and the sentinel in every other: x is
 * (B, outer, H, inner) with `inner` elements per head. */
static int piece_written(const float *x, const float *want, lx_attn_sizes s, lx_attn_slices v, size_t outer,
                         size_t inner) {
  int R = s.H / s.KVH, ok = 1;
  for (size_t a = 0; a < (size_t)s.B * outer; a++)
    for (int h = 0; h < s.H; h++)
      for (size_t e = 0; e < inner; e++) {
        size_t at = (a * s.H + h) * inner + e;
        ok &= v.first <= h / R && h / R < v.end ? x[at] == want[at] : x[at] == SENTINEL;
      }
  return ok;
}

/* The forward cut into `pieces` ranges of kv heads, run one after another
 * into buffers of sentinels, writes what the whole call writes, bit for bit,
 * and covers each (b, h, i) once, in lx_attn_block_count's blocks; piece 1
 * alone writes its heads' elements only. */
static void check_pieces(attn_case c, int pieces) {
  lx_attn_sizes s = c.s;
  size_t qkv_n = (size_t)s.B * s.T * lx_attn_width(s), out_n = (size_t)s.B * s.T * s.H * s.D;
  size_t scores_n = (size_t)s.B * s.H * s.T * s.T, rows_n = (size_t)s.B * s.H * s.T;
  uint64_t state = 0x243f6a8885a308d3ull ^ (uint64_t)(s.T * 131 + s.H);
  float *qkv = random_floats(qkv_n, 1.5f, &state);
  float *bufs[2][2]; /* [whole, pieces][out, probs] */
  int *seen[2];
  for (int w = 0; w < 2; w++) {
    bufs[w][0] = malloc(out_n * sizeof(float)), bufs[w][1] = malloc(scores_n * sizeof(float));
    seen[w] = calloc(rows_n, sizeof(int));
    fill_sentinels(bufs[w], out_n, scores_n);
  }
  lx_attn_slices all = {0, s.KVH, c.heads};
  run_forward(s, all, qkv, c.p, bufs[0][0], bufs[0][1], seen[0]);
  int counted = 1;
  for (int q = 0; q < pieces; q++) {
    lx_attn_slices v = piece_of(s, c.heads, q, pieces);
    int blocks = run_forward(s, v, qkv, c.p, bufs[1][0], bufs[1][1], seen[1]);
    counted &= blocks == (int)lx_attn_block_count(s, v);
  }
  int once = 1;
  for (size_t i = 0; i < rows_n; i++)
    once &= seen[1][i] == 1;
  char name[160];
  snprintf(name, sizeof name, "B=%d T=%d H=%d KVH=%d D=%d p=%.1f, %d kv heads a block, %d pieces of kv heads",
           s.B, s.T, s.H, s.KVH, s.D, c.p, c.heads, pieces);
  CHECK(once && counted,
        "%s: the pieces' blocks cover every (b, h, i) once, as many as lx_attn_block_count says", name);
  CHECK(!memcmp(bufs[1][0], bufs[0][0], out_n * sizeof(float)) &&
            !memcmp(bufs[1][1], bufs[0][1], scores_n * sizeof(float)),
        "%s: run one after another, they write out and probs of the whole call, bit for bit", name);

  lx_attn_slices one = piece_of(s, c.heads, 1, pieces);
  fill_sentinels(bufs[1], out_n, scores_n);
  run_forward(s, one, qkv, c.p, bufs[1][0], bufs[1][1], seen[1]);
  CHECK(piece_written(bufs[1][0], bufs[0][0], s, one, (size_t)s.T, (size_t)s.D) &&
            piece_written(bufs[1][1], bufs[0][1], s, one, 1, (size_t)s.T * s.T),
        "%s: kv heads [%d, %d) alone write their query heads' elements, and no other", name, one.first,
        one.end);
  free(qkv);
  for (int w = 0; w < 2; w++)
    free(bufs[w][0]), free(bufs[w][1]), free(seen[w]);
}

/* The scratch a program allocates holds a backward block of at least one
 * kv head (fp32 dP and bf16 dS: 6 bytes a score), all of them while the cap
 * allows, and never much more; a forward block (fp32 scores, and under
 * dropout the bf16 weights after them) as many or more. */
static void check_scratch_sizes(void) {
  static const int shapes[][2] = {{67, 2}, {2048, 32}, {2048, 8}, {8192, 32}, {32768, 8}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int dropout = 0; dropout < 2; dropout++) {
      lx_attn_sizes s = {1, shapes[i][0], shapes[i][1], shapes[i][1], 64, dropout};
      long long bytes = lx_attn_scratch_floats(s.T, s.KVH) * 4;
      int backward = lx_attn_heads_per_block(s, bytes, lx_attn_score_bytes(s, 1));
      int forward = lx_attn_heads_per_block(s, bytes, lx_attn_score_bytes(s, 0));
      long long one = (long long)lx_attn_block_rows(s.T) * s.T * 6;
      int expected = LX_ATTN_SCRATCH_CAP_BYTES / one < 1 ? 1 : (int)(LX_ATTN_SCRATCH_CAP_BYTES / one);
      if (expected > s.KVH) expected = s.KVH;
      CHECK(backward == expected && (dropout ? forward == backward : forward >= backward) &&
                bytes < (long long)(backward + 1) * one,
            "T=%d KVH=%d%s: the scratch (%.1f MiB) holds %d kv heads a backward block, %d a forward one", s.T,
            s.KVH, dropout ? ", dropout" : "", bytes / 1048576.0, backward, forward);
    }
}

int main(void) {
  const attn_case cases[] = {
      {{2, 67, 4, 2, 16, 0}, 0.0, 2}, /* one row block, all kv heads at once               */
      {{2, 67, 4, 2, 16, 1}, 0.2, 1}, /* kv heads one at a time, dropout                    */
      {{1, 600, 2, 2, 8, 1}, 0.1, 1}, /* three row blocks, the last partial                 */
      {{1, 45, 6, 3, 40, 1}, 0.1, 2}, /* groups of two query heads, a partial head slice    */
      {{2, 300, 4, 1, 8, 0}, 0.0, 1}, /* one kv head for four query heads, two row blocks   */
      {{1, 512, 3, 3, 8, 1}, 0.2, 3}, /* rows a multiple of the block                       */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(cases[i]);
  const struct {
    attn_case c;
    int pieces;
  } cut[] = {
      {{{2, 67, 8, 4, 16, 1}, 0.2, 2}, 2}, /* groups of two, pieces of a block's kv heads      */
      {{{2, 67, 8, 4, 16, 1}, 0.2, 3}, 4}, /* one kv head a piece, blocks of up to three         */
      {{{1, 300, 4, 4, 8, 1}, 0.1, 3}, 4}, /* groups of one, two row blocks                      */
      {{{1, 300, 4, 4, 8, 0}, 0.0, 1}, 2}, /* groups of one, a kv head a block                   */
      {{{1, 45, 6, 3, 40, 1}, 0.1, 2}, 2}, /* pieces of one and two kv heads                     */
  };
  for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++)
    check_pieces(cut[i].c, cut[i].pieces);
  check_scratch_sizes();
  return check_exit_status();
}
