#include "worker/model/gguf/gguf_parser.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"

namespace llmserve::worker::gguf {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF files are read in place");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
// The smallest encodings, to bound counts by the bytes left before allocating for them.
constexpr uint64_t kMinPairBytes = 8 + 1 + 4 + 1;  // key length, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes =
    8 + 1 + 4 + 8 + 4 + 8;                  // name, n_dims, 1 dim, type, offset
constexpr uint64_t kMinStringBytes = 8;     // the length alone
constexpr uint64_t kMinArrayBytes = 4 + 8;  // element type and count
constexpr uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
// String values are bounded by the bytes left in the file alone.
constexpr uint64_t kNoLengthLimit = std::numeric_limits<uint64_t>::max();

using Describe = absl::FunctionRef<std::string()>;

// Reads little-endian fields from [data, data + size), never past the end.
class Cursor {
 public:
  Cursor(absl::string_view file_name, const unsigned char* data, size_t size)
      : file_name_(file_name), data_(data), size_(size) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }
  const unsigned char* here() const { return data_ + offset_; }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ": ", what));
  }
  // Fails unless `bytes` more bytes exist; `describe` names what needs them.
  absl::Status Need(uint64_t bytes, Describe describe) const {
    if (bytes <= remaining()) return absl::OkStatus();
    return Error(absl::StrCat("truncated: ", describe(), " needs ", bytes, " bytes at offset ",
                              offset_, " but the file has ", remaining(), " left"));
  }
  const unsigned char* Skip(uint64_t bytes) {  // after Need
    const unsigned char* start = here();
    offset_ += bytes;
    return start;
  }
  template <typename T>
  absl::StatusOr<T> Read(Describe describe) {
    LLMSERVE_RETURN_IF_ERROR(Need(sizeof(T), describe));
    T value;
    std::memcpy(&value, Skip(sizeof(T)), sizeof(T));
    return value;
  }
  // A GGUF string: a uint64 length, then that many bytes (not NUL-terminated, any bytes).
  absl::StatusOr<absl::string_view> ReadString(uint64_t max_bytes, Describe describe) {
    uint64_t length = 0;
    LLMSERVE_ASSIGN_OR_RETURN(length, Read<uint64_t>(describe));
    if (length > max_bytes) {
      return Error(absl::StrCat(describe(), " has length ", length, ", over the limit of ",
                                max_bytes, " bytes"));
    }
    if (length > remaining()) {
      return Error(absl::StrCat(describe(), " has length ", length, " but the file has ",
                                remaining(), " bytes left"));
    }
    return absl::string_view(reinterpret_cast<const char*>(Skip(length)), length);
  }

 private:
  absl::string_view file_name_;
  const unsigned char* data_;
  uint64_t size_;
  uint64_t offset_ = 0;
};

// Fails unless `count` items of at least `min_bytes` each fit in what is left of the file.
absl::Status CheckCount(const Cursor& cursor, uint64_t count, uint64_t min_bytes,
                        Describe describe) {
  if (count <= cursor.remaining() / min_bytes) return absl::OkStatus();
  return cursor.Error(absl::StrCat(describe(), " is ", count, ", but that many need at least ",
                                   min_bytes, " bytes each and the file has ", cursor.remaining(),
                                   " bytes left"));
}

absl::Status ReadValue(Cursor& cursor, GgufValueType type, int depth, Describe describe,
                       GgufValue& out);

absl::Status ReadScalar(Cursor& cursor, GgufValueType type, Describe describe, GgufValue& out) {
  const int size = FixedValueSize(type);
  LLMSERVE_RETURN_IF_ERROR(cursor.Need(size, describe));
  const unsigned char* p = cursor.Skip(size);
  auto load = [p](auto value) {
    std::memcpy(&value, p, sizeof(value));
    return value;
  };
  switch (type) {
    case GgufValueType::kUint8:
      out.uint_value = load(uint8_t{});
      break;
    case GgufValueType::kUint16:
      out.uint_value = load(uint16_t{});
      break;
    case GgufValueType::kUint32:
      out.uint_value = load(uint32_t{});
      break;
    case GgufValueType::kUint64:
      out.uint_value = load(uint64_t{});
      break;
    case GgufValueType::kInt8:
      out.int_value = load(int8_t{});
      break;
    case GgufValueType::kInt16:
      out.int_value = load(int16_t{});
      break;
    case GgufValueType::kInt32:
      out.int_value = load(int32_t{});
      break;
    case GgufValueType::kInt64:
      out.int_value = load(int64_t{});
      break;
    case GgufValueType::kFloat32:
      out.float_value = load(float{});
      break;
    case GgufValueType::kFloat64:
      out.float_value = load(double{});
      break;
    case GgufValueType::kBool:
      out.uint_value = p[0];
      if (p[0] > 1) {
        return cursor.Error(
            absl::StrCat(describe(), " is a bool of value ", p[0], ", neither 0 nor 1"));
      }
      break;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      break;
  }
  return absl::OkStatus();
}

