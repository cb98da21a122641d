// The gRPC service llmserve.worker.v1.Worker over one Engine (callback API: no thread per call,
// reactors never block). Validates requests at the edge, streams tokens, reports load, and
// drains: StartDrain refuses new calls, WaitForIdle lets running ones finish, AbortAll ends the
// rest with a clear status.
//
// Thread-safe: gRPC calls its handlers from its own threads; the drain methods may be called
// from any thread.

#ifndef LLMSERVE_WORKER_SERVICE_WORKER_SERVICE_H_
#define LLMSERVE_WORKER_SERVICE_WORKER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/thread_pool.h"
#include "common/tracing/tracer.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"
#include "worker/engine/engine.h"
#include "worker/service/generate_call.h"
#include "worker/service/load_accountant.h"
#include "worker/service/load_broadcaster.h"
#include "worker/service/request_conversion.h"
#include "worker/service/structured_output.h"
#include "worker/service/worker_metrics.h"

namespace llmserve::worker {

// Every method is registered raw (bytes in, bytes out) and parses its own request, so a request
// that does not parse gets INVALID_ARGUMENT saying so (gRPC's typed handlers would answer
// UNIMPLEMENTED with no message).
using RawWorkerService = v1::Worker::WithRawCallbackMethod_Generate<
    v1::Worker::WithRawCallbackMethod_GetModelInfo<v1::Worker::WithRawCallbackMethod_WatchLoad<
        v1::Worker::WithRawCallbackMethod_LoadLoraAdapter<
            v1::Worker::WithRawCallbackMethod_UnloadLoraAdapter<v1::Worker::Service>>>>>;

class WorkerService final : public RawWorkerService {
 public:
  // `engine` (started), `load` (fed by the engine's reports) and `metrics` (may be null) outlive
  // this. `model_info` is what GetModelInfo answers. `structured` compiles structured-output
  // constraints; when null, constrained requests are refused with FAILED_PRECONDITION
  // `structured_error`.
  WorkerService(Engine* engine, LoadAccountant* load, WorkerMetrics* metrics,
                v1::ModelInfo model_info, StructuredOutputCompiler* structured = nullptr,
                std::string structured_error = "");
  ~WorkerService() override;

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchLoad(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request) override;
  // The adapter's files are read on the service's loader thread (one load at a time, at most 16
  // waiting: RESOURCE_EXHAUSTED beyond), never on a gRPC or the engine's thread.
  grpc::ServerUnaryReactor* LoadLoraAdapter(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UnloadLoraAdapter(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) override;

  // Whether LoadLoraAdapter and UnloadLoraAdapter may change the adapters
  // (--allow_runtime_lora_updating); otherwise they answer PERMISSION_DENIED. Call before serving.
  void set_allow_runtime_lora_updating(bool allow) { allow_runtime_lora_updating_ = allow; }

  // From now on Generate answers UNAVAILABLE; load watchers see draining at once.
  void StartDrain();
  // Waits until no request is in the engine or `deadline` passes; returns how many remain.
  int WaitForIdle(absl::Time deadline);
  // Aborts every request still in the engine; each call ends with UNAVAILABLE and `message`.
  void AbortAll(const std::string& message);
  // Ends every WatchLoad stream (before the server shuts down).
  void FinishWatchers();
  // Stops reading the engine's load (after the server shut down, before the engine goes away;
  // the service itself must outlive the engine, whose last outputs it still receives).
  void StopLoadThread() { broadcaster_.Stop(); }
  // Runs the LoRA loads already accepted and takes no more (LoadLoraAdapter then answers
  // UNAVAILABLE); before the engine goes away, as StopLoadThread.
  void StopLoraLoader() { lora_loader_.Shutdown(); }
  // Requests in the engine now (Generate calls whose request has not finished, cancelled ones
  // included until the engine has released them).
  int live_requests() const;

  // Each Generate call becomes a server span of `tracer` (not owned; outlives the service), the
  // child of the gateway's attempt span when the call carries a traceparent. Call before serving.
  void set_tracer(common::tracing::Tracer* tracer) { tracer_ = tracer; }

  // TEST ONLY: from now on, a Generate request whose prompt holds `marker` (non-empty) in a row
  // crashes the process (SIGSEGV) in the handler, before any answer: a stand-in for a request
  // that kills its worker, for the gateway's query-of-death tests. Call before serving.
  void CrashOnPromptTokensForTesting(std::vector<int32_t> marker) {
    crash_marker_ = std::move(marker);
  }

 private:
  Engine* const engine_;
  WorkerMetrics* const metrics_;
  const v1::ModelInfo model_info_;
  // What every request is checked against (from model_info_).
  const RequestLimits limits_;
  StructuredOutputCompiler* const structured_;
  const std::string structured_error_;
  LoadBroadcaster broadcaster_;
  // Set before serving, read-only after (CrashOnPromptTokensForTesting).
  std::vector<int32_t> crash_marker_;
  common::tracing::Tracer* tracer_ = nullptr;
  bool allow_runtime_lora_updating_ = false;
  // Reads LoadLoraAdapter's files; its tasks finish their calls (the server waits for them when it
  // shuts down, before the service goes).
  common::ThreadPool lora_loader_{1, 16};
  // PERMISSION_DENIED without allow_runtime_lora_updating_.
  absl::Status LoraUpdatesAllowed() const;
  // LoadLoraAdapter's work, on lora_loader_: the answer goes into `response` when it succeeds.
  absl::Status LoadAndAddLoraAdapter(const v1::LoadLoraAdapterRequest& request,
                                     grpc::ByteBuffer* response);

  mutable absl::Mutex mutex_;
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
  // True when a call with `request_id` is in the engine and its client still listens.
  bool HeldByListeningCall(const std::string& request_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Calls whose request is in the engine, by the client's request id. At most one of an id's
  // calls has a client still listening: a cancelled call gives its id up at once, though the
  // engine releases its request only at its next step (engine request ids are the engine's own).
  absl::flat_hash_map<std::string, absl::InlinedVector<GenerateCall*, 1>> live_
      ABSL_GUARDED_BY(mutex_);
  int live_count_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_WORKER_SERVICE_H_
