#include "worker/model/gguf/gguf_types.h"

#include "common/base/logging.h"

namespace llmserve::worker::gguf {
namespace {

// Block layouts from ggml-common.h: a block of 32 (Q4_0 ... Q8_0) holds an f16 scale (and for
// _1 types an f16 minimum), for Q5 four bytes of fifth bits, then the packed quants; a K-quant
// super-block of 256 holds f16 scales, packed 6-bit sub-block scales and the quants.
constexpr GgmlTypeInfo kSupportedTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::kQ4_1, "Q4_1", 32, 4 + 16},
    {GgmlType::kQ5_0, "Q5_0", 32, 2 + 4 + 16},
    {GgmlType::kQ5_1, "Q5_1", 32, 4 + 4 + 16},
    {GgmlType::kQ8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::kQ4_K, "Q4_K", 256, 4 + 12 + 128},
    {GgmlType::kQ5_K, "Q5_K", 256, 4 + 12 + 32 + 128},
    {GgmlType::kQ6_K, "Q6_K", 256, 128 + 64 + 16 + 2},
};

// ggml.h's ggml_type names by id; "" for ids it never used or removed without a successor.
constexpr absl::string_view kGgmlTypeNames[] = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "",         "",         "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
};

}  // namespace

bool IsValidValueType(uint32_t id) { return id <= static_cast<uint32_t>(GgufValueType::kFloat64); }

int FixedValueSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

absl::string_view ValueTypeName(GgufValueType type) {
  static constexpr absl::string_view kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                 "int32",  "float32", "bool",   "string", "array",
                                                 "uint64", "int64",   "float64"};
  const uint32_t id = static_cast<uint32_t>(type);
  return IsValidValueType(id) ? kNames[id] : "unknown";
}

bool IsIntegerType(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool IsFloatType(GgufValueType type) {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

const GgmlTypeInfo* FindSupportedGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& info : kSupportedTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo& GgmlTypeInfoOf(GgmlType type) {
  const GgmlTypeInfo* info = FindSupportedGgmlType(static_cast<uint32_t>(type));
  LLMSERVE_CHECK(info != nullptr) << "GgmlType " << static_cast<uint32_t>(type) << " has no layout";
  return *info;
}

absl::string_view GgmlTypeName(uint32_t id) {
  constexpr uint32_t kCount = sizeof(kGgmlTypeNames) / sizeof(kGgmlTypeNames[0]);
  return id < kCount ? kGgmlTypeNames[id] : absl::string_view();
}

}  // namespace llmserve::worker::gguf
