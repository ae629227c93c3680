/* attention_lynx.cu — how fast an emitted program's flash attention runs:
 * lynx's own kernels (templates/cuda/lx_cuda_attention.cuh; "impl":
 * "lynxgen-kernels"), or, built with -DLX_CUDNN_ATTENTION and linked with
 * lx_cuda_cudnn_attention.o, cuDNN's fused attention as the program calls it
 * ("impl": "lynxgen", what ATTENTION=cudnn programs run). Causal, bf16, no
 * dropout, H = KVH (no grouped queries), forward alone and forward + backward.
 *
 * Sizes: head dim D in {64, 128}, sequence T in {1024, 2048, 4096, 8192},
 * B * T = 16384 tokens and H * D = 2048 throughout (H = 32 for D = 64, 16 for
 * D = 128), so every size does the same work per token of sequence.
 * qkv (B, T, 3 * H * D) and dout (B, T, H * D) hold random values in (-1, 1).
 * Each measurement: 3 warm-up iterations, then the median of 10 timed with CUDA
 * events (the zeroing of dqkv, which the backward adds into, is not timed).
 *
 * FLOPs, the PyTorch / FlashAttention benchmarks' causal convention:
 *   forward = 4 * B * H * T * T * D / 2, backward = 2.5 x forward,
 *   forward + backward = 3.5 x forward.
 *
 * Prints one JSON object per size on stdout (an "error" one where a size
 * fails; the exit status is then 1), "skipped: no GPU" without a GPU. Arguments, if any, are the
 * sequence lengths to run instead of the four above.
 *
 * Build (from the repository root):
 *   nvcc -std=c++17 -O2 -gencode arch=compute_90,code=sm_90 -Werror all-warnings \
 *     -Xcompiler -Wall,-Wextra,-Werror -Itemplates/cuda \
 *     -isystem /usr/lib/x86_64-linux-gnu/openmpi/include \
 *     -o build/gpu-kit/bin/attention_lynx bench/gpu/attention_lynx.cu \
 *     -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi
 * (the kernel headers include mpi.h and nccl.h; only MPI is linked, for the
 * headers' error path, which calls MPI_Initialized / MPI_Abort.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#ifdef LX_CUDNN_ATTENTION /* lx_cuda_cudnn_attention.o calls lynx's launchers and error path: define them    \
                             here */
#define LX_CUDA_API
#endif
#include "lx_cuda_attention.cuh"

#ifdef LX_CUDNN_ATTENTION
#define IMPL "lynxgen"
#else
#define IMPL "lynxgen-kernels"
#endif

static const int WARMUP = 3, ITERS = 10;
static const int TOKENS = 16384; /* B * T */
static const int WIDTH = 2048;   /* H * D */

/* A failing CUDA call ends the current size with its message. */
#define TRY(call)                                                                                            \
  do {                                                                                                       \
    cudaError_t try_status_ = (call);                                                                        \
    if (try_status_ != cudaSuccess) {                                                                        \
      *error = std::string(#call) + ": " + cudaGetErrorString(try_status_);                                  \
      return false;                                                                                          \
    }                                                                                                        \
  } while (0)

/* Values in (-1, 1), never 0: an odd multiple of 2^-24, from lynx's counter-based generator. */
__global__ void fill_uniform(lx_bf16 *x, size_t n, uint64_t key) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int32_t k = (int32_t)(lx_cuda_rng_bits_keyed(key, i) >> 40); /* 24 bits */
    int32_t odd = 2 * k + 1 - (1 << 24);                             /* odd, |odd| < 2^24 */
    x[i] = lx_to_bf16((float)odd * (0.999f / 16777216.0f));
  }
}

