// A GGUF file (llama.cpp's model format), memory-mapped read-only and validated on open
// (gguf_parser.h lists what is refused). Tensors point into the mapping; nothing is copied.
//
//   LLMSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
//   file->metadata().GetString("general.architecture");
//   const GgufTensor* embedding = file->FindTensor("token_embd.weight");
//
// Thread-safe after Open: immutable.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_GGUF_FILE_H_
#define LLMSERVE_WORKER_MODEL_GGUF_GGUF_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/mapped_file.h"
#include "worker/model/gguf/gguf_metadata.h"
#include "worker/model/gguf/gguf_parser.h"
#include "worker/model/gguf/gguf_tensor.h"

namespace llmserve::worker::gguf {

class GgufFile {
 public:
  // Maps and validates the file. NOT_FOUND when it does not exist, INVALID_ARGUMENT when it
  // cannot be read or is not a valid GGUF file (the message names the file and the field).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates `size` bytes at `data`, which the caller keeps alive (and unchanged) for as long
  // as the result lives. `name` appears in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(absl::string_view name,
                                                         const unsigned char* data, size_t size);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // The path (Open) or name (Parse).
  const std::string& name() const { return name_; }
  uint32_t version() const { return contents_.version; }
  uint64_t alignment() const { return contents_.alignment; }
  // Where the data section starts, from the start of the file.
  uint64_t data_offset() const { return contents_.data_offset; }
  const GgufMetadata& metadata() const { return contents_.metadata; }
  // In file order.
  const std::vector<GgufTensor>& tensors() const { return contents_.tensors; }
  // The tensor called `name`, or nullptr.
  const GgufTensor* FindTensor(absl::string_view name) const;
  // The tensor called `name`; NOT_FOUND naming it and the file when there is none.
  absl::StatusOr<const GgufTensor*> GetTensor(absl::string_view name) const;

 private:
  GgufFile(std::string name, std::unique_ptr<MappedFile> mapping, GgufContents contents);

  std::string name_;
  // The file when Open mapped it; nullptr after Parse.
  std::unique_ptr<MappedFile> mapping_;
  GgufContents contents_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace llmserve::worker::gguf

#endif  // LLMSERVE_WORKER_MODEL_GGUF_GGUF_FILE_H_
