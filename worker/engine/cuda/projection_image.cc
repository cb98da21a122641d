#include "worker/engine/cuda/projection_image.h"

#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/engine/cuda/quantized_layout.h"

namespace llmserve::worker::cuda {
namespace {

size_t AlignUp(size_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// Copies the data and scale arrays into one image.
void Assemble(const ProjectionPlan& plan, const void* data, size_t data_bytes, const float* scales,
              size_t scale_count, std::vector<unsigned char>* image) {
  image->assign(plan.bytes, 0);
  std::memcpy(image->data(), data, data_bytes);
  std::memcpy(image->data() + plan.scales_offset, scales, scale_count * sizeof(float));
}

}  // namespace

absl::StatusOr<ProjectionPlan> PlanProjection(const Tensor& dense, const Int4Matrix& int4,
                                              bool quantize_int8, DType device_dtype,
                                              absl::string_view name) {
  ProjectionPlan plan;
  DeviceWeight& w = plan.weight;
  int64_t n = 0, k = 0;
  if (!int4.empty()) {
    // int8 quantizes the model's other projections (a GGUF file's Q6_K ones beside its Q4_K
    // ones); a 4-bit weight stays as it is.
    LLMSERVE_RETURN_IF_ERROR(CheckInt4Matrix(int4, name));
    n = int4.rows;
    k = int4.cols;
    w.format = WeightFormat::kInt4;
    w.group_size = static_cast<int32_t>(int4.group_size);
    plan.scales_offset = AlignUp(static_cast<size_t>(n * (k / 2)));
    plan.bytes = plan.scales_offset + static_cast<size_t>(n * int4.groups() * 2) * sizeof(float);
  } else {
    if (dense.shape().size() != 2 || dense.shape()[0] < 1 || dense.shape()[1] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": the projection weight is missing or not 2-D"));
    }
    n = dense.shape()[0];
    k = dense.shape()[1];
    if (quantize_int8) {
      w.format = WeightFormat::kInt8;
      const int64_t row_stride = (k + 3) / 4 * 4;
      w.row_stride = static_cast<int32_t>(row_stride);
      plan.scales_offset = AlignUp(static_cast<size_t>(n * row_stride));
      plan.bytes = plan.scales_offset + static_cast<size_t>(n) * sizeof(float);
    } else {
      w.format = WeightFormat::kDense16;
      plan.bytes = static_cast<size_t>(n * k) * DTypeSize(device_dtype);
    }
  }
  // The kernels index rows and columns in 32 bits (a row's bytes and n * k in 64).
  if (n > INT_MAX || k > INT_MAX - 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": a ", n, " x ", k, " weight exceeds the CUDA kernels' int sizes"));
  }
  w.n = static_cast<int32_t>(n);
  w.k = static_cast<int32_t>(k);
  return plan;
}

absl::Status BuildProjectionImage(const ProjectionPlan& plan, const Tensor& dense,
                                  const Int4Matrix& int4, DType device_dtype,
                                  absl::string_view name, std::vector<unsigned char>* image) {
  switch (plan.weight.format) {
    case WeightFormat::kInt4: {
      Int4DeviceLayout layout;
      LLMSERVE_ASSIGN_OR_RETURN(layout, ToInt4DeviceLayout(int4, name));
      Assemble(plan, layout.words.data(), layout.words.size() * sizeof(uint32_t),
               layout.scale_offset.data(), layout.scale_offset.size(), image);
      return absl::OkStatus();
    }
    case WeightFormat::kInt8: {
      Int8DeviceLayout layout;
      LLMSERVE_ASSIGN_OR_RETURN(layout, ToInt8DeviceLayout(dense, name));
      Assemble(plan, layout.values.data(), layout.values.size(), layout.scales.data(),
               layout.scales.size(), image);
      return absl::OkStatus();
    }
    case WeightFormat::kDense16:
      image->resize(plan.bytes);
      ConvertElements(dense.data(), dense.dtype(), image->data(), device_dtype,
                      static_cast<size_t>(dense.NumElements()));
      return absl::OkStatus();
  }
  return absl::InternalError("unknown weight format");
}

DeviceWeight BindProjection(const ProjectionPlan& plan, const void* device_image) {
  DeviceWeight w = plan.weight;
  w.data = device_image;
  if (w.format != WeightFormat::kDense16) {
    w.scales = reinterpret_cast<const float*>(static_cast<const unsigned char*>(device_image) +
                                              plan.scales_offset);
  }
  return w;
}

absl::StatusOr<int64_t> DeviceWeightBytes(const ModelWeights& weights, DType device_dtype,
                                          bool quantize_int8) {
  size_t total = 0;
  auto add = [&total](size_t bytes) { total = AlignUp(total) + bytes; };
  auto add_tensor = [&](const Tensor& t, bool matrix) {
    if (!t.empty()) add(t.NumElements() * DTypeSize(matrix ? device_dtype : DType::kF32));
  };
  auto add_projection = [&](const Tensor& dense, const Int4Matrix& int4) -> absl::Status {
    ProjectionPlan plan;
    LLMSERVE_ASSIGN_OR_RETURN(plan,
                              PlanProjection(dense, int4, quantize_int8, device_dtype, "weight"));
    add(plan.bytes);
    return absl::OkStatus();
  };
  add_tensor(weights.token_embedding, true);
  add_tensor(weights.position_embedding, false);
  for (const LayerWeights& w : weights.layers) {
    add_tensor(w.attn_norm_weight, false);
    add_tensor(w.attn_norm_bias, false);
    LLMSERVE_RETURN_IF_ERROR(add_projection(w.qkv_weight, w.qkv_int4));
    add_tensor(w.qkv_bias, false);
    LLMSERVE_RETURN_IF_ERROR(add_projection(w.o_weight, w.o_int4));
    add_tensor(w.o_bias, false);
    add_tensor(w.mlp_norm_weight, false);
    add_tensor(w.mlp_norm_bias, false);
    LLMSERVE_RETURN_IF_ERROR(add_projection(w.up_weight, w.up_int4));
    add_tensor(w.up_bias, false);
    LLMSERVE_RETURN_IF_ERROR(add_projection(w.down_weight, w.down_int4));
    add_tensor(w.down_bias, false);
  }
  add_tensor(weights.final_norm_weight, false);
  add_tensor(weights.final_norm_bias, false);
  add_tensor(weights.lm_head, true);
  // The rotary inverse frequencies, as doubles.
  if (weights.config.position == PositionKind::kRope) {
    add(static_cast<size_t>(weights.config.head_dim / 2) * sizeof(double));
  }
  return static_cast<int64_t>(total);
}

}  // namespace llmserve::worker::cuda
