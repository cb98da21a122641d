// The element types of GGUF files: the metadata value types (GGUF's own enum) and the tensor
// types (ggml's enum, with each supported type's block layout: how many elements one block holds
// and how many bytes it takes).
//
// Thread-safe: constant tables and pure functions.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_GGUF_TYPES_H_
#define LLMSERVE_WORKER_MODEL_GGUF_GGUF_TYPES_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace llmserve::worker::gguf {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// True for the thirteen ids above.
bool IsValidValueType(uint32_t id);
// Bytes of one value of a fixed-size type (integers, floats, bool); 0 for string and array.
int FixedValueSize(GgufValueType type);
// "uint8", ..., "string", "array"; "unknown" for an id outside the enum.
absl::string_view ValueTypeName(GgufValueType type);
bool IsIntegerType(GgufValueType type);
bool IsFloatType(GgufValueType type);

// Tensor types this reader can size and dequantize, numbered as in ggml.h (ggml_type). Other ggml
// types (Q2_K, IQ*, ...) are known by name only, to refuse them clearly.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  GgmlType type;
  absl::string_view name;  // ggml's name: "F32", "Q4_K", ...
  int64_t block_size;      // elements per block (1 for F32/F16/BF16)
  int64_t block_bytes;     // bytes per block
};

// The layout of a supported type id, or nullptr for any other id.
const GgmlTypeInfo* FindSupportedGgmlType(uint32_t id);
// The layout of a supported type (never null).
const GgmlTypeInfo& GgmlTypeInfoOf(GgmlType type);
// ggml's name for any type id it defines ("Q2_K", "IQ4_XS", ...), "" for ids it does not.
absl::string_view GgmlTypeName(uint32_t id);

}  // namespace llmserve::worker::gguf

#endif  // LLMSERVE_WORKER_MODEL_GGUF_GGUF_TYPES_H_
