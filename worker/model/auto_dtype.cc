#include "worker/model/auto_dtype.h"

#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "worker/model/gguf/gguf_file.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {

absl::StatusOr<DType> CheckpointDType(const ModelFiles& files) {
  const nlohmann::json config = nlohmann::json::parse(files.config_json(), nullptr,
                                                      /*allow_exceptions=*/false);
  if (config.is_object()) {
    for (const char* field : {"torch_dtype", "dtype"}) {
      const auto it = config.find(field);
      if (it == config.end() || it->is_null()) continue;
      const std::string value = it->is_string() ? it->get<std::string>() : it->dump();
      if (value == "float32") return DType::kF32;
      if (value == "float16") return DType::kF16;
      if (value == "bfloat16") return DType::kBF16;
      return absl::InvalidArgumentError(absl::StrCat(
          files.directory(), "/config.json: ", field, " '", value,
          "' has no runtime dtype (float32, float16 or bfloat16); pass f32, f16 or bf16"));
    }
  }
  // No declared dtype: the dtype most of the weights' bytes are in is the largest tensor's.
  const SafetensorsTensor* largest = nullptr;
  for (const SafetensorsTensor* tensor : files.AllTensors()) {
    if (!ParseSafetensorsDType(tensor->dtype).ok()) continue;
    if (largest == nullptr || tensor->size > largest->size) largest = tensor;
  }
  if (largest == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.directory(), ": no F32, F16 or BF16 tensor to take the dtype from"));
  }
  return ParseSafetensorsDType(largest->dtype);
}

absl::StatusOr<DType> GgufCheckpointDType(const std::string& path) {
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  const gguf::GgufTensor* largest = nullptr;
  for (const gguf::GgufTensor& tensor : (*file)->tensors()) {
    if (largest == nullptr || tensor.num_elements > largest->num_elements) largest = &tensor;
  }
  if (largest == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no tensors to take the dtype from"));
  }
  switch (largest->type) {
    case gguf::GgmlType::kF16:
      return DType::kF16;
    case gguf::GgmlType::kBF16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

absl::StatusOr<DType> ResolveDTypeFlag(absl::string_view flag, const std::string& model_dir,
                                       absl::string_view backend) {
  if (flag != "auto") {
    absl::StatusOr<DType> dtype = ParseDType(flag);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown dtype '", flag, "': expected auto, f32, f16 or bf16"));
    }
    return dtype;
  }
  absl::StatusOr<ModelFormat> format = DetectModelFormat(model_dir);
  if (!format.ok()) return format.status();
  absl::StatusOr<DType> dtype;
  if (*format == ModelFormat::kGguf) {
    dtype = GgufCheckpointDType(model_dir);
  } else if (*format == ModelFormat::kLlama2c) {
    dtype = DType::kF32;  // llama2.c's version-0 checkpoints are f32
  } else {
    absl::StatusOr<std::unique_ptr<ModelFiles>> files = ModelFiles::Open(model_dir);
    if (!files.ok()) return files.status();
    dtype = CheckpointDType(**files);
  }
  if (!dtype.ok()) return dtype.status();
  if (backend == "cuda" && *dtype == DType::kF32) return DType::kF16;
  return dtype;
}

}  // namespace llmserve::worker
