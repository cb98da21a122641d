// A projection weight as the CUDA kernels see it: the format and the device pointers of one of
// quantized_layout.h's layouts (or a plain 16-bit matrix). Plain C++ without CUDA includes, shared
// by the kernels (nvcc), the backend and the CPU-tested upload planning (projection_image.h).
//
// Thread-safe: a plain value.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_WEIGHT_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_WEIGHT_H_

#include <cstdint>

namespace llmserve::worker::cuda {

enum class WeightFormat { kDense16, kInt8, kInt4 };

// A projection weight [n, k] on the device.
struct DeviceWeight {
  WeightFormat format = WeightFormat::kDense16;
  // kDense16: [n, k] in the device dtype. kInt8: [n, row_stride] int8. kInt4: [n, k / 8] uint32,
  // column 8j + i of word j at bits 4i.
  const void* data = nullptr;
  // kInt8: [n] f32 row scales. kInt4: [n, k / group_size, 2] f32 (scale, zero). kDense16: null.
  const float* scales = nullptr;
  int32_t n = 0;
  int32_t k = 0;
  int32_t row_stride = 0;  // kInt8: bytes per row (k rounded up to 4)
  int32_t group_size = 0;  // kInt4
};

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_WEIGHT_H_
