// The GEMM of every projection and of the LM head, through cuBLAS: 16-bit activations times
// 16-bit weights, f32 accumulation and f32 output.
//
// Thread-safe as the cuBLAS handle it is given (one per backend, one stream).

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_GEMM_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_GEMM_H_

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {

// y[m, n] = x[m, k] · w[n, k]^T, all row-major: x and w in `dtype`, y in f32. `what` names the
// projection in an error. INVALID_ARGUMENT when a size exceeds cuBLAS's int range.
absl::Status Gemm(cublasHandle_t handle, DeviceDType dtype, const void* x, const void* w, float* y,
                  int64_t m, int64_t n, int64_t k, const char* what);

// The same with y's rows `ldy` floats apart (ldy >= n): writes the column block y[:, 0:n] of a
// wider output, as the quantized prefill path does for each chunk of weight rows.
absl::Status GemmStrided(cublasHandle_t handle, DeviceDType dtype, const void* x, const void* w,
                         float* y, int64_t m, int64_t n, int64_t k, int64_t ldy, const char* what);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_GEMM_H_
