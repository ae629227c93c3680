/* lx_gemm_layout.h — a row-major strided-batched matrix product, and the
 * column-major problem cuBLASLt is given for it. Host code only, valid C11
 * and C++17, so that tests/cuda/attention_gemms_test.c checks the
 * translation on the CPU against cuBLAS's documented column-major semantics.
 *
 * The product, for every p < batch (row-major, as templates/cpu):
 *   D_p (m x n) = alpha op(A_p) op(B_p) + beta D_p
 *   A_p = a + p * stride_a: (m x k) with row pitch lda, or (k x m) if trans_a
 *   B_p = b + p * stride_b: (k x n) with row pitch ldb, or (n x k) if trans_b
 *   D_p = d + p * stride_d: (m x n) with row pitch ldd
 * A row-major X with pitch ld is the column-major X^T with the same leading
 * dimension, so cuBLASLt computes D^T = op(B)^T op(A)^T: its first operand
 * is our B, its second our A, and nothing is copied or transposed. */
#ifndef LX_GEMM_LAYOUT_H
#define LX_GEMM_LAYOUT_H

typedef struct {
  int m, n, k;
  int trans_a, trans_b;
  long long lda, ldb, ldd;                /* row pitches, in elements      */
  long long stride_a, stride_b, stride_d; /* from one matrix to the next   */
  int batch;
} lx_gemm_shape;

/* One column-major matrix as cuBLASLt's layout holds it. */
typedef struct {
  long long rows, cols, ld, stride;
} lx_colmajor_matrix;

/* cuBLASLt's problem: D' (rows n, cols m) = op(first) op(second). */
typedef struct {
  int transpose_first, transpose_second; /* CUBLAS_OP_T where 1 */
  lx_colmajor_matrix first, second, d;   /* first = our B, second = our A */
  int batch;
} lx_colmajor_gemm;

static inline lx_colmajor_matrix lx_colmajor_matrix_of(long long rows, long long cols, long long ld,
                                                       long long stride) {
  lx_colmajor_matrix x;
  x.rows = rows, x.cols = cols, x.ld = ld, x.stride = stride;
  return x;
}

/* B stored row-major (k x n) is column-major (n x k): op(B)^T as it is; stored
 * (n x k) it is column-major (k x n) and must be transposed. Likewise A. */
static inline lx_colmajor_gemm lx_gemm_colmajor(const lx_gemm_shape *s) {
  lx_colmajor_gemm g;
  g.transpose_first = s->trans_b, g.transpose_second = s->trans_a;
  g.first = s->trans_b ? lx_colmajor_matrix_of(s->k, s->n, s->ldb, s->stride_b)
                       : lx_colmajor_matrix_of(s->n, s->k, s->ldb, s->stride_b);
  g.second = s->trans_a ? lx_colmajor_matrix_of(s->m, s->k, s->lda, s->stride_a)
                        : lx_colmajor_matrix_of(s->k, s->m, s->lda, s->stride_a);
  g.d = lx_colmajor_matrix_of(s->n, s->m, s->ldd, s->stride_d);
  g.batch = s->batch;
  return g;
}

/* A dense row-major (m x n) product, one matrix: what a linear layer runs. */
static inline lx_gemm_shape lx_gemm_dense(int m, int n, int k, int trans_a, int trans_b) {
  lx_gemm_shape s;
  s.m = m, s.n = n, s.k = k, s.trans_a = trans_a, s.trans_b = trans_b;
  s.lda = trans_a ? m : k, s.ldb = trans_b ? k : n, s.ldd = n;
  s.stride_a = s.stride_b = s.stride_d = 0;
  s.batch = 1;
  return s;
}

static inline int lx_gemm_shape_equal(const lx_gemm_shape *x, const lx_gemm_shape *y) {
  return x->m == y->m && x->n == y->n && x->k == y->k && x->trans_a == y->trans_a &&
         x->trans_b == y->trans_b && x->lda == y->lda && x->ldb == y->ldb && x->ldd == y->ldd &&
         x->stride_a == y->stride_a && x->stride_b == y->stride_b && x->stride_d == y->stride_d &&
         x->batch == y->batch;
}

#endif
