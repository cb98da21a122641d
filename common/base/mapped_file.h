// A read-only memory mapping of a whole regular file. Model files (safetensors, GGUF) are mapped,
// not read: tensors point into the mapping, and pages are read from disk on first use (or never,
// for tensors a load skips).
//
// Thread-safe after Open: the mapping is immutable until destruction.

#ifndef LLMSERVE_COMMON_BASE_MAPPED_FILE_H_
#define LLMSERVE_COMMON_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace llmserve {

class MappedFile {
 public:
  // NOT_FOUND when `path` does not exist; INVALID_ARGUMENT naming the path when it is not a
  // regular file, cannot be opened or cannot be mapped. An empty file is mapped as size 0 and a
  // null data(): each format says in its own words why that is not a file of its kind.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(mapping_); }
  size_t size() const { return size_; }

 private:
  MappedFile(void* mapping, size_t size) : mapping_(mapping), size_(size) {}

  void* mapping_;
  size_t size_;
};

}  // namespace llmserve

#endif  // LLMSERVE_COMMON_BASE_MAPPED_FILE_H_
