// The metadata key/value pairs of a GGUF file and typed lookups into them.
//
// Values point into the file's bytes (strings and scalar arrays are not copied), so a
// GgufMetadata is valid only while the buffer it was parsed from lives; GgufFile keeps both.
// Lookups return NOT_FOUND for a missing key and INVALID_ARGUMENT for a value of the wrong type,
// each naming the key and the types.
//
// Thread-safe after construction: immutable.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_GGUF_METADATA_H_
#define LLMSERVE_WORKER_MODEL_GGUF_GGUF_METADATA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/model/gguf/gguf_types.h"

namespace llmserve::worker::gguf {

// One metadata value. Exactly the fields of its `type` are meaningful.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;

  // Scalars. Integer types widen to int64 (signed types) or uint64 (unsigned types, bool);
  // float32 widens to double exactly.
  int64_t int_value = 0;
  uint64_t uint_value = 0;
  double float_value = 0;
  absl::string_view string_value;

  // Arrays: `element_type` and `count` always. Fixed-size elements stay in the file as
  // `count` little-endian values at `raw`; strings are in `strings`; nested arrays in `arrays`.
  GgufValueType element_type = GgufValueType::kUint8;
  uint64_t count = 0;
  const unsigned char* raw = nullptr;
  std::vector<absl::string_view> strings;
  std::vector<GgufValue> arrays;

  // Element `i` (< count) of an array of integers, widened; of an array of floats, widened.
  // Callers check element_type first (IsIntegerType / IsFloatType).
  int64_t IntAt(uint64_t i) const;
  double FloatAt(uint64_t i) const;
};

class GgufMetadata {
 public:
  GgufMetadata() = default;

  // Adds a pair; ALREADY_EXISTS when `key` is present (GGUF keys are unique).
  absl::Status Add(std::string key, GgufValue value);

  // In file order.
  const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool Has(absl::string_view key) const { return index_.contains(key); }
  // The value of `key`, or nullptr.
  const GgufValue* Find(absl::string_view key) const;

  // A string value.
  absl::StatusOr<absl::string_view> GetString(absl::string_view key) const;
  // A value of any integer type that fits int64 (uint64 above 2^63-1 is INVALID_ARGUMENT).
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  // A float32 or float64 value.
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  // An array value of any element type (including nested arrays).
  absl::StatusOr<const GgufValue*> GetArray(absl::string_view key) const;
  // An array of strings.
  absl::StatusOr<absl::Span<const absl::string_view>> GetStringArray(absl::string_view key) const;
  // An array of any integer type that fits int64, copied.
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;
  // An array of float32 or float64, copied (float64 rounded to float).
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;

 private:
  absl::StatusOr<const GgufValue*> Lookup(absl::string_view key) const;

  std::vector<std::pair<std::string, GgufValue>> entries_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace llmserve::worker::gguf

#endif  // LLMSERVE_WORKER_MODEL_GGUF_GGUF_METADATA_H_
