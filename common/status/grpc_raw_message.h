// Protobuf messages received and sent as raw bytes by gRPC services registered with raw callback
// methods. gRPC C++'s typed callback handlers answer a request that does not parse (garbage
// bytes, a string field that is not UTF-8, groups nested past the parser's limit) with
// UNIMPLEMENTED and no message, which tells a client nothing; a service that takes the bytes and
// parses them itself answers INVALID_ARGUMENT saying what could not be parsed.
//
// Thread-safe: stateless functions.

#ifndef LLMSERVE_COMMON_STATUS_GRPC_RAW_MESSAGE_H_
#define LLMSERVE_COMMON_STATUS_GRPC_RAW_MESSAGE_H_

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmserve::common {

// Parses `bytes` into `message`; INVALID_ARGUMENT naming the message type when they do not parse.
template <typename Message>
absl::Status ParseRawRequest(const grpc::ByteBuffer& bytes, Message* message) {
  grpc::ByteBuffer copy(bytes);  // shares the slices; Deserialize consumes its buffer
  const grpc::Status status = grpc::SerializationTraits<Message>::Deserialize(&copy, message);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the request could not be parsed as ", Message::descriptor()->full_name(),
                   " (malformed protobuf, or a string field that is not valid UTF-8)"));
}

// `message` as the bytes a raw method writes.
template <typename Message>
void SerializeRawResponse(const Message& message, grpc::ByteBuffer* bytes) {
  bytes->Clear();  // gRPC serializes only into an empty buffer; writers reuse theirs
  bool own_buffer = false;
  // Serializing a well-formed message into memory cannot fail short of running out of it.
  (void)grpc::SerializationTraits<Message>::Serialize(message, bytes, &own_buffer);
}

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_STATUS_GRPC_RAW_MESSAGE_H_
