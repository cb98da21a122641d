// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) for BPE models: byte-level
// BPE (GPT-2, Llama-3, Qwen2, DeepSeek, StarCoder, Falcon) and SentencePiece-style BPE with
// byte fallback (Llama-2, Mistral, Phi-3). See docs/tokenizer.md for the supported components.
//
// The encode pipeline is HF's: split on added tokens in the raw text -> normalize each piece ->
// split on normalized added tokens -> pre-tokenize -> BPE each split. Anything the loader does
// not support is an error at load time naming the component, never silently different ids.
//
// Thread-safety: immutable after loading. Encode, Decode and all accessors are const and safe
// to call concurrently from any number of threads.
#ifndef LLMSERVE_COMMON_TOKENIZER_TOKENIZER_H_
#define LLMSERVE_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/added_vocabulary.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer_model.h"

namespace llmserve::common::tokenizer {

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json. A SentencePiece model
  // loads too (sentencepiece_model.h): `dir` naming a .model file itself, or a directory with a
  // tokenizer.model and no tokenizer.json (its tokenizer_config.json, when present, still
  // applies). NOT_FOUND when there is neither; otherwise the errors of ReadSentencePieceModel and
  // FromJson.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);

  // `tokenizer_config_json` may be empty. INVALID_ARGUMENT for malformed JSON and for any
  // unsupported or malformed component; the message names the component.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view tokenizer_config_json);

  // Token ids of `text`. With add_special_tokens, BOS/EOS are added as add_bos_token /
  // add_eos_token say. INVALID_ARGUMENT naming the byte offset when `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;

  // Encode, except that no added token (special or not) is matched over bytes that overlap one
  // of `literal_ranges`: that text is encoded as ordinary text, so "<|eot_id|>" there gives the
  // ids of "<", "|", "eot", ... rather than the control token. Everything else (normalization,
  // pre-tokenization across range boundaries, BPE) is as Encode, so with no added-token text
  // in the ranges the ids equal Encode's. The gateway passes the spans of a rendered chat that
  // came from message content (chat_template/literal_text.h). Conservative for the rare
  // normalized=true added tokens: none is matched in a piece of text (between raw added tokens)
  // that overlaps a range, since normalizing moves byte offsets. INVALID_ARGUMENT when the
  // ranges are not sorted, disjoint, non-empty and inside `text`, or as Encode.
  absl::StatusOr<std::vector<int32_t>> EncodeWithLiteralRanges(
      std::string_view text, bool add_special_tokens,
      absl::Span<const TextRange> literal_ranges) const;

  // Text of `ids` through the decoder, like HF's decode: always valid UTF-8 (invalid byte
  // sequences become U+FFFD). INVALID_ARGUMENT naming the id when an id has no token.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // Like Decode but keeps raw bytes (may end in an incomplete UTF-8 sequence): the input of the
  // incremental detokenizer.
  absl::StatusOr<std::string> DecodeBytes(absl::Span<const int32_t> ids,
                                          bool skip_special_tokens) const;

  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The text of every special added token (special=true in tokenizer.json), in file order.
  std::vector<std::string> SpecialTokenContents() const;
  // The raw bytes token `id` appends to the output text, through the decoder in bytes mode
  // (byte-level BPE: the byte alphabet reversed; SentencePiece-style: "\u2581" -> space and
  // <0xAB> -> that byte); added tokens give their content (IsSpecial tells special ones apart).
  // The decoder's removal of the leading space of a whole sequence (Metaspace, Strip) is not
  // applied: this is the token's text in the middle of a sequence. nullopt for unknown ids.
  std::optional<std::string> TokenBytes(int32_t id) const;

  std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  std::optional<int32_t> eos_token_id() const { return eos_token_id_; }
  // Ids Encode adds with add_special_tokens=true, before and after the text.
  const std::vector<int32_t>& prefix_special_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& suffix_special_ids() const { return suffix_ids_; }

 private:
  Tokenizer() = default;
  absl::Status LoadSpecialTokenConfig(const Json& tokenizer, const Json& config);
  absl::Status EncodePiece(std::string_view piece, bool at_start, bool match_normalized_tokens,
                           std::vector<int32_t>* ids) const;
  absl::StatusOr<std::string> DecodeImpl(absl::Span<const int32_t> ids, bool skip_special_tokens,
                                         DecodeMode mode) const;

  std::unique_ptr<Normalizer> normalizer_;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer_;  // may be null
  std::unique_ptr<TokenizerModel> model_;
  std::unique_ptr<Decoder> decoder_;  // may be null: tokens are joined with " " (as HF)
  AddedVocabulary added_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_token_id_;
  std::optional<int32_t> eos_token_id_;
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_TOKENIZER_H_
