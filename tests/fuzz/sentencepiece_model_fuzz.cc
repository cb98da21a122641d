// Fuzz target: ParseSentencePieceModel on arbitrary bytes (a hand-read protobuf ModelProto). It
// must return a status, never crash or allocate beyond the input's size; a model that parses must
// become a tokenizer that encodes and decodes a short text.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "common/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace llmserve::common::tokenizer;  // NOLINT: a fuzz target's one function
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  auto model = ParseSentencePieceModel(input);
  if (!model.ok()) return 0;
  const TokenizerFiles files = TokenizerFilesFromSentencePiece(*model);
  auto tok = Tokenizer::FromJson(files.tokenizer_json, files.tokenizer_config_json);
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode("Hello  wörld 123 <s> ½\n", true);
  if (ids.ok()) (void)(*tok)->Decode(*ids, false);
  return 0;
}
