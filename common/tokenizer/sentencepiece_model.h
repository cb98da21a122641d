// A SentencePiece model file (`tokenizer.model`, `tok512.model`: a serialized protobuf
// `ModelProto`, sentencepiece_model.proto) read without protobuf's runtime, and turned into the
// tokenizer.json / tokenizer_config.json text our loader reads (sentencepiece_json.h, the same
// builder as a GGUF `llama` vocabulary's).
//
// Read: pieces (piece, score, type), trainer_spec (model_type, byte_fallback,
// treat_whitespace_as_suffix, unk/bos/eos/pad ids), normalizer_spec (name, precompiled_charsmap,
// add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces, normalization_rule_tsv), with
// protobuf's defaults for absent fields. Everything else is skipped by wire type.
// Supported: BPE models (Llama 2, llama2.c's tok512) and UNIGRAM models (unigram_model.h) with the
// identity normalizer. Refused with UNIMPLEMENTED naming the field: model_type WORD/CHAR, a
// non-empty precompiled_charsmap
// or normalization_rule_tsv (e.g. nmt_nfkc), treat_whitespace_as_suffix. The input is untrusted:
// a truncated varint, a length past the end, a wrong wire type, a bad piece type, an empty or
// repeated piece, an id outside the pieces or more than kMaxSentencePieces pieces is
// INVALID_ARGUMENT naming the field; nothing is allocated beyond what the input's size allows.
//
// Thread-safe: pure functions.
#ifndef LLMSERVE_COMMON_TOKENIZER_SENTENCEPIECE_MODEL_H_
#define LLMSERVE_COMMON_TOKENIZER_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/sentencepiece_json.h"
#include "common/tokenizer/tokenizer_files.h"

namespace llmserve::common::tokenizer {

// More pieces than any real vocabulary (Gemma's is 256K); bounds the vectors' growth.
inline constexpr int64_t kMaxSentencePieces = int64_t{1} << 21;
// The largest .model file read from disk.
inline constexpr int64_t kMaxSentencePieceFileBytes = int64_t{256} << 20;

struct SentencePieceModel {
  // TrainerSpec.ModelType.
  enum class Type { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };
  SentencePieceVocabulary vocabulary;
  Type type = Type::kUnigram;
  SentencePieceNormalization normalization;  // byte_fallback is the trainer_spec's
  // -1: none.
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
};

// Parses and validates a serialized ModelProto (the header lists the errors).
absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(absl::string_view bytes);

// tokenizer.json and tokenizer_config.json (bos/eos/unk/pad tokens, add_bos_token true and
// add_eos_token false as Hugging Face's LlamaTokenizer) for a parsed model.
TokenizerFiles TokenizerFilesFromSentencePiece(const SentencePieceModel& model);

// Reads the .model file at `path` (at most kMaxSentencePieceFileBytes) and parses it; errors name
// the file. NOT_FOUND when it cannot be opened.
absl::StatusOr<SentencePieceModel> ReadSentencePieceModel(const std::string& path);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_SENTENCEPIECE_MODEL_H_
