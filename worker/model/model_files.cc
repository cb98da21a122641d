#include "worker/model/model_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

constexpr size_t kMaxConfigBytes = 64u << 20;

bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == absl::string_view::npos && name.find('\0') == absl::string_view::npos;
}

// The shard of each tensor, from model.safetensors.index.json.
absl::StatusOr<absl::btree_map<std::string, std::string>> ReadIndex(const std::string& path) {
  std::string text;
  LLMSERVE_ASSIGN_OR_RETURN(text, ReadTextFile(path, kMaxConfigBytes));
  const nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object() || weight_map->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": 'weight_map' must be a non-empty object"));
  }
  absl::btree_map<std::string, std::string> shard_of;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": weight_map entry for '", tensor,
                                                     "' must be a file name in the directory"));
    }
    shard_of[tensor] = shard.get<std::string>();
  }
  return shard_of;
}

// Checkpoints quantized before transformers read quantization settings from config.json keep them
// beside it: AutoGPTQ's quantize_config.json and AutoAWQ's quant_config.json (neither names its
// method). When config.json has no quantization_config, the first of those present is spliced in
// as one, with its quant_method, as vLLM reads them. config.json text that does not parse is left
// alone for ParseModelConfig to report.
absl::Status AddSideQuantizationConfig(const std::filesystem::path& dir, std::string* config_json) {
  nlohmann::json config = nlohmann::json::parse(*config_json, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() ||
      (config.contains("quantization_config") && !config["quantization_config"].is_null())) {
    return absl::OkStatus();
  }
  for (const auto& [file, method] :
       {std::pair<const char*, const char*>{"quantize_config.json", "gptq"},
        {"quant_config.json", "awq"}}) {
    absl::StatusOr<std::string> text = ReadTextFile((dir / file).string(), kMaxConfigBytes);
    if (absl::IsNotFound(text.status())) continue;
    if (!text.ok()) return text.status();
    nlohmann::json side = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!side.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat((dir / file).string(), ": not a JSON object"));
    }
    if (!side.contains("quant_method")) side["quant_method"] = method;
    config["quantization_config"] = std::move(side);
    *config_json = config.dump();
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path, size_t max_bytes) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  const auto size = std::filesystem::file_size(path, error);
  if (error || size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than the limit of ", max_bytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::StatusOr<std::unique_ptr<ModelFiles>> ModelFiles::Open(const std::string& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return absl::NotFoundError(absl::StrCat("model directory ", directory, " does not exist"));
  }
  std::unique_ptr<ModelFiles> files(new ModelFiles());
  files->directory_ = directory;
  const std::filesystem::path dir(directory);
  LLMSERVE_ASSIGN_OR_RETURN(files->config_json_,
                            ReadTextFile((dir / "config.json").string(), kMaxConfigBytes));
  LLMSERVE_RETURN_IF_ERROR(AddSideQuantizationConfig(dir, &files->config_json_));
  auto generation = ReadTextFile((dir / "generation_config.json").string(), kMaxConfigBytes);
  if (generation.ok()) {
    files->generation_config_json_ = *std::move(generation);
  } else if (!absl::IsNotFound(generation.status())) {
    return generation.status();
  }

  const std::string index_path = (dir / "model.safetensors.index.json").string();
  if (std::filesystem::exists(index_path, error)) {
    absl::btree_map<std::string, std::string> shard_of;
    LLMSERVE_ASSIGN_OR_RETURN(shard_of, ReadIndex(index_path));
    std::vector<std::string> shard_names;
    for (const auto& [tensor, shard] : shard_of) {
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) {
        shard_names.push_back(shard);
      }
    }
    LLMSERVE_RETURN_IF_ERROR(files->OpenShards(shard_names));
    for (const auto& [tensor, shard] : shard_of) {
      const SafetensorsTensor* found = files->Find(tensor);
      if (found == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path, ": tensor '", tensor, "' is listed in shard ", shard, " but missing"));
      }
    }
    // Every tensor of a shard must be listed, and listed for that shard: otherwise the index
    // is stale and the model may not be the one its author meant.
    for (const auto& shard : files->shards_) {
      const std::string shard_name = std::filesystem::path(shard->path()).filename().string();
      for (const SafetensorsTensor& tensor : shard->tensors()) {
        const auto listed = shard_of.find(tensor.name);
        if (listed == shard_of.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              index_path, ": tensor '", tensor.name, "' of ", shard_name, " is not in weight_map"));
        }
        if (listed->second != shard_name) {
          return absl::InvalidArgumentError(absl::StrCat(index_path, ": tensor '", tensor.name,
                                                         "' is in ", shard_name,
                                                         " but weight_map says ", listed->second));
        }
      }
    }
    return files;
  }
  LLMSERVE_RETURN_IF_ERROR(files->OpenShards({"model.safetensors"}));
  return files;
}

absl::Status ModelFiles::OpenShards(const std::vector<std::string>& shard_names) {
  const std::filesystem::path dir(directory_);
  for (const std::string& name : shard_names) {
    std::unique_ptr<SafetensorsFile> shard;
    LLMSERVE_ASSIGN_OR_RETURN(shard, SafetensorsFile::Open((dir / name).string()));
    for (const SafetensorsTensor& tensor : shard->tensors()) {
      if (!tensors_.emplace(tensor.name, &tensor).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard->path(), ": tensor '", tensor.name, "' is also in another shard"));
      }
    }
    shards_.push_back(std::move(shard));
  }
  return absl::OkStatus();
}

const SafetensorsTensor* ModelFiles::Find(absl::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<const SafetensorsTensor*> ModelFiles::AllTensors() const {
  std::vector<const SafetensorsTensor*> all;
  for (const auto& shard : shards_) {
    for (const SafetensorsTensor& tensor : shard->tensors()) all.push_back(&tensor);
  }
  return all;
}

}  // namespace llmserve::worker
