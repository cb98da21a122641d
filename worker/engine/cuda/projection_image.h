// How the CUDA backend uploads one projection weight: as a 16-bit matrix, quantized to int8 at
// load (--quantization=int8), or in 4 bits from an AWQ/GPTQ checkpoint's Int4Matrix. Planning
// (sizes and format, checked before anything is allocated) is separate from building the bytes,
// so that the backend sums every weight's size first and converts one projection at a time while
// copying (host memory peaks at one projection's image beside the loaded model).
//
// An image is the layout's arrays back to back: data, then, at the next 256-byte boundary, the
// scales (quantized_layout.h). Plain C++, tested on the CPU.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_PROJECTION_IMAGE_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_PROJECTION_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine/cuda/device_weight.h"
#include "worker/model/dtype.h"
#include "worker/model/int4_matrix.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cuda {

// Alignment of every array on the device (and of the scales inside an image).
inline constexpr size_t kDeviceAlignment = 256;

struct ProjectionPlan {
  // Format, n, k, row_stride and group_size; the pointers stay null until BindProjection.
  DeviceWeight weight;
  size_t bytes = 0;          // the whole image
  size_t scales_offset = 0;  // quantized formats: where the scales start in the image
};

// The plan of one projection: kInt4 when `int4` is not empty (dense is then empty, and
// `quantize_int8` does not apply to it), kInt8 when `quantize_int8`, kDense16 (in `device_dtype`)
// otherwise. INVALID_ARGUMENT naming `name` for a malformed Int4Matrix (CheckInt4Matrix), a
// missing or non-2-D weight, or sizes beyond the kernels' 32-bit indices.
absl::StatusOr<ProjectionPlan> PlanProjection(const Tensor& dense, const Int4Matrix& int4,
                                              bool quantize_int8, DType device_dtype,
                                              absl::string_view name);

// The image's bytes as they are to be copied (`plan` from PlanProjection of the same weights).
// INVALID_ARGUMENT naming `name` for a weight that cannot be quantized to int8 (not finite).
absl::Status BuildProjectionImage(const ProjectionPlan& plan, const Tensor& dense,
                                  const Int4Matrix& int4, DType device_dtype,
                                  absl::string_view name, std::vector<unsigned char>* image);

// The plan's weight with its pointers set for an image copied to `device_image`.
DeviceWeight BindProjection(const ProjectionPlan& plan, const void* device_image);

// Bytes of the CUDA backend's weight allocation for `weights` in `device_dtype`, projections
// quantized to int8 when `quantize_int8` (every array 256-byte aligned, as CudaBackend lays them
// out; equal to its weight_bytes() once created): for tools that hold the backend as a Backend.
// PlanProjection's errors.
absl::StatusOr<int64_t> DeviceWeightBytes(const ModelWeights& weights, DType device_dtype,
                                          bool quantize_int8);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_PROJECTION_IMAGE_H_
