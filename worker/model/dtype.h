// Element types of model weights, on disk and at run time, and conversions between them.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_DTYPE_H_
#define LLMSERVE_WORKER_MODEL_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace llmserve::worker {

enum class DType { kF32, kF16, kBF16 };

// Bytes per element.
size_t DTypeSize(DType dtype);

// "f32", "f16", "bf16" (the names of the --dtype flags).
absl::string_view DTypeName(DType dtype);

// Parses a flag value: "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16".
absl::StatusOr<DType> ParseDType(absl::string_view name);

// Parses a safetensors dtype ("F32", "F16", "BF16"); other safetensors dtypes are valid files but
// not weights we can run, and give INVALID_ARGUMENT naming them.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// IEEE half <-> float, and bfloat16 <-> float (round to nearest even; NaN stays NaN).
float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bf16);
uint16_t FloatToBFloat16(float value);

// Converts `count` elements from `src` (of type `from`, any alignment) to `dst` (of type `to`).
void ConvertElements(const void* src, DType from, void* dst, DType to, size_t count);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_DTYPE_H_
