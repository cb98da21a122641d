// One LoadLoraAdapter or UnloadLoraAdapter call to a worker on gRPC's callback API. It deletes
// itself when the call ended: `on_done` gets it and the worker's answer first, `on_deleted` runs
// after its ClientContext is gone (so that an owner waiting for its calls may be destroyed then, as
// WorkerPool does for its streams and probes).

#ifndef LLMSERVE_GATEWAY_ROUTER_LORA_ADAPTER_CALL_H_
#define LLMSERVE_GATEWAY_ROUTER_LORA_ADAPTER_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"

namespace llmserve::gateway {

class LoraAdapterCall {
 public:
  LoraAdapterCall(std::shared_ptr<grpc::Channel> channel, absl::Time deadline,
                  absl::AnyInvocable<void(LoraAdapterCall*, absl::Status) &&> on_done,
                  absl::AnyInvocable<void() &&> on_deleted);
  LoraAdapterCall(const LoraAdapterCall&) = delete;
  LoraAdapterCall& operator=(const LoraAdapterCall&) = delete;

  void StartLoad(const worker::v1::LoadLoraAdapterRequest& request);
  void StartUnload(const std::string& lora_name);
  // Ends the call soon (on_done then gets CANCELLED unless it had answered).
  void Cancel() { context_.TryCancel(); }

 private:
  ~LoraAdapterCall() = default;
  void Finish(const grpc::Status& status);

  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<worker::v1::Worker::Stub> stub_;
  absl::AnyInvocable<void(LoraAdapterCall*, absl::Status) &&> on_done_;
  absl::AnyInvocable<void() &&> on_deleted_;
  grpc::ClientContext context_;
  worker::v1::LoadLoraAdapterRequest load_request_;
  worker::v1::LoadLoraAdapterResponse load_response_;
  worker::v1::UnloadLoraAdapterRequest unload_request_;
  worker::v1::UnloadLoraAdapterResponse unload_response_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_LORA_ADAPTER_CALL_H_
