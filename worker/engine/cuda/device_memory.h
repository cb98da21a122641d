// Owning handles for device memory (cudaMalloc, never managed memory) and pinned host memory
// (cudaMallocHost, for asynchronous copies). Move-only; freeing happens in the destructor.
//
// Not thread-safe: plain owners.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"

namespace llmserve::worker::cuda {

enum class MemorySpace { kDevice, kPinnedHost };

template <MemorySpace kSpace>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  // RESOURCE_EXHAUSTED (or the CUDA error) naming `what`, the allocator and the byte count when
  // the memory is not there.
  static absl::StatusOr<CudaBuffer> Allocate(size_t bytes, const char* what);
  CudaBuffer(CudaBuffer&& other) noexcept { *this = std::move(other); }
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~CudaBuffer() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }
  void Reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<MemorySpace::kDevice>;
using PinnedBuffer = CudaBuffer<MemorySpace::kPinnedHost>;

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
