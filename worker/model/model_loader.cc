#include "worker/model/model_loader.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "worker/model/gguf/gguf_file.h"
#include "worker/model/gguf_model_config.h"
#include "worker/model/gguf_tokenizer.h"
#include "worker/model/gguf_weights.h"
#include "worker/model/llama2c_checkpoint.h"
#include "worker/model/model_files.h"

namespace llmserve::worker {
namespace {

// Sets config->max_model_len from the flag value `requested` (0 keeps it). A GGUF RoPE model may
// go past its declared context (model_loader.h says why).
absl::Status ApplyMaxModelLen(int64_t requested, ModelFormat format, ModelConfig* config,
                              const std::string& path) {
  const int64_t declared = config->max_model_len;
  const bool extensible = format == ModelFormat::kGguf && config->position == PositionKind::kRope;
  const int64_t limit = extensible ? kMaxGgufModelLen : declared;
  if (requested < 0 || requested > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_model_len ", requested, " is outside [1, ", limit, "] (",
                     extensible ? "the most a GGUF file's RoPE model is served with"
                                : "the model's context length",
                     "); 0 uses the model's (", declared, ")"));
  }
  if (requested == 0) return absl::OkStatus();
  if (requested > declared) {
    LLMSERVE_LOG(WARNING) << path << " declares a context length of " << declared
                          << " tokens; serving " << requested
                          << " as --max_model_len asks (positions past the declared length are "
                             "computed, but the model may not have been trained on them)";
  }
  config->max_model_len = requested;
  return absl::OkStatus();
}

struct OpenedGguf {
  std::unique_ptr<gguf::GgufFile> file;
  ModelConfig config;
};

absl::StatusOr<OpenedGguf> OpenGguf(const std::string& path, int64_t max_model_len) {
  OpenedGguf opened;
  LLMSERVE_ASSIGN_OR_RETURN(opened.file, gguf::GgufFile::Open(path));
  LLMSERVE_ASSIGN_OR_RETURN(opened.config, ModelConfigFromGguf(*opened.file));
  LLMSERVE_RETURN_IF_ERROR(
      ApplyMaxModelLen(max_model_len, ModelFormat::kGguf, &opened.config, path));
  return opened;
}

}  // namespace

absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat(
        "model '", path,
        "' does not exist (--model takes a model directory, a .gguf file or a llama2.c .bin)"));
  }
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat("model '", path, "': ", error.message()));
  }
  if (std::filesystem::is_directory(status)) return ModelFormat::kHuggingFaceDirectory;
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", path, "' is neither a directory nor a regular file"));
  }
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, sizeof(magic));
  if ((in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) ||
      absl::EndsWith(absl::AsciiStrToLower(path), ".gguf")) {
    return ModelFormat::kGguf;
  }
  // llama2.c's format has no magic; its loader checks the header against the file's size.
  if (absl::EndsWith(absl::AsciiStrToLower(path), ".bin")) return ModelFormat::kLlama2c;
  return absl::InvalidArgumentError(absl::StrCat(
      "model '", path,
      "' is a file but not a GGUF file (no GGUF magic, no .gguf name) or a llama2.c checkpoint "
      "(no .bin name); --model takes a model directory (config.json, safetensors), a .gguf file "
      "or a llama2.c .bin"));
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path, int64_t max_model_len) {
  ModelFormat format;
  LLMSERVE_ASSIGN_OR_RETURN(format, DetectModelFormat(path));
  if (format == ModelFormat::kGguf) {
    OpenedGguf opened;
    LLMSERVE_ASSIGN_OR_RETURN(opened, OpenGguf(path, max_model_len));
    return opened.config;
  }
  if (format == ModelFormat::kLlama2c) {
    ModelConfig config;
    LLMSERVE_ASSIGN_OR_RETURN(config, ModelConfigFromLlama2c(path));
    LLMSERVE_RETURN_IF_ERROR(ApplyMaxModelLen(max_model_len, format, &config, path));
    return config;
  }
  std::unique_ptr<ModelFiles> files;
  LLMSERVE_ASSIGN_OR_RETURN(files, ModelFiles::Open(path));
  ModelConfig config;
  LLMSERVE_ASSIGN_OR_RETURN(
      config, ParseModelConfig(files->config_json(), files->generation_config_json()));
  LLMSERVE_RETURN_IF_ERROR(ApplyMaxModelLen(max_model_len, format, &config, path));
  return config;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(const std::string& path,
                                                        int64_t max_model_len, DType dtype,
                                                        const LoadProgress& progress) {
  ModelFormat format;
  LLMSERVE_ASSIGN_OR_RETURN(format, DetectModelFormat(path));
  if (format == ModelFormat::kHuggingFaceDirectory) {
    return LoadModelDirectory(path, max_model_len, dtype, progress);
  }
  if (format == ModelFormat::kLlama2c) {
    ModelConfig config;
    LLMSERVE_ASSIGN_OR_RETURN(config, LoadModelConfig(path, max_model_len));
    return LoadLlama2cWeights(path, config, {.dtype = dtype, .progress = progress});
  }
  OpenedGguf opened;
  LLMSERVE_ASSIGN_OR_RETURN(opened, OpenGguf(path, max_model_len));
  return LoadGgufWeights(*opened.file, opened.config, {.dtype = dtype, .progress = progress});
}

absl::StatusOr<common::tokenizer::TokenizerFiles> ModelFileTokenizer(const std::string& path) {
  ModelFormat format;
  LLMSERVE_ASSIGN_OR_RETURN(format, DetectModelFormat(path));
  if (format == ModelFormat::kGguf) return TokenizerFilesFromGgufPath(path);
  if (format != ModelFormat::kLlama2c) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a model file"));
  }
  std::string why;
  const std::string model_path = FindLlama2cTokenizer(path, &why);
  if (model_path.empty()) return absl::NotFoundError(why);
  common::tokenizer::SentencePieceModel model;
  LLMSERVE_ASSIGN_OR_RETURN(model, common::tokenizer::ReadSentencePieceModel(model_path));
  LLMSERVE_LOG(INFO) << path << ": the tokenizer is " << model_path;
  return common::tokenizer::TokenizerFilesFromSentencePiece(model);
}

}  // namespace llmserve::worker
