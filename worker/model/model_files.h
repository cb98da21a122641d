// A Hugging Face model directory on disk: config.json, generation_config.json (optional), and
// the weights as model.safetensors or as shards listed by model.safetensors.index.json. Shards
// are mapped, not read.
//
// Validation: the index's weight_map names plain file names in the directory; every tensor it
// lists is in the shard it names; every tensor of a shard is listed; no tensor is in two shards.
//
// Thread-safe after Open: immutable.

#ifndef LLMSERVE_WORKER_MODEL_MODEL_FILES_H_
#define LLMSERVE_WORKER_MODEL_MODEL_FILES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/safetensors.h"

namespace llmserve::worker {

class ModelFiles {
 public:
  // NOT_FOUND when the directory or a required file is missing; INVALID_ARGUMENT (naming the
  // file and tensor) when a file is malformed.
  static absl::StatusOr<std::unique_ptr<ModelFiles>> Open(const std::string& directory);

  const std::string& directory() const { return directory_; }
  // config.json's text. Without a quantization_config in it, AutoGPTQ's quantize_config.json or
  // AutoAWQ's quant_config.json beside it (older quantized checkpoints) is spliced in as one.
  const std::string& config_json() const { return config_json_; }
  // Empty when the model has no generation_config.json.
  const std::string& generation_config_json() const { return generation_config_json_; }

  // The tensor called `name` in whichever shard holds it, or nullptr.
  const SafetensorsTensor* Find(absl::string_view name) const;
  // Every tensor of every shard.
  std::vector<const SafetensorsTensor*> AllTensors() const;

 private:
  ModelFiles() = default;
  absl::Status OpenShards(const std::vector<std::string>& shard_names);

  std::string directory_;
  std::string config_json_;
  std::string generation_config_json_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  absl::flat_hash_map<std::string, const SafetensorsTensor*> tensors_;
};

// Reads a whole small text file (config files). NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, size_t max_bytes);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_MODEL_FILES_H_
