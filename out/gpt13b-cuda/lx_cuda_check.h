/* lx_cuda_check.h — CUDA_CHECK and NCCL_CHECK, for the kernels
 * (lx_cuda_common.cuh) and the stage programs (lx_cuda_api.h) alike: a failing
 * call names itself, its file and line, and takes every rank down. The
 * includer has declared lx_cuda_fail_at. */
#ifndef LX_CUDA_CHECK_H
#define LX_CUDA_CHECK_H

#define CUDA_CHECK(call)                                                                                     \
  do {                                                                                                       \
    cudaError_t lx_status_ = (call);                                                                         \
    if (lx_status_ != cudaSuccess)                                                                           \
      lx_cuda_fail_at(__FILE__, __LINE__, #call, "CUDA", cudaGetErrorString(lx_status_));                    \
  } while (0)

#define NCCL_CHECK(call)                                                                                     \
  do {                                                                                                       \
    ncclResult_t lx_status_ = (call);                                                                        \
    if (lx_status_ != ncclSuccess)                                                                           \
      lx_cuda_fail_at(__FILE__, __LINE__, #call, "NCCL", ncclGetErrorString(lx_status_));                    \
  } while (0)

#endif
