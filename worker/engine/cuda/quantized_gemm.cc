#include "worker/engine/cuda/quantized_gemm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/engine/cuda/cuda_status.h"
#include "worker/engine/cuda/gemm.h"

namespace llmserve::worker::cuda {

int64_t DequantScratchElements(int64_t n, int64_t k) {
  return std::min(n * k, std::max(k, kDequantChunkElements));
}

absl::Status ProjectionGemm(cublasHandle_t handle, cudaStream_t stream, DeviceDType dtype,
                            const void* x, const DeviceWeight& w, float* y, int64_t m,
                            void* scratch, int64_t scratch_elements, const char* what) {
  if (w.format == WeightFormat::kDense16) {
    return Gemm(handle, dtype, x, w.data, y, m, w.n, w.k, what);
  }
  if (m == 0 || w.n == 0) return absl::OkStatus();
  if (m <= kMaxGemvBatch) {
    return CudaStatus(
        LaunchQuantizedGemv(dtype, {.w = w, .x = x, .y = y, .m = static_cast<int32_t>(m)}, stream),
        absl::StrCat("LaunchQuantizedGemv (", what, ", m=", m, ")"));
  }
  if (scratch_elements < DequantScratchElements(w.n, w.k)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dequantization scratch of ", scratch_elements, " elements is below ",
                     DequantScratchElements(w.n, w.k), " for a ", w.n, " x ", w.k, " weight"));
  }
  const int32_t chunk_rows = static_cast<int32_t>(std::min<int64_t>(w.n, scratch_elements / w.k));
  for (int32_t first = 0; first < w.n; first += chunk_rows) {
    const int32_t rows = std::min(chunk_rows, w.n - first);
    LLMSERVE_RETURN_IF_ERROR(CudaStatus(
        LaunchDequantize(dtype, {.w = w, .first_row = first, .num_rows = rows, .out = scratch},
                         stream),
        absl::StrCat("LaunchDequantize (", what, ", rows ", first, "..", first + rows, ")")));
    // The chunk's rows are y's columns [first, first + rows).
    LLMSERVE_RETURN_IF_ERROR(
        GemmStrided(handle, dtype, x, scratch, y + first, m, rows, w.k, w.n, what));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker::cuda
