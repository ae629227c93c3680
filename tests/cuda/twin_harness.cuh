/* twin_harness.cuh — what kernel_twins.cu's cases share: bf16-rounded random
 * inputs, copies to and from the device, the comparison that prints one
 * "ok"/"not ok" line per output and counts failures, and the stream and
 * matmul context every kernel is launched with. Included by kernel_twins.cu
 * alone (one translation unit, so its statics are the program's). */
#pragma once
#include <math.h>
#include <stdio.h>

#include <vector>

#include "lx_cuda_matmul.cuh"

typedef std::vector<float> floats;

static int failures = 0;
static uint64_t lcg_state = 0x1234567887654321ull;

static float uniform_pm1(void) { /* in (-1, 1) */
  lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(lcg_state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Random values already rounded to bf16, so both sides see the same inputs. */
static floats random_bf16(size_t n, float amplitude) {
  floats x(n);
  for (size_t i = 0; i < n; i++)
    x[i] = lx_to_float(lx_to_bf16(amplitude * uniform_pm1()));
  return x;
}

static lx_bf16 *to_device_bf16(const floats &x) {
  std::vector<lx_bf16> h(x.size());
  for (size_t i = 0; i < x.size(); i++)
    h[i] = lx_to_bf16(x[i]);
  lx_bf16 *d;
  CUDA_CHECK(cudaMalloc(&d, x.size() * sizeof(lx_bf16) + 16));
  CUDA_CHECK(cudaMemcpy(d, h.data(), x.size() * sizeof(lx_bf16), cudaMemcpyHostToDevice));
  return d;
}

static float *to_device_f32(const floats &x) {
  float *d;
  CUDA_CHECK(cudaMalloc(&d, x.size() * sizeof(float) + 16));
  CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

template <typename T> static T *to_device_raw(const std::vector<T> &x) {
  T *d;
  CUDA_CHECK(cudaMalloc(&d, x.size() * sizeof(T) + 16));
  CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

static floats from_device_bf16(const lx_bf16 *d, size_t n) {
  std::vector<lx_bf16> h(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(lx_bf16), cudaMemcpyDeviceToHost));
  floats x(n);
  for (size_t i = 0; i < n; i++)
    x[i] = lx_to_float(h[i]);
  return x;
}

static floats from_device_f32(const float *d, size_t n) {
  floats x(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(x.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return x;
}

template <typename T> static std::vector<T> from_device_raw(const T *d, size_t n) {
  std::vector<T> x(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(x.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return x;
}

static float *device_zeros_f32(size_t n) {
  float *d;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(float) + 16));
  CUDA_CHECK(cudaMemset(d, 0, n * sizeof(float) + 16));
  return d;
}

/* bf16 tolerances: outputs rounded once are within 2^-8 relative; sums and
 * chains of a few roundings stay within a few of those. */
#define TOL_BF16 2e-2
#define TOL_F32 2e-3

static void compare(const char *kernel, const char *output, const floats &gpu, const floats &cpu,
                    double tolerance) {
  double max_ref = 0, max_diff = 0;
  size_t worst = 0;
  bool finite = true;
  for (size_t i = 0; i < cpu.size(); i++) {
    if (!isfinite(gpu[i])) finite = false;
    max_ref = fmax(max_ref, fabs((double)cpu[i]));
    double diff = fabs((double)gpu[i] - cpu[i]);
    if (diff > max_diff) max_diff = diff, worst = i;
  }
  double rel = max_diff / (max_ref > 1e-12 ? max_ref : 1e-12);
  bool ok = finite && rel <= tolerance;
  if (!ok) failures++;
  printf("%s - %-34s %-10s max rel err %.3e (tol %.0e)", ok ? "ok" : "not ok", kernel, output, rel,
         tolerance);
  if (!ok)
    printf("  worst [%zu] gpu %g cpu %g%s", worst, gpu[worst], cpu[worst], finite ? "" : " NON-FINITE");
  printf("\n");
}

static void expect_true(const char *what, bool ok) {
  if (!ok) failures++;
  printf("%s - %s\n", ok ? "ok" : "not ok", what);
}

static cudaStream_t stream;
static lx_cuda_matmul_context matmul;

/* What the kernels take first: the test's stream and matmul context, with `scratch`. */
static lx_ctx context(float *scratch, size_t floats) { return lx_ctx{stream, &matmul, scratch, floats}; }
