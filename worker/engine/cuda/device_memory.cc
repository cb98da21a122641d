#include "worker/engine/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_status.h"

namespace llmserve::worker::cuda {

template <MemorySpace kSpace>
absl::StatusOr<CudaBuffer<kSpace>> CudaBuffer<kSpace>::Allocate(size_t bytes, const char* what) {
  CudaBuffer buffer;
  if (bytes == 0) return buffer;
  constexpr bool kDevice = kSpace == MemorySpace::kDevice;
  const cudaError_t error =
      kDevice ? cudaMalloc(&buffer.data_, bytes) : cudaMallocHost(&buffer.data_, bytes);
  if (error != cudaSuccess) {
    buffer.data_ = nullptr;
    const absl::Status status = CudaStatus(
        error, absl::StrCat(kDevice ? "cudaMalloc(" : "cudaMallocHost(", bytes, " bytes)"));
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  buffer.bytes_ = bytes;
  return buffer;
}

template <MemorySpace kSpace>
void CudaBuffer<kSpace>::Reset() {
  // A failure here (a sticky error from an earlier fault) leaves nothing to do but go on.
  if (data_ != nullptr) {
    (void)(kSpace == MemorySpace::kDevice ? cudaFree(data_) : cudaFreeHost(data_));
  }
  data_ = nullptr;
  bytes_ = 0;
}

template class CudaBuffer<MemorySpace::kDevice>;
template class CudaBuffer<MemorySpace::kPinnedHost>;

}  // namespace llmserve::worker::cuda
