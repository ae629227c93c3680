// bench/gpu/llmc_cuda13.h — force-included (nvcc -include) when bench/gpu/kit.sh builds llm.c
// against CUDA 13, which dropped the int-device form of cudaMemAdvise (only
// the cudaMemLocation form is left): the old signature again, as an overload,
// so that llm.c's source stays as it is.
#pragma once
#include <cuda_runtime.h>
#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
static inline cudaError_t cudaMemAdvise(const void *ptr, size_t count,
                                        cudaMemoryAdvise advice, int device) {
    cudaMemLocation loc;
    loc.type = (device == cudaCpuDeviceId) ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    loc.id = (device == cudaCpuDeviceId) ? 0 : device;
    return cudaMemAdvise(ptr, count, advice, loc);
}
#endif
