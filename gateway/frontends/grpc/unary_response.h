// The bytes of a Generate (unary) response, collected while the generation runs. Each token is
// serialized as it arrives (a few bytes: its id, logprob and alternatives with their texts)
// rather than kept as a GeneratedToken message until the end: with logprobs a message object per
// alternative held about 100 bytes an entry, against the 10 to 15 it serializes to (issue 28).
// The response is the same message, its fields in field-number order as protobuf writes them.
//
// Thread-compatible.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_GRPC_UNARY_RESPONSE_H_
#define LLMSERVE_GATEWAY_FRONTENDS_GRPC_UNARY_RESPONSE_H_

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway {

class UnaryResponse {
 public:
  UnaryResponse();

  void AppendText(absl::string_view text) { text_.append(text.data(), text.size()); }
  void AppendToken(const ::llmserve::v1::GeneratedToken& token);

  // The response: `rest`'s fields (request id, model, finish reason, usage, ...; its text and
  // tokens must be empty) with the text and tokens appended so far, which are handed over
  // without a copy. Once only.
  grpc::ByteBuffer Build(::llmserve::v1::GenerateResponse rest);

 private:
  std::string text_;
  // The serialized `tokens` fields (tag, length, message each), owned by a slice once built.
  std::unique_ptr<std::string> tokens_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_FRONTENDS_GRPC_UNARY_RESPONSE_H_
