// Turns a stream of generated token ids into text deltas that are always complete UTF-8, the
// TGI/vLLM way: keep all ids and two offsets; decode ids[prefix:] and ids[prefix:read] (as raw
// bytes) and emit the difference once it does not end in an incomplete UTF-8 sequence. A split
// byte-fallback character (<0xE2> <0x82> <0xAC>) therefore yields nothing until its last byte.
// Decoding a window rather than single tokens keeps decoders such as Metaspace/Strip (which
// treat the first token specially) consistent with a full decode.
//
// Not thread-safe: one instance per request stream. The Tokenizer must outlive it.
#ifndef LLMSERVE_COMMON_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
#define LLMSERVE_COMMON_TOKENIZER_INCREMENTAL_DETOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/tokenizer.h"

namespace llmserve::common::tokenizer {

class IncrementalDetokenizer {
 public:
  // The context: how many trailing prompt ids seed the first window, so that a first generated
  // SentencePiece token "▁world" yields " world" rather than "world".
  static constexpr size_t kPromptContext = 5;

  // `prompt_ids` (may be empty) are context only: their text is never emitted.
  IncrementalDetokenizer(const Tokenizer* tokenizer, absl::Span<const int32_t> prompt_ids,
                         bool skip_special_tokens);

  // Appends `id` and returns the new complete text ("" while a character is incomplete).
  // INVALID_ARGUMENT for an id without a token (the id is not kept).
  absl::StatusOr<std::string> Step(int32_t id);

  // Returns whatever is held back (an incomplete sequence becomes U+FFFD) and marks it emitted.
  absl::StatusOr<std::string> Flush();

  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
