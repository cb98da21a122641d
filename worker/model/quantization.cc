#include "worker/model/quantization.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace llmserve::worker {

absl::string_view QuantizationName(Quantization quantization) {
  switch (quantization) {
    case Quantization::kNone:
      return "none";
    case Quantization::kInt8:
      return "int8";
    case Quantization::kAwq:
      return "awq";
    case Quantization::kGptq:
      return "gptq";
  }
  return "none";
}

absl::StatusOr<Quantization> ParseQuantization(absl::string_view name) {
  if (name.empty() || name == "none") return Quantization::kNone;
  if (name == "int8") return Quantization::kInt8;
  if (name == "awq") return Quantization::kAwq;
  if (name == "gptq") return Quantization::kGptq;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization '", name, "' (expected none, int8, awq or gptq)"));
}

absl::StatusOr<Quantization> ResolveQuantization(Quantization requested,
                                                 const CheckpointQuantization& checkpoint) {
  using Method = CheckpointQuantization::Method;
  if (checkpoint.method == Method::kGguf) {
    // Its Q4 projections run in 4 bits whatever is asked; int8 quantizes its other projections.
    if (requested == Quantization::kNone || requested == Quantization::kInt8) return requested;
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization=", QuantizationName(requested), " needs a ", QuantizationName(requested),
        " checkpoint; this one is a GGUF file (its Q4_0/Q4_1/Q4_K projections run in 4 bits as "
        "they are; --quantization=int8 quantizes its other projections)"));
  }
  const Quantization stored = checkpoint.method == Method::kAwq    ? Quantization::kAwq
                              : checkpoint.method == Method::kGptq ? Quantization::kGptq
                                                                   : Quantization::kNone;
  if (requested == Quantization::kNone || requested == stored) return stored;
  if (requested == Quantization::kInt8 && stored == Quantization::kNone) return requested;
  if (requested == Quantization::kInt8) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization=int8 quantizes unquantized checkpoints; this one is already ",
                     QuantizationName(stored), " (leave --quantization at none)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--quantization=", QuantizationName(requested), " needs a ", QuantizationName(requested),
      " checkpoint; this one is ",
      stored == Quantization::kNone ? "not quantized (config.json has no quantization_config)"
                                    : QuantizationName(stored)));
}

std::string RunningQuantizationName(Quantization resolved,
                                    const CheckpointQuantization& checkpoint) {
  if (checkpoint.method != CheckpointQuantization::Method::kGguf) {
    return std::string(QuantizationName(resolved));
  }
  return resolved == Quantization::kInt8 ? "gguf+int8" : "gguf";
}

void QuantizeRowInt8(const float* row, int64_t k, int8_t* q, float* scale) {
  float max_abs = 0.0f;
  for (int64_t c = 0; c < k; ++c) max_abs = std::max(max_abs, std::abs(row[c]));
  *scale = max_abs / kInt8Max;
  if (max_abs == 0.0f) {
    std::fill(q, q + k, int8_t{0});
    return;
  }
  // Divide in double, so that the largest element lands on exactly +-127 and the rounding does
  // not depend on how the compiler contracts the expression.
  const double inverse = kInt8Max / static_cast<double>(max_abs);
  // Adding and subtracting 1.5 * 2^52 rounds |v| <= 127 to the nearest integer, ties to even (the
  // default rounding mode), as std::nearbyint does, without its libm call per weight: loading the
  // small model with int8 on one thread took 1.95 s instead of 2.2.
  constexpr double kRound = 6755399441055744.0;
  for (int64_t c = 0; c < k; ++c) {
    const double v = (row[c] * inverse + kRound) - kRound;
    q[c] = static_cast<int8_t>(std::clamp(v, double{-kInt8Max}, double{kInt8Max}));
  }
}

absl::Status CheckQuantizable(const Tensor& weight, absl::string_view name) {
  const int64_t count = weight.NumElements();
  constexpr int64_t kChunk = 4096;
  std::vector<float> values(kChunk);
  const auto* bytes = static_cast<const unsigned char*>(weight.data());
  const size_t element = DTypeSize(weight.dtype());
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t n = std::min(kChunk, count - begin);
    ConvertElements(bytes + begin * element, weight.dtype(), values.data(), DType::kF32, n);
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[i])) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": element ", begin + i, " is ",
                                                       values[i],
                                                       "; int8 quantization needs finite weights"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace llmserve::worker
