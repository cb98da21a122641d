// Sends bytes as they are to a gRPC method, as one request message, for tests of what a server
// does with input its own stubs could never produce (malformed protobuf).

#ifndef LLMSERVE_TESTS_TESTING_RAW_GRPC_CALL_H_
#define LLMSERVE_TESTS_TESTING_RAW_GRPC_CALL_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace llmserve::testing {

// Calls `method` ("/package.Service/Method") with `bytes` as its request, as a unary call (a
// server-streaming method refusing the request ends it the same way); returns the status and, in
// `*response` when given, the response bytes.
inline grpc::Status RawGrpcCall(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& method, const std::string& bytes,
                                std::string* response = nullptr) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  if (response != nullptr && status.ok()) {
    std::vector<grpc::Slice> slices;
    if (!reply.Dump(&slices).ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "the response could not be read");
    }
    response->clear();
    for (const grpc::Slice& s : slices) {
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_RAW_GRPC_CALL_H_
