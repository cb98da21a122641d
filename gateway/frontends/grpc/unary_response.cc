#include "gateway/frontends/grpc/unary_response.h"

#include <utility>

namespace llmserve::gateway {
namespace {

// GenerateResponse.tokens: field 3, length-delimited.
constexpr char kTokensTag = (3 << 3) | 2;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// A slice that owns `bytes` (no copy): gRPC frees it once the message is sent.
grpc::Slice OwningSlice(std::unique_ptr<std::string> bytes) {
  std::string* raw = bytes.release();
  return grpc::Slice(
      raw->data(), raw->size(), [](void* owner) { delete static_cast<std::string*>(owner); }, raw);
}

}  // namespace

UnaryResponse::UnaryResponse() : tokens_(std::make_unique<std::string>()) {}

void UnaryResponse::AppendToken(const ::llmserve::v1::GeneratedToken& token) {
  tokens_->push_back(kTokensTag);
  AppendVarint(token.ByteSizeLong(), tokens_.get());
  token.AppendToString(tokens_.get());
}

grpc::ByteBuffer UnaryResponse::Build(::llmserve::v1::GenerateResponse rest) {
  // Fields 1 (request_id) and 2 (text), then 3 (tokens), then the rest: the order protobuf
  // serializes a message in, so the bytes are those of the whole message serialized at once.
  ::llmserve::v1::GenerateResponse head;
  head.set_request_id(rest.request_id());
  rest.clear_request_id();
  head.set_text(std::move(text_));
  auto head_bytes = std::make_unique<std::string>(head.SerializeAsString());
  head.Clear();
  auto tail_bytes = std::make_unique<std::string>(rest.SerializeAsString());
  grpc::Slice slices[] = {OwningSlice(std::move(head_bytes)), OwningSlice(std::move(tokens_)),
                          OwningSlice(std::move(tail_bytes))};
  return grpc::ByteBuffer(slices, 3);
}

}  // namespace llmserve::gateway
