// Tokenizer::FromJson / FromDirectory: builds the components and the BOS/EOS configuration.
#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/read_file.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "common/tokenizer/tokenizer.h"

namespace llmserve::common::tokenizer {
namespace {

absl::StatusOr<Json> ParseJson(std::string_view text, const char* name) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(name, " is not valid JSON"));
  if (!json.is_object())
    return absl::InvalidArgumentError(absl::StrCat(name, " must be an object"));
  return json;
}

const Json& Field(const Json& object, const char* key) {
  static const Json* const kNull = new Json();
  const auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

// tokenizer_config.json writes special tokens as "<s>" or {"content": "<s>", ...}.
std::optional<std::string> ConfigTokenContent(const Json& config, const char* key) {
  const Json& value = Field(config, key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && Field(value, "content").is_string()) {
    return Field(value, "content").get<std::string>();
  }
  return std::nullopt;
}

struct TemplateIds {
  std::vector<int32_t> prefix;  // special ids before the sequence
  std::vector<int32_t> suffix;  // ... and after it
};

absl::Status TemplateFromJson(const Json& processor, TemplateIds* ids) {
  const std::string type = ComponentType(processor);
  if (processor.is_null() || type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    const Json& steps = Field(processor, "processors");
    if (!steps.is_array())
      return absl::InvalidArgumentError("post_processor Sequence: bad processors");
    for (const Json& step : steps) LLMSERVE_RETURN_IF_ERROR(TemplateFromJson(step, ids));
    return absl::OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const Json& cls = Field(processor, "cls");
    const Json& sep = Field(processor, "sep");
    if (!cls.is_array() || cls.size() != 2 || !cls[1].is_number_integer() || !sep.is_array() ||
        sep.size() != 2 || !sep[1].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("post_processor ", type, ": bad cls/sep"));
    }
    ids->prefix = {cls[1].get<int32_t>()};
    ids->suffix = {sep[1].get<int32_t>()};
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported post_processor type \"", type, "\""));
  }
  const Json& single = Field(processor, "single");
  const Json& special = Field(processor, "special_tokens");
  if (!single.is_array())
    return absl::InvalidArgumentError("post_processor TemplateProcessing: bad single");
  bool seen_sequence = false;
  for (const Json& item : single) {
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const Json& piece = Field(item, "SpecialToken");
    const Json& name = Field(piece, "id");
    const Json& entry = name.is_string() ? Field(special, name.get<std::string>().c_str()) : Json();
    const Json& entry_ids = Field(entry, "ids");
    if (!entry_ids.is_array()) {
      return absl::InvalidArgumentError(
          "post_processor TemplateProcessing: special token without ids");
    }
    for (const Json& id : entry_ids) {
      if (!id.is_number_integer()) return absl::InvalidArgumentError("post_processor: bad id");
      (seen_sequence ? ids->suffix : ids->prefix).push_back(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Tokenizer::LoadSpecialTokenConfig(const Json& tokenizer, const Json& config) {
  TemplateIds template_ids;
  LLMSERVE_RETURN_IF_ERROR(TemplateFromJson(Field(tokenizer, "post_processor"), &template_ids));
  for (const int32_t id : template_ids.prefix) {
    if (!IdToToken(id))
      return absl::InvalidArgumentError(absl::StrCat("post_processor: unknown id ", id));
  }
  for (const char* key : {"bos_token", "eos_token"}) {
    const std::optional<std::string> content = ConfigTokenContent(config, key);
    if (!content) continue;
    std::optional<int32_t> id = TokenToId(*content);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: ", key, " \"", *content, "\" is not a token"));
    }
    (std::string_view(key) == "bos_token" ? bos_token_id_ : eos_token_id_) = id;
  }
  if (!bos_token_id_ && !template_ids.prefix.empty()) bos_token_id_ = template_ids.prefix.front();
  if (!eos_token_id_ && !template_ids.suffix.empty()) eos_token_id_ = template_ids.suffix.back();
  // tokenizer_config.json wins; without it the post-processor template decides.
  prefix_ids_ = template_ids.prefix;
  suffix_ids_ = template_ids.suffix;
  bool add = false;
  if (Field(config, "add_bos_token").is_boolean()) {
    add = Field(config, "add_bos_token").get<bool>();
    prefix_ids_.clear();
    if (add && bos_token_id_) prefix_ids_.push_back(*bos_token_id_);
  }
  if (Field(config, "add_eos_token").is_boolean()) {
    add = Field(config, "add_eos_token").get<bool>();
    suffix_ids_.clear();
    if (add && eos_token_id_) suffix_ids_.push_back(*eos_token_id_);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  Json json;
  Json config = Json::object();
  LLMSERVE_ASSIGN_OR_RETURN(json, ParseJson(tokenizer_json, "tokenizer.json"));
  if (!tokenizer_config_json.empty()) {
    LLMSERVE_ASSIGN_OR_RETURN(config, ParseJson(tokenizer_config_json, "tokenizer_config.json"));
  }
  // The accessors below check types; this catch is the backstop that keeps any nlohmann
  // exception from leaving the module.
  try {
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    LLMSERVE_ASSIGN_OR_RETURN(tok->normalizer_, NormalizerFromJson(Field(json, "normalizer")));
    LLMSERVE_ASSIGN_OR_RETURN(tok->pre_tokenizer_,
                              PreTokenizerFromJson(Field(json, "pre_tokenizer")));
    LLMSERVE_ASSIGN_OR_RETURN(tok->decoder_, DecoderFromJson(Field(json, "decoder")));
    if (!Field(json, "model").is_object()) {
      return absl::InvalidArgumentError("tokenizer.json: missing \"model\"");
    }
    LLMSERVE_ASSIGN_OR_RETURN(tok->model_, ModelFromJson(Field(json, "model")));
    LLMSERVE_ASSIGN_OR_RETURN(tok->added_, AddedVocabulary::FromJson(Field(json, "added_tokens"),
                                                                     tok->normalizer_.get()));
    tok->vocab_size_ = tok->model_->id_limit();
    for (const AddedToken& token : tok->added_.tokens()) {
      tok->vocab_size_ = std::max(tok->vocab_size_, token.id + 1);
    }
    LLMSERVE_RETURN_IF_ERROR(tok->LoadSpecialTokenConfig(json, config));
    return tok;
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  // The worker's bound for a model directory's JSON files (worker/model/model_files.cc).
  constexpr size_t kMaxTokenizerFileBytes = size_t{64} << 20;
  auto read = [](const std::filesystem::path& path) {
    return common::ReadFileUpTo(path.string(), kMaxTokenizerFileBytes, "tokenizer file");
  };
  const std::filesystem::path root(dir);
  std::string tokenizer_json;
  std::string config_json;
  std::error_code error;
  // A SentencePiece model: the file itself, or a directory's tokenizer.model without a
  // tokenizer.json (as older Llama repositories ship).
  std::filesystem::path sentencepiece;
  if (std::filesystem::is_regular_file(root, error)) {
    sentencepiece = root;
  } else if (!std::filesystem::exists(root / "tokenizer.json", error) &&
             std::filesystem::exists(root / "tokenizer.model", error)) {
    sentencepiece = root / "tokenizer.model";
  }
  if (!sentencepiece.empty()) {
    SentencePieceModel model;
    LLMSERVE_ASSIGN_OR_RETURN(model, ReadSentencePieceModel(sentencepiece.string()));
    const TokenizerFiles files = TokenizerFilesFromSentencePiece(model);
    tokenizer_json = files.tokenizer_json;
    config_json = files.tokenizer_config_json;
  } else {
    LLMSERVE_ASSIGN_OR_RETURN(tokenizer_json, read(root / "tokenizer.json"));
  }
  if (std::filesystem::is_directory(root, error) &&
      std::filesystem::exists(root / "tokenizer_config.json", error)) {
    LLMSERVE_ASSIGN_OR_RETURN(config_json, read(root / "tokenizer_config.json"));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = FromJson(tokenizer_json, config_json);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(dir, ": ", tok.status().message()));
  }
  return tok;
}

}  // namespace llmserve::common::tokenizer
