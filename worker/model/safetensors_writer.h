// Writes safetensors files (for llmserve-make-model and tests). Header entries are sorted by
// name, the header is padded with spaces to a multiple of 8 bytes (as the reference writer does)
// and tensors are laid out in name order.
//
// Not thread-safe.

#ifndef LLMSERVE_WORKER_MODEL_SAFETENSORS_WRITER_H_
#define LLMSERVE_WORKER_MODEL_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace llmserve::worker {

class SafetensorsWriter {
 public:
  // Adds a tensor; `bytes` must hold exactly the product of `shape` times the dtype's size (the
  // writer does not check: tests use it to write invalid files too). A second tensor of the same
  // name replaces the first.
  void Add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           std::string bytes);

  // Metadata written under "__metadata__" (string values only, as the format requires).
  void SetMetadata(const std::string& key, const std::string& value);

  // The whole file's bytes.
  std::string Serialize() const;

  // Serializes into `path`, replacing it.
  absl::Status WriteFile(const std::string& path) const;

 private:
  // The length prefix and the padded JSON header.
  std::string Header() const;

  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_SAFETENSORS_WRITER_H_
