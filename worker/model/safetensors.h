// Reader for the safetensors format (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length, a JSON header mapping tensor names to dtype, shape and byte range,
// then the raw data. Files are mapped, not read: tensors point into the mapping.
//
// Every file is validated before use: header length and JSON, each entry's fields, dtype x shape
// = byte size, ranges in bounds, and the data section fully covered by non-overlapping ranges (as
// the format requires). Errors name the file and the tensor.
//
// Thread-safe after Open: immutable.

#ifndef LLMSERVE_WORKER_MODEL_SAFETENSORS_H_
#define LLMSERVE_WORKER_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/mapped_file.h"

namespace llmserve::worker {

struct SafetensorsTensor {
  std::string name;
  // The safetensors dtype name as written ("F32", "BF16", "I64", ...).
  std::string dtype;
  // Bytes per element of `dtype`.
  size_t element_size = 0;
  std::vector<int64_t> shape;
  // The tensor's bytes: `size` bytes at `data`, not aligned to anything.
  const unsigned char* data = nullptr;
  size_t size = 0;

  int64_t NumElements() const;
};

// The header of a safetensors buffer, parsed and validated against the buffer size. `file_name`
// only appears in error messages. Tensor data pointers point into `buffer`.
absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(absl::string_view file_name,
                                                                const unsigned char* buffer,
                                                                size_t size);

class SafetensorsFile {
 public:
  // Maps and validates the file. NOT_FOUND when it does not exist, INVALID_ARGUMENT when it is
  // not a valid safetensors file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsTensor* Find(absl::string_view name) const;

 private:
  SafetensorsFile(std::string path, std::unique_ptr<MappedFile> mapping)
      : path_(std::move(path)), mapping_(std::move(mapping)) {}

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  std::vector<SafetensorsTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_SAFETENSORS_H_
