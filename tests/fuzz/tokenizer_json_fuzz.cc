// Fuzz target: Tokenizer::FromJson on arbitrary bytes. Loading must return a status, never throw
// or crash; a tokenizer that loads must encode and decode a short text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using llmserve::common::tokenizer::Tokenizer;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto tok = Tokenizer::FromJson(input, "");
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode("Hello wörld 123 <s> ½\n", true);
  if (ids.ok()) (void)(*tok)->Decode(*ids, false);
  return 0;
}
