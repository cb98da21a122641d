// WorkerPool's WorkerCall: one streaming Generate call to a worker on gRPC's callback API (no
// thread per call), watched by the pool for silence (watched_call.h) from Start until it is done.
//
// Thread-safe as WorkerCall says.

#ifndef LLMSERVE_GATEWAY_ROUTER_GRPC_WORKER_CALL_H_
#define LLMSERVE_GATEWAY_ROUTER_GRPC_WORKER_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/router/watched_call.h"
#include "gateway/router/worker_client.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"

namespace llmserve::gateway {

class WorkerPool;

class GrpcWorkerCall final : public WorkerCall,
                             public WatchedCall,
                             public grpc::ClientReadReactor<worker::v1::GenerateResponse> {
 public:
  GrpcWorkerCall(WorkerPool* pool, std::string address, std::shared_ptr<grpc::Channel> channel,
                 worker::v1::GenerateRequest request, const WorkerCallOptions& options,
                 std::shared_ptr<WorkerCallObserver> observer);

  void Start() override;
  void Cancel() override { context_.TryCancel(); }
  // The pool's watchdog: the worker fell silent.
  void Abort(const absl::Status& reason) override;

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  WorkerPool* const pool_;
  const std::string address_;
  const worker::v1::GenerateRequest request_;
  const std::shared_ptr<WorkerCallObserver> observer_;
  std::unique_ptr<worker::v1::Worker::Stub> stub_;
  grpc::ClientContext context_;
  worker::v1::GenerateResponse response_;
  absl::Mutex abort_mutex_;
  absl::Status abort_reason_ ABSL_GUARDED_BY(abort_mutex_);
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_GRPC_WORKER_CALL_H_
