#include "gateway/router/grpc_worker_call.h"

#include <utility>

#include "common/status/grpc_status.h"
#include "gateway/router/worker_call_failure.h"
#include "gateway/router/worker_pool.h"

namespace llmserve::gateway {

GrpcWorkerCall::GrpcWorkerCall(WorkerPool* pool, std::string address,
                               std::shared_ptr<grpc::Channel> channel,
                               worker::v1::GenerateRequest request,
                               const WorkerCallOptions& options,
                               std::shared_ptr<WorkerCallObserver> observer)
    : WatchedCall(pool->clock()),
      pool_(pool),
      address_(std::move(address)),
      request_(std::move(request)),
      observer_(std::move(observer)),
      stub_(worker::v1::Worker::NewStub(channel)) {
  if (options.deadline != absl::InfiniteFuture()) {
    context_.set_deadline(absl::ToChronoTime(options.deadline));
  }
  if (!options.traceparent.empty()) context_.AddMetadata("traceparent", options.traceparent);
  if (!options.tracestate.empty()) context_.AddMetadata("tracestate", options.tracestate);
}

void GrpcWorkerCall::Start() {
  Touch();
  pool_->Watch(address_, this);
  stub_->async()->Generate(&context_, &request_, this);
  StartRead(&response_);
  StartCall();
}

void GrpcWorkerCall::Abort(const absl::Status& reason) {
  {
    absl::MutexLock lock(&abort_mutex_);
    abort_reason_ = reason;
  }
  context_.TryCancel();
}

void GrpcWorkerCall::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  Touch();
  observer_->OnMessage(response_);
  StartRead(&response_);
}

void GrpcWorkerCall::OnDone(const grpc::Status& status) {
  // No abort can reach this call once it is unwatched.
  pool_->Unwatch(this);
  absl::Status aborted;
  {
    absl::MutexLock lock(&abort_mutex_);
    aborted = abort_reason_;
  }
  absl::Status result = aborted.ok() ? common::FromGrpcStatus(status) : aborted;
  // The pool's own aborts (a silent worker) are not lost connections; the rule is
  // worker_call_failure.h's.
  if (aborted.ok() && status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      IsBrokenConnectionMessage(status.error_message())) {
    result = WorkerConnectionLost(address_, status.error_message());
  }
  observer_->OnDone(result);
  delete this;
}

}  // namespace llmserve::gateway
