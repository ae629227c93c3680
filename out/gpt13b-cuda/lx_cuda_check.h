/* lx_cuda_check.h — CUDA_CHECK and NCCL_CHECK, for the kernels
 * (lx_cuda_common.cuh) and the stage programs (lx_cuda_api.h) alike: a failing
 * call names itself, its file and line, and takes every rank down. The
 * includer has declared lx_cuda_fail_at. */
#ifndef LX_CUDA_CHECK_H
#define LX_CUDA_CHECK_H

/* A call returning a status of `type` that is not `success`: `describe`
 * names the status. */
#define LX_STATUS_CHECK(type, call, success, kind, describe)                                                \
  do {                                                                                                       \
    type lx_status_ = (call);                                                                                \
    if (lx_status_ != (success)) lx_cuda_fail_at(__FILE__, __LINE__, #call, kind, describe(lx_status_));     \
  } while (0)

#define CUDA_CHECK(call) LX_STATUS_CHECK(cudaError_t, call, cudaSuccess, "CUDA", cudaGetErrorString)
#define NCCL_CHECK(call) LX_STATUS_CHECK(ncclResult_t, call, ncclSuccess, "NCCL", ncclGetErrorString)

#endif
