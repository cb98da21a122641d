// Fuzz target: a fixed small byte-level tokenizer and a SentencePiece-style one. The input bytes
// are encoded as text (invalid UTF-8 must be an error, never a crash), and reinterpreted as
// little-endian token ids for Decode and the incremental detokenizer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/utf8/utf8.h"
#include "tests/unit/common/tokenizer/test_tokenizers.h"

namespace {

using llmserve::common::tokenizer::IncrementalDetokenizer;
using llmserve::common::tokenizer::Tokenizer;

const std::vector<std::unique_ptr<Tokenizer>>& Tokenizers() {
  static auto* tokenizers = [] {
    auto* list = new std::vector<std::unique_ptr<Tokenizer>>();
    namespace t = llmserve::common::tokenizer::testing;
    list->push_back(*Tokenizer::FromJson(t::ByteLevelTokenizerJson(), ""));
    list->push_back(*Tokenizer::FromJson(t::SpmTokenizerJson(), t::kSpmConfigJson));
    return list;
  }();
  return *tokenizers;
}

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = llmserve::common::utf8::IsValid(text);
  for (const auto& tok : Tokenizers()) {
    auto ids = tok->Encode(text, false);
    Check(ids.ok() == valid);
    if (ids.ok()) {
      auto decoded = tok->Decode(*ids, false);
      Check(decoded.ok() && llmserve::common::utf8::IsValid(*decoded));
    }
    std::vector<int32_t> raw_ids;
    for (size_t i = 0; i + 2 <= size; i += 2) {
      uint16_t id = 0;
      std::memcpy(&id, data + i, 2);
      raw_ids.push_back(id % (tok->vocab_size() + 8));  // a few out-of-range ids too
    }
    auto decoded = tok->Decode(raw_ids, (size & 1) != 0);
    if (decoded.ok()) Check(llmserve::common::utf8::IsValid(*decoded));
    IncrementalDetokenizer detok(tok.get(), {}, false);
    for (const int32_t id : raw_ids) {
      auto delta = detok.Step(id);
      if (delta.ok()) Check(llmserve::common::utf8::IsValid(*delta));
    }
    Check(detok.Flush().ok());
  }
  return 0;
}
