#include "gateway/router/lora_adapter_call.h"

#include <utility>

#include "common/status/grpc_status.h"

namespace llmserve::gateway {

LoraAdapterCall::LoraAdapterCall(
    std::shared_ptr<grpc::Channel> channel, absl::Time deadline,
    absl::AnyInvocable<void(LoraAdapterCall*, absl::Status) &&> on_done,
    absl::AnyInvocable<void() &&> on_deleted)
    : channel_(std::move(channel)),
      stub_(worker::v1::Worker::NewStub(channel_)),
      on_done_(std::move(on_done)),
      on_deleted_(std::move(on_deleted)) {
  context_.set_deadline(absl::ToChronoTime(deadline));
}

void LoraAdapterCall::StartLoad(const worker::v1::LoadLoraAdapterRequest& request) {
  load_request_ = request;
  stub_->async()->LoadLoraAdapter(&context_, &load_request_, &load_response_,
                                  [this](grpc::Status status) { Finish(status); });
}

void LoraAdapterCall::StartUnload(const std::string& lora_name) {
  unload_request_.set_lora_name(lora_name);
  stub_->async()->UnloadLoraAdapter(&context_, &unload_request_, &unload_response_,
                                    [this](grpc::Status status) { Finish(status); });
}

void LoraAdapterCall::Finish(const grpc::Status& status) {
  std::move(on_done_)(this, common::FromGrpcStatus(status));
  absl::AnyInvocable<void()&&> on_deleted = std::move(on_deleted_);
  delete this;
  std::move(on_deleted)();
}

}  // namespace llmserve::gateway
