#include "worker/model/gguf/gguf_metadata.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::gguf {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "GGUF values are little-endian and read in place");

template <typename T>
T LoadLittleEndian(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

absl::Status WrongType(absl::string_view key, const GgufValue& value, absl::string_view expected) {
  std::string actual(ValueTypeName(value.type));
  if (value.type == GgufValueType::kArray) {
    absl::StrAppend(&actual, " of ", ValueTypeName(value.element_type));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("metadata key '", key, "' has type ", actual, ", expected ", expected));
}

// The value of an integer-typed scalar, or an error when it does not fit int64.
absl::StatusOr<int64_t> IntegerValue(absl::string_view key, const GgufValue& value) {
  if (value.type == GgufValueType::kUint64 || value.type == GgufValueType::kUint32 ||
      value.type == GgufValueType::kUint16 || value.type == GgufValueType::kUint8) {
    if (value.uint_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", key, "' value ", value.uint_value, " is out of range"));
    }
    return static_cast<int64_t>(value.uint_value);
  }
  return value.int_value;
}

}  // namespace

int64_t GgufValue::IntAt(uint64_t i) const {
  const unsigned char* p = raw + i * FixedValueSize(element_type);
  switch (element_type) {
    case GgufValueType::kUint8:
      return LoadLittleEndian<uint8_t>(p);
    case GgufValueType::kInt8:
      return LoadLittleEndian<int8_t>(p);
    case GgufValueType::kUint16:
      return LoadLittleEndian<uint16_t>(p);
    case GgufValueType::kInt16:
      return LoadLittleEndian<int16_t>(p);
    case GgufValueType::kUint32:
      return LoadLittleEndian<uint32_t>(p);
    case GgufValueType::kInt32:
      return LoadLittleEndian<int32_t>(p);
    case GgufValueType::kUint64:
      return static_cast<int64_t>(LoadLittleEndian<uint64_t>(p));
    case GgufValueType::kInt64:
      return LoadLittleEndian<int64_t>(p);
    case GgufValueType::kBool:
      return LoadLittleEndian<uint8_t>(p);
    default:
      return 0;
  }
}

double GgufValue::FloatAt(uint64_t i) const {
  if (element_type == GgufValueType::kFloat32) {
    return LoadLittleEndian<float>(raw + i * sizeof(float));
  }
  if (element_type == GgufValueType::kFloat64) {
    return LoadLittleEndian<double>(raw + i * sizeof(double));
  }
  return 0;
}

absl::Status GgufMetadata::Add(std::string key, GgufValue value) {
  if (index_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat("duplicate metadata key '", key, "'"));
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
  return absl::OkStatus();
}

const GgufValue* GgufMetadata::Find(absl::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

absl::StatusOr<const GgufValue*> GgufMetadata::Lookup(absl::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat("metadata key '", key, "' is missing"));
  }
  return value;
}

absl::StatusOr<absl::string_view> GgufMetadata::GetString(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> value = Lookup(key);
  if (!value.ok()) return value.status();
  if ((*value)->type != GgufValueType::kString) return WrongType(key, **value, "string");
  return (*value)->string_value;
}

absl::StatusOr<int64_t> GgufMetadata::GetInt(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> value = Lookup(key);
  if (!value.ok()) return value.status();
  if (!IsIntegerType((*value)->type)) return WrongType(key, **value, "an integer");
  return IntegerValue(key, **value);
}

absl::StatusOr<double> GgufMetadata::GetFloat(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> value = Lookup(key);
  if (!value.ok()) return value.status();
  if (!IsFloatType((*value)->type)) return WrongType(key, **value, "float32 or float64");
  return (*value)->float_value;
}

absl::StatusOr<bool> GgufMetadata::GetBool(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> value = Lookup(key);
  if (!value.ok()) return value.status();
  if ((*value)->type != GgufValueType::kBool) return WrongType(key, **value, "bool");
  return (*value)->uint_value != 0;
}

absl::StatusOr<const GgufValue*> GgufMetadata::GetArray(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> value = Lookup(key);
  if (!value.ok()) return value.status();
  if ((*value)->type != GgufValueType::kArray) return WrongType(key, **value, "array");
  return *value;
}

absl::StatusOr<absl::Span<const absl::string_view>> GgufMetadata::GetStringArray(
    absl::string_view key) const {
  absl::StatusOr<const GgufValue*> array = GetArray(key);
  if (!array.ok()) return array.status();
  if ((*array)->element_type != GgufValueType::kString) {
    return WrongType(key, **array, "array of string");
  }
  return absl::MakeConstSpan((*array)->strings);
}

absl::StatusOr<std::vector<int64_t>> GgufMetadata::GetIntArray(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> array = GetArray(key);
  if (!array.ok()) return array.status();
  const GgufValue& value = **array;
  if (!IsIntegerType(value.element_type)) return WrongType(key, value, "array of integers");
  std::vector<int64_t> out(value.count);
  for (uint64_t i = 0; i < value.count; ++i) {
    if (value.element_type == GgufValueType::kUint64 && value.IntAt(i) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", key, "' element ", i, " is out of range"));
    }
    out[i] = value.IntAt(i);
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufMetadata::GetFloatArray(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> array = GetArray(key);
  if (!array.ok()) return array.status();
  const GgufValue& value = **array;
  if (!IsFloatType(value.element_type)) return WrongType(key, value, "array of float32/float64");
  std::vector<float> out(value.count);
  for (uint64_t i = 0; i < value.count; ++i) out[i] = static_cast<float>(value.FloatAt(i));
  return out;
}

}  // namespace llmserve::worker::gguf
