/* sgemm_peak.c — what OpenBLAS reaches on the matrix products of one training
 * step of a GPT (by default GPT-2 124M at B=4, T=64), called exactly as
 * templates/cpu/lx_matmul.h calls them: row-major, the same transposes, the
 * same leading dimensions, beta = 1 (gradients accumulate).
 *
 * Per linear layer x (BT, IN) -> (BT, OUT) with weight W (OUT, IN):
 *   forward   out  = x W^T     m = BT,  n = OUT, k = IN   (N, T)
 *   backward  dx  += dout W    m = BT,  n = IN,  k = OUT  (N, N)
 *             dW  += dout^T x  m = OUT, n = IN,  k = BT   (T, N)
 * for qkv (C -> 3C), attention projection (C -> C), MLP up (C -> 4C) and
 * down (4C -> C), L times, and the tied lm_head (C -> VP, VP = V rounded up
 * to 128 as the generated program pads it) once.
 *
 * usage: sgemm_peak [B T C V L REPS]   (threads: OPENBLAS_NUM_THREADS)
 * Prints GFLOP/s per shape (median of REPS timed calls after one warm-up),
 * and the step-weighted total: all of one step's matmul FLOPs over the time
 * those calls take, as machine-readable lines "step_matmul_flops N" and
 * "step_matmul_gflops G". Build: gcc -O2 sgemm_peak.c -lopenblas -o sgemm_peak */
#define _POSIX_C_SOURCE 199309L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static float *random_matrix(size_t n) {
  float *p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "sgemm_peak: out of memory\n");
    exit(1);
  }
  unsigned s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 1103515245u + 12345u;
    p[i] = ((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return p;
}

/* Median seconds of one call of C(m, n) += op(A) op(B), row-major. */
static double time_gemm(int ta, int tb, int m, int n, int k, int reps) {
  float *a = random_matrix((size_t)m * k), *b = random_matrix((size_t)k * n), *c = random_matrix((size_t)m * n);
  int lda = ta ? m : k, ldb = tb ? k : n;
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int r = -1; r < reps; r++) {
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
                lda, b, ldb, 1.0f, c, n);
    double dt = now_s() - t0;
    if (r >= 0) t[r] = dt;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp_double);
  double median = t[reps / 2];
  free(t), free(a), free(b), free(c);
  return median;
}

int main(int argc, char **argv) {
  int B = 4, T = 64, C = 768, V = 50257, L = 12, reps = 7;
  if (argc > 1 && argc != 7) {
    fprintf(stderr, "usage: sgemm_peak [B T C V L REPS]\n");
    return 2;
  }
  if (argc == 7) B = atoi(argv[1]), T = atoi(argv[2]), C = atoi(argv[3]), V = atoi(argv[4]), L = atoi(argv[5]),
                 reps = atoi(argv[6]);
  int BT = B * T, VP = (V + 127) / 128 * 128;
  struct {
    const char *name;
    int in, out, count;
  } layers[] = {{"qkv      C->3C", C, 3 * C, L},
                {"attn.proj C->C", C, C, L},
                {"mlp.up   C->4C", C, 4 * C, L},
                {"mlp.down 4C->C", 4 * C, C, L},
                {"lm_head  C->VP", C, VP, 1}};
  printf("OpenBLAS sgemm on the matmuls of one training step: B=%d T=%d (BT=%d) C=%d VP=%d L=%d\n", B, T, BT, C, VP,
         L);
  printf("  %-15s %-9s %6s %6s %6s %5s %10s %9s\n", "layer", "pass", "m", "n", "k", "calls", "ms/call", "GFLOP/s");
  double step_flops = 0, step_time = 0;
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    int in = layers[i].in, out = layers[i].out;
    struct {
      const char *pass;
      int ta, tb, m, n, k;
    } calls[] = {{"fwd x.W^T", 0, 1, BT, out, in}, {"bwd dx", 0, 0, BT, in, out}, {"bwd dW", 1, 0, out, in, BT}};
    for (int j = 0; j < 3; j++) {
      double s = time_gemm(calls[j].ta, calls[j].tb, calls[j].m, calls[j].n, calls[j].k, reps);
      double flops = 2.0 * calls[j].m * calls[j].n * calls[j].k;
      step_flops += flops * layers[i].count;
      step_time += s * layers[i].count;
      printf("  %-15s %-9s %6d %6d %6d %5d %10.3f %9.1f\n", layers[i].name, calls[j].pass, calls[j].m, calls[j].n,
             calls[j].k, layers[i].count, s * 1e3, flops / s / 1e9);
    }
  }
  printf("  one step: %.2f GFLOP of matmuls in %.1f ms of sgemm = %.1f GFLOP/s\n", step_flops / 1e9, step_time * 1e3,
         step_flops / step_time / 1e9);
  printf("step_matmul_flops %.0f\n", step_flops);
  printf("step_matmul_seconds %.6f\n", step_time);
  printf("step_matmul_gflops %.2f\n", step_flops / step_time / 1e9);
  return 0;
}
