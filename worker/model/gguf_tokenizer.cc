#include "worker/model/gguf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace llmserve::worker {
namespace {

using Json = nlohmann::json;

// llama.cpp's token types (llama_token_type).
constexpr int64_t kTokenUnknown = 2;
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;
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

// Byte offsets where UTF-8 characters start in `piece`, past the first (Python's str indices).
std::vector<size_t> CharacterBoundaries(const std::string& piece) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < piece.size(); ++i) {
    if ((static_cast<unsigned char>(piece[i]) & 0xC0) != 0x80) cuts.push_back(i);
  }
  return cuts;
}

// Hugging Face's SentencePieceExtractor.extract(vocab_scores) (the header says what it does).
Json MergesFromScores(const GgufVocabulary& v) {
  absl::flat_hash_map<std::string, int64_t> id_of;
  // Python's dict keeps the last id of a repeated piece.
  for (size_t i = 0; i < v.tokens.size(); ++i) id_of[v.tokens[i]] = static_cast<int64_t>(i);
  struct Merge {
    int64_t left, right;
    float score;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& piece = v.tokens[i];
    std::vector<Merge> local;
    for (size_t cut : CharacterBoundaries(piece)) {
      const auto left = id_of.find(piece.substr(0, cut));
      const auto right = id_of.find(piece.substr(cut));
      if (left != id_of.end() && right != id_of.end()) {
        local.push_back({left->second, right->second, v.scores[i]});
      }
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  Json out = Json::array();
  for (const Merge& m : merges) out.push_back({v.tokens[m.left], v.tokens[m.right]});
  return out;
}

Json AddedTokens(const GgufVocabulary& v) {
  Json added = Json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int64_t type = v.types[i];
    if (type != kTokenControl && type != kTokenUserDefined && type != kTokenUnknown) continue;
    added.push_back({{"id", i},
                     {"content", v.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", type == kTokenUserDefined},
                     {"special", type != kTokenUserDefined}});
  }
  return added;
}

Json Vocab(const GgufVocabulary& v) {
  Json vocab = Json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  return vocab;
}

absl::Status LlamaTokenizerJson(const gguf::GgufFile& file, const GgufVocabulary& v, Json* out) {
  if (v.scores.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), ": tokenizer.ggml.scores is required for a 'llama' vocabulary"));
  }
  std::string unk;
  LLMSERVE_ASSIGN_OR_RETURN(unk, SpecialToken(file, v, "unknown"));
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  *out = Json{{"version", "1.0"},
              {"added_tokens", AddedTokens(v)},
              {"normalizer",
               {{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", space}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}}}}},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", unk.empty() ? Json(nullptr) : Json(unk)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false},
                {"vocab", Vocab(v)},
                {"merges", MergesFromScores(v)}}}};
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
              {"added_tokens", AddedTokens(v)},
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
                {"vocab", Vocab(v)},
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