/* The device buffers of one size, freed however the size ends. */
struct Buffers {
  lx_bf16 *qkv = nullptr, *dqkv = nullptr, *out = nullptr, *dout = nullptr;
  float *lse = nullptr, *scratch = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Buffers() {
    cudaFree(qkv), cudaFree(dqkv), cudaFree(out), cudaFree(dout), cudaFree(lse), cudaFree(scratch);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

struct Result {
  double fwd_ms, fwd_bwd_ms;
};

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The shapes lx_attn_shape_checked accepts, checked here first: it ends the
 * process on a shape it refuses, where this benchmark reports and goes on. */
static const char *shape_refused(int B, int T, int H, int KVH, int D) {
  if (B <= 0 || T <= 0 || D <= 0 || KVH <= 0 || H % KVH != 0) return "bad shape";
  if (D > LX_ATTN_MAX_HEAD_DIM) return "head dim above LX_ATTN_MAX_HEAD_DIM (256)";
  if ((size_t)B * H >= 65536) return "B * H must be below 65536 (grid y)";
  return nullptr;
}

/* How many of the n bf16 values are NaN or infinite, and whether all are 0. */
static bool check_bf16(const lx_bf16 *device, size_t n, const char *name, std::string *error) {
  std::vector<lx_bf16> host(n);
  TRY(cudaMemcpy(host.data(), device, n * sizeof(lx_bf16), cudaMemcpyDeviceToHost));
  size_t bad = 0, nonzero = 0;
  for (size_t i = 0; i < n; i++) {
    float x = lx_to_float(host[i]);
    bad += !isfinite(x);
    nonzero += x != 0.0f;
  }
  if (bad || !nonzero) {
    *error = std::string(name) + (bad ? ": " + std::to_string(bad) + " non-finite values" : ": all zero");
    return false;
  }
  return true;
}

static bool check_f32(const float *device, size_t n, const char *name, std::string *error) {
  std::vector<float> host(n);
  TRY(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += !isfinite(host[i]);
  if (bad) {
    *error = std::string(name) + ": " + std::to_string(bad) + " non-finite values";
    return false;
  }
  return true;
}

static bool bench_size(int B, int T, int H, int D, Result *result, std::string *error) {
  const int KVH = H;
  size_t qkv_n = (size_t)B * T * 3 * H * D, out_n = (size_t)B * T * H * D, rows = (size_t)B * H * T;
  Buffers buf;
  TRY(cudaMalloc(&buf.qkv, qkv_n * sizeof(lx_bf16)));
  TRY(cudaMalloc(&buf.dqkv, qkv_n * sizeof(lx_bf16)));
  TRY(cudaMalloc(&buf.out, out_n * sizeof(lx_bf16)));
  TRY(cudaMalloc(&buf.dout, out_n * sizeof(lx_bf16)));
  TRY(cudaMalloc(&buf.lse, rows * sizeof(float)));
  TRY(cudaMalloc(&buf.scratch, lx_cuda_flash_attention_scratch_floats(B, T, H) * sizeof(float)));
  TRY(cudaEventCreate(&buf.start));
  TRY(cudaEventCreate(&buf.stop));

  cudaStream_t stream;
  TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } stream_guard = {stream};
  const lx_ctx ctx = {stream, nullptr, buf.scratch,
                      lx_cuda_flash_attention_scratch_floats(B, T, H)}; /* no matmul */

  fill_uniform<<<4096, 256, 0, stream>>>(buf.qkv, qkv_n, lx_cuda_rng_key(1234, (uint64_t)T * 1000 + D));
  TRY(cudaGetLastError());
  fill_uniform<<<4096, 256, 0, stream>>>(buf.dout, out_n, lx_cuda_rng_key(5678, (uint64_t)T * 1000 + D));
  TRY(cudaGetLastError());
  TRY(cudaStreamSynchronize(stream));

  const double p = 0.0;
  const uint64_t seed = 42, stream_id = 0;
  /* median-ready times of the forward, or of forward + backward */
  auto time_passes = [&](bool backward, std::vector<double> *times) -> bool {
    for (int it = 0; it < WARMUP + ITERS; it++) {
      TRY(cudaEventRecord(buf.start, stream));
      lx_flash_attention_forward(&ctx, buf.out, buf.lse, buf.qkv, B, T, H, KVH, D, p, seed, stream_id, 0, H);
      TRY(cudaGetLastError());
      if (backward) {
        /* written, as the programs call it where the attention is its input's one use (lynx's kernels
         * zero dqkv first, inside the timing) */
        lx_flash_attention_backward(&ctx, buf.dqkv, buf.dout, buf.qkv, buf.out, buf.lse, B, T, H, KVH, D, p,
                                    seed, stream_id, 0, H, LX_GRAD_WRITE);
        TRY(cudaGetLastError());
      }
      TRY(cudaEventRecord(buf.stop, stream));
      TRY(cudaEventSynchronize(buf.stop));
      float ms = 0;
      TRY(cudaEventElapsedTime(&ms, buf.start, buf.stop));
      if (it >= WARMUP) times->push_back(ms);
    }
    return true;
  };
  std::vector<double> fwd, fwd_bwd;
  if (!time_passes(false, &fwd) || !time_passes(true, &fwd_bwd)) return false;

  if (!check_bf16(buf.out, out_n, "out", error) || !check_f32(buf.lse, rows, "lse", error) ||
      !check_bf16(buf.dqkv, qkv_n, "dqkv", error))
    return false;
  result->fwd_ms = median(fwd);
  result->fwd_bwd_ms = median(fwd_bwd);
  return true;
}

/* error goes into a JSON string: keep it printable and free of quotes. */
static std::string json_safe(std::string s) {
  for (char &c : s)
    if (c == '"' || c == '\\' || (unsigned char)c < 0x20) c = '\'';
  return s;
}

int main(int argc, char **argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    return 0;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::string device = json_safe(prop.name);

  std::vector<int> seqs = {1024, 2048, 4096, 8192};
  if (argc > 1) {
    seqs.clear();
    for (int i = 1; i < argc; i++)
      seqs.push_back(atoi(argv[i]));
  }
  const int head_dims[] = {64, 128};
  int failures = 0;
  for (int D : head_dims)
    for (int T : seqs) {
      int B = T > 0 && TOKENS % T == 0 ? TOKENS / T : 0, H = WIDTH / D;
      std::string error;
      Result r = {0, 0};
      const char *refused = shape_refused(B, T, H, H, D);
      bool ok = refused == nullptr && bench_size(B, T, H, D, &r, &error);
      if (refused) error = refused;
      if (!ok) {
        cudaGetLastError(); /* clear a non-sticky error (out of memory) before the next size */
        failures++;
        printf("{\"impl\": \"" IMPL
               "\", \"device\": \"%s\", \"seq\": %d, \"head_dim\": %d, \"error\": \"%s\"}\n",
               device.c_str(), T, D, json_safe(error).c_str());
        fflush(stdout);
        continue;
      }
      double fwd_flops = 4.0 * B * H * (double)T * T * D / 2;
      printf("{\"impl\": \"" IMPL "\", \"device\": \"%s\", \"seq\": %d, \"head_dim\": %d, \"batch\": %d, "
             "\"heads\": %d, \"fwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"fwd_tflops\": %.3f, "
             "\"fwd_bwd_tflops\": %.3f}\n",
             device.c_str(), T, D, B, H, r.fwd_ms, r.fwd_bwd_ms, fwd_flops / (r.fwd_ms * 1e9),
             3.5 * fwd_flops / (r.fwd_bwd_ms * 1e9));
      fflush(stdout);
    }
  return failures ? 1 : 0;
}
