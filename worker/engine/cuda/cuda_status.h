// CUDA runtime and cuBLAS results as absl::Status values that name the failed call, and early-
// return macros for them:
//
//   LLMSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, stream));
//   LLMSERVE_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(...));
//
// The message is "<call text>: <error name> (<error string>)", e.g.
// "cudaMalloc(&ptr, bytes): cudaErrorMemoryAllocation (out of memory)".
// Out-of-memory maps to RESOURCE_EXHAUSTED, a missing device or driver to FAILED_PRECONDITION,
// everything else to INTERNAL.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_CUDA_STATUS_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker::cuda {

// OK for cudaSuccess; otherwise a status naming `call`.
absl::Status CudaStatus(cudaError_t error, absl::string_view call);
// OK for CUBLAS_STATUS_SUCCESS; otherwise a status naming `call`.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view call);

}  // namespace llmserve::worker::cuda

#define LLMSERVE_CUDA_RETURN_IF_ERROR(call)                                     \
  do {                                                                          \
    const cudaError_t llmserve_cuda_error_ = (call);                            \
    if (llmserve_cuda_error_ != cudaSuccess) {                                  \
      return ::llmserve::worker::cuda::CudaStatus(llmserve_cuda_error_, #call); \
    }                                                                           \
  } while (0)

#define LLMSERVE_CUBLAS_RETURN_IF_ERROR(call)                                        \
  do {                                                                               \
    const cublasStatus_t llmserve_cublas_status_ = (call);                           \
    if (llmserve_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                          \
      return ::llmserve::worker::cuda::CublasStatus(llmserve_cublas_status_, #call); \
    }                                                                                \
  } while (0)

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_CUDA_STATUS_H_
