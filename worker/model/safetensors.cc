#include "worker/model/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker {
namespace {

// The reference implementation's limit; a larger header is a corrupt or hostile file.
constexpr uint64_t kMaxHeaderSize = 100u << 20;

size_t ElementSize(absl::string_view dtype) {
  static constexpr std::pair<absl::string_view, size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return 0;
}

absl::Status Invalid(absl::string_view file_name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file_name, ": ", what));
}

absl::StatusOr<SafetensorsTensor> ParseEntry(absl::string_view file_name, const std::string& name,
                                             const nlohmann::json& entry, const unsigned char* data,
                                             uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!entry.is_object()) return Invalid(file_name, absl::StrCat(where, " is not an object"));
  for (const auto& [key, unused] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Invalid(file_name, absl::StrCat(where, " has unknown field '", key, "'"));
    }
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    return Invalid(file_name, absl::StrCat(where, " has no string 'dtype'"));
  }
  tensor.dtype = dtype->get<std::string>();
  tensor.element_size = ElementSize(tensor.dtype);
  if (tensor.element_size == 0) {
    return Invalid(file_name, absl::StrCat(where, " has unknown dtype '", tensor.dtype, "'"));
  }
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    return Invalid(file_name, absl::StrCat(where, " has no array 'shape'"));
  }
  uint64_t expected_size = tensor.element_size;
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned()) {
      return Invalid(file_name, absl::StrCat(where,
                                             " has a shape entry that is not a "
                                             "non-negative integer"));
    }
    const uint64_t extent = dim.get<uint64_t>();
    if (extent > (uint64_t{1} << 48) ||
        __builtin_mul_overflow(expected_size, extent, &expected_size)) {
      return Invalid(file_name, absl::StrCat(where, " has an impossibly large shape"));
    }
    tensor.shape.push_back(static_cast<int64_t>(extent));
  }
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return Invalid(file_name,
                   absl::StrCat(where, " needs 'data_offsets' as two non-negative integers"));
  }
  const uint64_t begin = (*offsets)[0].get<uint64_t>();
  const uint64_t end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    return Invalid(file_name, absl::StrCat(where, " has data_offsets [", begin, ", ", end,
                                           ") outside the data section of ", data_size, " bytes"));
  }
  if (end - begin != expected_size) {
    return Invalid(file_name,
                   absl::StrCat(where, ": dtype ", tensor.dtype, " x shape needs ", expected_size,
                                " bytes but data_offsets span ", end - begin));
  }
  tensor.data = data + begin;
  tensor.size = static_cast<size_t>(end - begin);
  return tensor;
}

// The format requires the ranges to tile the data section exactly: no overlap (two tensors
// aliasing the same bytes) and no holes (bytes nobody accounts for).
absl::Status CheckCoverage(absl::string_view file_name, std::vector<SafetensorsTensor> tensors,
                           const unsigned char* data, uint64_t data_size) {
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.data != b.data ? a.data < b.data : a.size < b.size;
            });
  uint64_t covered = 0;
  for (const SafetensorsTensor& tensor : tensors) {
    const uint64_t begin = static_cast<uint64_t>(tensor.data - data);
    if (begin < covered) {
      return Invalid(file_name, absl::StrCat("tensor '", tensor.name,
                                             "' overlaps the bytes of another tensor"));
    }
    if (begin > covered) {
      return Invalid(file_name, absl::StrCat("bytes [", covered, ", ", begin,
                                             ") of the data section belong to no tensor"));
    }
    covered = begin + tensor.size;
  }
  if (covered != data_size) {
    return Invalid(file_name, absl::StrCat("bytes [", covered, ", ", data_size,
                                           ") of the data section belong to no tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t SafetensorsTensor::NumElements() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(absl::string_view file_name,
                                                                const unsigned char* buffer,
                                                                size_t size) {
  if (size < 8) return Invalid(file_name, "shorter than the 8-byte header length");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | buffer[i];
  if (header_size > kMaxHeaderSize) {
    return Invalid(file_name, absl::StrCat("header length ", header_size, " exceeds the limit of ",
                                           kMaxHeaderSize, " bytes"));
  }
  if (header_size > size - 8) {
    return Invalid(file_name, absl::StrCat("header length ", header_size, " exceeds the file (",
                                           size, " bytes)"));
  }
  const char* header_begin = reinterpret_cast<const char*>(buffer + 8);
  const nlohmann::json header =
      nlohmann::json::parse(header_begin, header_begin + header_size, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded()) return Invalid(file_name, "header is not valid JSON");
  if (!header.is_object()) return Invalid(file_name, "header is not a JSON object");

  const unsigned char* data = buffer + 8 + header_size;
  const uint64_t data_size = size - 8 - header_size;
  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Invalid(file_name, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Invalid(file_name, absl::StrCat("__metadata__ '", key, "' is not a string"));
        }
      }
      continue;
    }
    absl::StatusOr<SafetensorsTensor> tensor = ParseEntry(file_name, name, entry, data, data_size);
    if (!tensor.ok()) return tensor.status();
    tensors.push_back(*std::move(tensor));
  }
  if (absl::Status coverage = CheckCoverage(file_name, tensors, data, data_size); !coverage.ok()) {
    return coverage;
  }
  return tensors;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapping = MappedFile::Open(path);
  if (!mapping.ok()) return mapping.status();
  if ((*mapping)->size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": shorter than the 8-byte header length"));
  }
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors =
      ParseSafetensors(path, (*mapping)->data(), (*mapping)->size());
  if (!tensors.ok()) return tensors.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path, *std::move(mapping)));
  file->tensors_ = *std::move(tensors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(absl::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace llmserve::worker
