#include "worker/model/gguf_tokenizer.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/sentencepiece_json.h"

namespace llmserve::worker {
namespace {

using Json = nlohmann::json;

constexpr int64_t kGgufNoTokenId = 0xffffffff;

// GPT-2's pre-tokenizer regex is ByteLevel's own (use_regex); these are the others llama.cpp names.
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct GgufVocabulary {
  std::vector<std::string> tokens;
  std::vector<float> scores;  // empty when the file has none
  std::vector<int64_t> types;
};

absl::Status KeyError(const gguf::GgufFile& file, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(file.name(), ": ", status.message()));
}

absl::StatusOr<GgufVocabulary> ReadVocabulary(const gguf::GgufFile& file) {
  GgufVocabulary v;
  absl::StatusOr<absl::Span<const absl::string_view>> tokens =
      file.metadata().GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return KeyError(file, tokens.status());
  if (tokens->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), ": tokenizer.ggml.tokens is empty"));
  }
  v.tokens.reserve(tokens->size());
  for (absl::string_view token : *tokens) v.tokens.emplace_back(token);
  const size_t n = v.tokens.size();
  if (file.metadata().Has("tokenizer.ggml.scores")) {
    absl::StatusOr<std::vector<float>> scores =
        file.metadata().GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return KeyError(file, scores.status());
    v.scores = *std::move(scores);
    if (v.scores.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(file.name(), ": tokenizer.ggml.scores has ",
                                                     v.scores.size(), " entries for ", n,
                                                     " tokens"));
    }
  }
  if (file.metadata().Has("tokenizer.ggml.token_type")) {
    absl::StatusOr<std::vector<int64_t>> types =
        file.metadata().GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return KeyError(file, types.status());
    v.types = *std::move(types);
    if (v.types.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.name(), ": tokenizer.ggml.token_type has ", v.types.size(),
                       " entries for ", n, " tokens"));
    }
  } else {
    v.types.assign(n, 1);
  }
  return v;
}

// The token `tokenizer.ggml.<name>_token_id` names, or "" when absent or none.
absl::StatusOr<std::string> SpecialToken(const gguf::GgufFile& file, const GgufVocabulary& v,
                                         absl::string_view name) {
  const std::string key = absl::StrCat("tokenizer.ggml.", name, "_token_id");
  if (!file.metadata().Has(key)) return std::string();
  absl::StatusOr<int64_t> id = file.metadata().GetInt(key);
  if (!id.ok()) return KeyError(file, id.status());
  if (*id == kGgufNoTokenId) return std::string();
  if (*id < 0 || *id >= static_cast<int64_t>(v.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat(file.name(), ": ", key, " ", *id,
                                                   " is outside the vocabulary of ",
                                                   v.tokens.size(), " tokens"));
  }
  return v.tokens[*id];
}

absl::StatusOr<bool> BoolOr(const gguf::GgufFile& file, const std::string& key, bool fallback) {
  if (!file.metadata().Has(key)) return fallback;
  absl::StatusOr<bool> value = file.metadata().GetBool(key);
  if (!value.ok()) return KeyError(file, value.status());
  return *value;
}

absl::Status LlamaTokenizerJson(const gguf::GgufFile& file, const GgufVocabulary& v, Json* out) {
  if (v.scores.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), ": tokenizer.ggml.scores is required for a 'llama' vocabulary"));
  }
  std::string unk;
  LLMSERVE_ASSIGN_OR_RETURN(unk, SpecialToken(file, v, "unknown"));
  // llama.cpp's SentencePiece tokenizer: a dummy prefix, spaces escaped, nothing collapsed.
  *out = common::tokenizer::SentencePieceBpeTokenizerJson({v.tokens, v.scores, v.types}, unk, {});
  return absl::OkStatus();
}

