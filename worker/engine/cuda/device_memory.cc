#include "worker/engine/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/cuda_status.h"

namespace llmserve::worker::cuda {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, const char* what) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  const cudaError_t error = cudaMalloc(&buffer.data_, bytes);
  if (error != cudaSuccess) {
    buffer.data_ = nullptr;
    const absl::Status status = CudaStatus(error, absl::StrCat("cudaMalloc(", bytes, " bytes)"));
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  // A failure here (a sticky error from an earlier fault) leaves nothing to do but go on.
  if (data_ != nullptr) (void)cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes, const char* what) {
  PinnedBuffer buffer;
  if (bytes == 0) return buffer;
  const cudaError_t error = cudaMallocHost(&buffer.data_, bytes);
  if (error != cudaSuccess) {
    buffer.data_ = nullptr;
    const absl::Status status =
        CudaStatus(error, absl::StrCat("cudaMallocHost(", bytes, " bytes)"));
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  buffer.bytes_ = bytes;
  return buffer;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::Reset() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace llmserve::worker::cuda
