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

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // RESOURCE_EXHAUSTED naming `what` and the byte count when the device is out of memory.
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, const char* what);
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer() { Reset(); }

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

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes, const char* what);
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  ~PinnedBuffer() { Reset(); }

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

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