absl::Status ReadArray(Cursor& cursor, int depth, Describe describe, GgufValue& out) {
  if (depth >= kMaxArrayDepth) {
    return cursor.Error(
        absl::StrCat(describe(), " nests arrays deeper than ", kMaxArrayDepth, " levels"));
  }
  uint32_t element_id = 0;
  LLMSERVE_ASSIGN_OR_RETURN(element_id, cursor.Read<uint32_t>(describe));
  if (!IsValidValueType(element_id)) {
    return cursor.Error(absl::StrCat(describe(), " has unknown array element type ", element_id));
  }
  out.element_type = static_cast<GgufValueType>(element_id);
  LLMSERVE_ASSIGN_OR_RETURN(out.count, cursor.Read<uint64_t>(describe));
  auto count_name = [&] { return absl::StrCat("the array length of ", describe()); };
  if (const int size = FixedValueSize(out.element_type); size > 0) {
    LLMSERVE_RETURN_IF_ERROR(CheckCount(cursor, out.count, size, count_name));
    out.raw = cursor.Skip(out.count * size);
    if (out.element_type != GgufValueType::kBool) return absl::OkStatus();
    for (uint64_t i = 0; i < out.count; ++i) {
      if (out.raw[i] > 1) {
        return cursor.Error(absl::StrCat(describe(), " element ", i, " is a bool of value ",
                                         out.raw[i], ", neither 0 nor 1"));
      }
    }
    return absl::OkStatus();
  }
  const bool strings = out.element_type == GgufValueType::kString;
  LLMSERVE_RETURN_IF_ERROR(
      CheckCount(cursor, out.count, strings ? kMinStringBytes : kMinArrayBytes, count_name));
  if (strings) {
    out.strings.reserve(out.count);
  } else {
    out.arrays.reserve(out.count);
  }
  for (uint64_t i = 0; i < out.count; ++i) {
    auto element = [&] { return absl::StrCat(describe(), " element ", i); };
    if (strings) {
      absl::string_view value;
      LLMSERVE_ASSIGN_OR_RETURN(value, cursor.ReadString(kNoLengthLimit, element));
      out.strings.push_back(value);
    } else {
      GgufValue& nested = out.arrays.emplace_back();
      LLMSERVE_RETURN_IF_ERROR(
          ReadValue(cursor, GgufValueType::kArray, depth + 1, element, nested));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& cursor, GgufValueType type, int depth, Describe describe,
                       GgufValue& out) {
  out.type = type;
  if (type == GgufValueType::kArray) return ReadArray(cursor, depth, describe, out);
  if (type == GgufValueType::kString) {
    LLMSERVE_ASSIGN_OR_RETURN(out.string_value, cursor.ReadString(kNoLengthLimit, describe));
    return absl::OkStatus();
  }
  return ReadScalar(cursor, type, describe, out);
}

absl::Status ReadHeader(Cursor& cursor, GgufContents& contents, uint64_t& tensor_count,
                        uint64_t& pair_count) {
  uint32_t magic = 0;
  LLMSERVE_ASSIGN_OR_RETURN(magic, cursor.Read<uint32_t>([] { return "the magic"; }));
  if (magic != kMagic) {
    const unsigned char* m = reinterpret_cast<const unsigned char*>(&magic);
    return cursor.Error(
        absl::StrFormat("not a GGUF file: magic is %02x %02x %02x %02x, expected "
                        "'GGUF' (47 47 55 46)",
                        m[0], m[1], m[2], m[3]));
  }
  LLMSERVE_ASSIGN_OR_RETURN(contents.version, cursor.Read<uint32_t>([] { return "the version"; }));
  if (contents.version != 2 && contents.version != 3) {
    const bool swapped = contents.version == 0x02000000 || contents.version == 0x03000000;
    return cursor.Error(absl::StrCat(
        "version ", contents.version, " is not supported (only 2 and 3",
        contents.version == 1 ? "; version 1 used 32-bit counts and was replaced in 2023" : "",
        swapped ? "; this looks like a big-endian file, which this reader does not read" : "",
        ")"));
  }
  LLMSERVE_ASSIGN_OR_RETURN(tensor_count, cursor.Read<uint64_t>([] { return "the tensor count"; }));
  LLMSERVE_ASSIGN_OR_RETURN(pair_count,
                            cursor.Read<uint64_t>([] { return "the metadata pair count"; }));
  if (tensor_count > kMaxTensors) {
    return cursor.Error(
        absl::StrCat("tensor count ", tensor_count, " is over the limit of ", kMaxTensors));
  }
  if (pair_count > kMaxMetadataPairs) {
    return cursor.Error(absl::StrCat("metadata pair count ", pair_count, " is over the limit of ",
                                     kMaxMetadataPairs));
  }
  // Checked before anything is sized on them.
  LLMSERVE_RETURN_IF_ERROR(
      CheckCount(cursor, pair_count, kMinPairBytes, [] { return "the metadata pair count"; }));
  return CheckCount(cursor, tensor_count, kMinTensorInfoBytes, [] { return "the tensor count"; });
}

absl::Status ReadMetadata(Cursor& cursor, uint64_t pair_count, GgufMetadata& metadata) {
  for (uint64_t i = 0; i < pair_count; ++i) {
    absl::string_view key;
    LLMSERVE_ASSIGN_OR_RETURN(key, cursor.ReadString(kMaxNameBytes, [i] {
      return absl::StrCat("the key of metadata pair #", i);
    }));
    if (key.empty()) return cursor.Error(absl::StrCat("metadata pair #", i, " has an empty key"));
    auto describe = [key] { return absl::StrCat("metadata key '", key, "'"); };
    uint32_t type_id = 0;
    LLMSERVE_ASSIGN_OR_RETURN(type_id, cursor.Read<uint32_t>(describe));
    if (!IsValidValueType(type_id)) {
      return cursor.Error(absl::StrCat(describe(), " has unknown value type ", type_id));
    }
    GgufValue value;
    LLMSERVE_RETURN_IF_ERROR(
        ReadValue(cursor, static_cast<GgufValueType>(type_id), /*depth=*/0, describe, value));
    if (absl::Status added = metadata.Add(std::string(key), std::move(value)); !added.ok()) {
      return cursor.Error(added.message());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Alignment(const Cursor& cursor, const GgufMetadata& metadata) {
  const GgufValue* value = metadata.Find("general.alignment");
  if (value == nullptr) return kDefaultAlignment;
  if (value->type != GgufValueType::kUint32) {
    return cursor.Error(absl::StrCat("general.alignment has type ", ValueTypeName(value->type),
                                     ", expected uint32"));
  }
  const uint64_t alignment = value->uint_value;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return cursor.Error(absl::StrCat("general.alignment ", alignment, " is not a power of two"));
  }
  return alignment;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string TypeList() {
  std::vector<absl::string_view> names;
  for (uint32_t id = 0; id < 64; ++id) {
    if (const GgmlTypeInfo* info = FindSupportedGgmlType(id); info != nullptr) {
      names.push_back(info->name);
    }
  }
  return absl::StrJoin(names, ", ");
}

// The tensor's type and, from its shape, its element count and byte size.
absl::Status SizeTensor(const Cursor& cursor, uint32_t type_id, GgufTensor& tensor) {
  const std::string where = absl::StrCat("tensor '", tensor.name, "'");
  const GgmlTypeInfo* info = FindSupportedGgmlType(type_id);
  if (info == nullptr) {
    const absl::string_view name = GgmlTypeName(type_id);
    if (name.empty()) {
      return cursor.Error(absl::StrCat(where, " has unknown type ", type_id));
    }
    return cursor.Error(
        absl::StrCat(where, " has type ", name, " (", type_id,
                     "), which this reader does not support (supported: ", TypeList(), ")"));
  }
  tensor.type = info->type;
  int64_t elements = 1;
  for (const int64_t extent : tensor.dims) {
    if (__builtin_mul_overflow(elements, extent, &elements)) {
      return cursor.Error(absl::StrCat(where, " has shape ", ShapeString(tensor.dims),
                                       ", more than 2^63 elements"));
    }
  }
  if (tensor.dims[0] % info->block_size != 0) {
    return cursor.Error(absl::StrCat(where, " of type ", info->name, " has rows of ",
                                     tensor.dims[0], " elements, not a multiple of its block of ",
                                     info->block_size));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements / info->block_size, info->block_bytes, &bytes)) {
    return cursor.Error(absl::StrCat(where, " of type ", info->name, " and shape ",
                                     ShapeString(tensor.dims), " takes more than 2^63 bytes"));
  }
  tensor.num_elements = elements;
  tensor.size = static_cast<size_t>(bytes);
  return absl::OkStatus();
}

absl::Status ReadTensorInfo(Cursor& cursor, uint64_t i, GgufTensor& tensor) {
  absl::string_view name;
  LLMSERVE_ASSIGN_OR_RETURN(name, cursor.ReadString(kMaxNameBytes, [i] {
    return absl::StrCat("the name of tensor info #", i);
  }));
  if (name.empty()) return cursor.Error(absl::StrCat("tensor info #", i, " has an empty name"));
  tensor.name = std::string(name);
  auto describe = [&tensor] { return absl::StrCat("tensor '", tensor.name, "'"); };
  uint32_t n_dims = 0;
  LLMSERVE_ASSIGN_OR_RETURN(n_dims, cursor.Read<uint32_t>(describe));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return cursor.Error(
        absl::StrCat(describe(), " has ", n_dims, " dimensions; 1 to ", kMaxDims, " are allowed"));
  }
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t extent = 0;
    LLMSERVE_ASSIGN_OR_RETURN(extent, cursor.Read<uint64_t>(describe));
    if (extent == 0 || extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return cursor.Error(
          absl::StrCat(describe(), " dimension ", d, " is ", extent, " (must be 1 to 2^63-1)"));
    }
    tensor.dims.push_back(static_cast<int64_t>(extent));
  }
  uint32_t type_id = 0;
  LLMSERVE_ASSIGN_OR_RETURN(type_id, cursor.Read<uint32_t>(describe));
  LLMSERVE_RETURN_IF_ERROR(SizeTensor(cursor, type_id, tensor));
  LLMSERVE_ASSIGN_OR_RETURN(tensor.offset, cursor.Read<uint64_t>(describe));
  return absl::OkStatus();
}

// Places every tensor in the data section: aligned, inside the file, sharing no byte.
absl::Status PlaceTensors(const Cursor& cursor, const unsigned char* data, uint64_t size,
                          GgufContents& contents) {
  const uint64_t data_size = size - contents.data_offset;
  for (GgufTensor& tensor : contents.tensors) {
    if (tensor.offset % contents.alignment != 0) {
      return cursor.Error(absl::StrCat("tensor '", tensor.name, "' has offset ", tensor.offset,
                                       ", not a multiple of the alignment ", contents.alignment));
    }
    if (tensor.offset > data_size || tensor.size > data_size - tensor.offset) {
      return cursor.Error(absl::StrCat("tensor '", tensor.name, "' needs ", tensor.size,
                                       " bytes at offset ", tensor.offset,
                                       " of the data section, which has ", data_size,
                                       " bytes (truncated file or corrupt offset)"));
    }
    tensor.data = data + contents.data_offset + tensor.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(contents.tensors.size());
  for (const GgufTensor& tensor : contents.tensors) by_offset.push_back(&tensor);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& before = *by_offset[i - 1];
    if (before.offset + before.size > by_offset[i]->offset) {
      return cursor.Error(absl::StrCat("tensors '", before.name, "' and '", by_offset[i]->name,
                                       "' overlap in the data section"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufContents> ParseGguf(absl::string_view file_name, const unsigned char* data,
                                       size_t size) {
  Cursor cursor(file_name, data, size);
  GgufContents contents;
  uint64_t tensor_count = 0;
  uint64_t pair_count = 0;
  LLMSERVE_RETURN_IF_ERROR(ReadHeader(cursor, contents, tensor_count, pair_count));
  LLMSERVE_RETURN_IF_ERROR(ReadMetadata(cursor, pair_count, contents.metadata));
  LLMSERVE_ASSIGN_OR_RETURN(contents.alignment, Alignment(cursor, contents.metadata));
  // Count checked against the bytes left in ReadHeader.
  contents.tensors.resize(tensor_count);
  absl::flat_hash_map<absl::string_view, uint64_t> seen;
  seen.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor& tensor = contents.tensors[i];
    LLMSERVE_RETURN_IF_ERROR(ReadTensorInfo(cursor, i, tensor));
    if (const auto [it, inserted] = seen.emplace(tensor.name, i); !inserted) {
      return cursor.Error(absl::StrCat("duplicate tensor name '", tensor.name, "' (tensor infos #",
                                       it->second, " and #", i, ")"));
    }
  }
  // The data section starts at the next multiple of the alignment (alignment <= 2^32, so no
  // overflow).
  contents.data_offset =
      (cursor.offset() + contents.alignment - 1) / contents.alignment * contents.alignment;
  if (contents.tensors.empty()) return contents;
  if (contents.data_offset > size) {
    return cursor.Error(absl::StrCat("truncated: the data section starts at offset ",
                                     contents.data_offset, ", past the end of the file (", size,
                                     " bytes)"));
  }
  LLMSERVE_RETURN_IF_ERROR(PlaceTensors(cursor, data, size, contents));
  return contents;
}

}  // namespace llmserve::worker::gguf