absl::Status Gpt2TokenizerJson(const gguf::GgufFile& file, const GgufVocabulary& v, Json* out) {
  absl::StatusOr<absl::Span<const absl::string_view>> merges =
      file.metadata().GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) return KeyError(file, merges.status());
  std::string pre = "default";
  if (file.metadata().Has("tokenizer.ggml.pre")) {
    absl::StatusOr<absl::string_view> value = file.metadata().GetString("tokenizer.ggml.pre");
    if (!value.ok()) return KeyError(file, value.status());
    pre = std::string(*value);
  }
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", pre == "default" || pre == "gpt-2"}};
  Json pre_tokenizer;
  if (pre == "default" || pre == "gpt-2") {
    pre_tokenizer = byte_level;
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "qwen2") {
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"},
                        {"pattern", {{"Regex", pre == "qwen2" ? kQwen2Pattern : kLlama3Pattern}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       byte_level}}};
  } else {
    return absl::UnimplementedError(
        absl::StrCat(file.name(), ": tokenizer.ggml.pre '", pre,
                     "' is not supported (default, gpt-2, llama-bpe, qwen2)"));
  }
  Json merge_list = Json::array();
  for (absl::string_view merge : *merges) merge_list.push_back(std::string(merge));
  *out = Json{{"version", "1.0"},
              {"added_tokens", common::tokenizer::AddedTokensJson(v.tokens, v.types)},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", common::tokenizer::VocabJson(v.tokens)},
                {"merges", merge_list}}}};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufTokenizerFiles> TokenizerFilesFromGguf(const gguf::GgufFile& file) {
  if (!file.metadata().Has("tokenizer.ggml.model")) {
    return absl::NotFoundError(absl::StrCat(file.name(), ": no tokenizer.ggml.model"));
  }
  absl::StatusOr<absl::string_view> model = file.metadata().GetString("tokenizer.ggml.model");
  if (!model.ok()) return KeyError(file, model.status());
  if (*model != "llama" && *model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(file.name(), ": tokenizer.ggml.model '", *model,
                                                 "' is not supported (llama, gpt2)"));
  }
  const bool llama = *model == "llama";
  GgufVocabulary vocabulary;
  LLMSERVE_ASSIGN_OR_RETURN(vocabulary, ReadVocabulary(file));
  Json tokenizer;
  LLMSERVE_RETURN_IF_ERROR(llama ? LlamaTokenizerJson(file, vocabulary, &tokenizer)
                                 : Gpt2TokenizerJson(file, vocabulary, &tokenizer));
  Json config = Json::object();
  for (const auto& [name, field] : {std::pair<const char*, const char*>{"bos", "bos_token"},
                                    {"eos", "eos_token"},
                                    {"unknown", "unk_token"}}) {
    std::string token;
    LLMSERVE_ASSIGN_OR_RETURN(token, SpecialToken(file, vocabulary, name));
    if (!token.empty()) config[field] = token;
  }
  bool add_bos = false, add_eos = false;
  LLMSERVE_ASSIGN_OR_RETURN(add_bos, BoolOr(file, "tokenizer.ggml.add_bos_token", llama));
  LLMSERVE_ASSIGN_OR_RETURN(add_eos, BoolOr(file, "tokenizer.ggml.add_eos_token", false));
  config["add_bos_token"] = add_bos;
  config["add_eos_token"] = add_eos;
  GgufTokenizerFiles files;
  if (file.metadata().Has("tokenizer.chat_template")) {
    absl::StatusOr<absl::string_view> chat = file.metadata().GetString("tokenizer.chat_template");
    if (!chat.ok()) return KeyError(file, chat.status());
    files.chat_template = std::string(*chat);
    config["chat_template"] = files.chat_template;
  }
  // Token strings are bytes; invalid UTF-8 becomes U+FFFD rather than an exception.
  files.tokenizer_json = tokenizer.dump(-1, ' ', false, Json::error_handler_t::replace);
  files.tokenizer_config_json = config.dump(-1, ' ', false, Json::error_handler_t::replace);
  return files;
}

absl::StatusOr<GgufTokenizerFiles> TokenizerFilesFromGgufPath(const std::string& path) {
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return TokenizerFilesFromGguf(**file);
}

}  // namespace llmserve::worker
