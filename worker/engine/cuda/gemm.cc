#include "worker/engine/cuda/gemm.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_status.h"

namespace llmserve::worker::cuda {

absl::Status Gemm(cublasHandle_t handle, DeviceDType dtype, const void* x, const void* w, float* y,
                  int64_t m, int64_t n, int64_t k, const char* what) {
  return GemmStrided(handle, dtype, x, w, y, m, n, k, n, what);
}

absl::Status GemmStrided(cublasHandle_t handle, DeviceDType dtype, const void* x, const void* w,
                         float* y, int64_t m, int64_t n, int64_t k, int64_t ldy, const char* what) {
  if (m == 0) return absl::OkStatus();
  if (ldy < n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GEMM output stride ", ldy, " is below its width ", n));
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || ldy > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GEMM of ", m, "x", n, "x", k, " exceeds cuBLAS's int sizes"));
  }
  const cudaDataType_t type = dtype == DeviceDType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  // cuBLAS is column-major: row-major y[m, n] is column-major y^T [n, m] = w^T' · x^T', where the
  // row-major w[n, k] read column-major is a [k, n] matrix (so transposed: op T), and row-major
  // x[m, k] is a column-major [k, m] matrix (op N).
  const cublasStatus_t status = cublasGemmEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, w, type, static_cast<int>(k), x, type, static_cast<int>(k),
      &beta, y, CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    return CublasStatus(status,
                        absl::StrCat("cublasGemmEx (", what, ", m=", m, " n=", n, " k=", k, ")"));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker::cuda
