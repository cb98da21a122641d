// A SentencePiece vocabulary (pieces, scores, piece types) as tokenizer.json: a BPE one the way
// Hugging Face's LlamaConverter writes it (convert_slow_tokenizer.py), a Unigram one as a "Unigram"
// model with the pieces' scores (SentencePiece's unigram encoder is that model's Viterbi over the
// whole normalized text, which a null pre-tokenizer gives). Shared by the GGUF tokenizer
// (worker/model/gguf_tokenizer.h, `tokenizer.ggml.*` of a `llama` vocabulary) and the
// SentencePiece .model loader (sentencepiece_model.h), so that both give the same tokenizer.
//
// - Merges are derived from the scores as SentencePieceExtractor does: for every piece, in id
//   order, each split into two pieces that are both in the vocabulary (split at characters, in
//   order of the halves' ids), then all of them stably sorted by the piece's score, highest
//   first. SentencePiece's BPE merges the adjacent pair whose union scores highest, which is
//   what this order makes HF's rank-based BPE do.
// - The normalizer follows the NormalizerSpec flags: remove_extra_whitespaces drops leading and
//   trailing spaces and collapses runs of spaces (only U+0020, as SentencePiece's identity rule),
//   add_dummy_prefix prepends U+2581, escape_whitespaces turns spaces into U+2581. The decoder
//   undoes the escape, fuses <0xAB> byte tokens and strips the dummy prefix's space.
// - Piece types use SentencePiece's numbering, which llama.cpp's token types copy: 1 normal,
//   2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. Unknown, control and user-defined
//   pieces become added tokens (special except user-defined).
//
// Thread-safe: pure functions.
#ifndef LLMSERVE_COMMON_TOKENIZER_SENTENCEPIECE_JSON_H_
#define LLMSERVE_COMMON_TOKENIZER_SENTENCEPIECE_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/json_util.h"

namespace llmserve::common::tokenizer {

// SentencePiece's piece types (sentencepiece_model.proto, ModelProto.SentencePiece.Type).
enum SentencePieceType : int32_t {
  kPieceNormal = 1,
  kPieceUnknown = 2,
  kPieceControl = 3,
  kPieceUserDefined = 4,
  kPieceUnused = 5,
  kPieceByte = 6,
};

struct SentencePieceVocabulary {
  std::vector<std::string> pieces;
  std::vector<float> scores;   // one per piece
  std::vector<int64_t> types;  // one per piece (SentencePieceType)
};

struct SentencePieceNormalization {
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = false;
  bool escape_whitespaces = true;
  bool byte_fallback = true;
};

// tokenizer.json for `vocabulary`, whose sizes the caller has checked. `unk_token` may be empty.
Json SentencePieceBpeTokenizerJson(const SentencePieceVocabulary& vocabulary,
                                   const std::string& unk_token,
                                   const SentencePieceNormalization& normalization);

// tokenizer.json for a unigram `vocabulary`: the same normalizer, decoder and added tokens as the
// BPE one, and a "Unigram" model of [piece, score] pairs. `unk_id` -1 for none.
Json SentencePieceUnigramTokenizerJson(const SentencePieceVocabulary& vocabulary, int32_t unk_id,
                                       const SentencePieceNormalization& normalization);

// The "vocab" object (piece -> id; a repeated piece keeps its last id, as Python's dict).
Json VocabJson(const std::vector<std::string>& pieces);

// The "added_tokens" array: pieces of type unknown, control and user-defined.
Json AddedTokensJson(const std::vector<std::string>& pieces, const std::vector<int64_t>& types);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_SENTENCEPIECE_JSON_H_
