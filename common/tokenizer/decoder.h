// HF decoders (tokenizers/src/decoders): ByteLevel, ByteFallback, Fuse, Replace, Strip,
// Metaspace and Sequence. A decoder turns the token strings of a sequence into text.
//
// Two modes. kText is HF's decode: invalid byte runs become U+FFFD the way HF does it.
// kBytes keeps raw bytes (ByteLevel and ByteFallback bytes pass through unchecked) so that
// the incremental detokenizer can see an incomplete UTF-8 sequence and wait for its end.
//
// Immutable after construction; Decode is const and thread-safe.
#ifndef LLMSERVE_COMMON_TOKENIZER_DECODER_H_
#define LLMSERVE_COMMON_TOKENIZER_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_util.h"

namespace llmserve::common::tokenizer {

enum class DecodeMode { kText, kBytes };

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF decode_chain: rewrites the token list (steps such as Fuse shrink it).
  virtual void DecodeChain(std::vector<std::string>* tokens, DecodeMode mode) const = 0;
};

// Builds the decoder described by a tokenizer.json "decoder" object. Returns nullptr for JSON
// null; INVALID_ARGUMENT naming the type for unsupported types (e.g. "WordPiece", "CTC",
// "BPEDecoder") or malformed fields.
absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const Json& json);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_DECODER_H_
