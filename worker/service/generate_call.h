// One Worker.Generate call: a gRPC server-streaming reactor fed by the engine thread.
//
// The engine pushes outputs through a callback that only appends to this call's stream
// (common/grpc/single_write_stream.h), which starts a write when none is in flight, so the engine
// never waits for a client. A slow reader makes the buffer grow by at most its request's
// max_tokens tokens: outputs that arrive while a write is in flight are merged into the next
// message.
//
// Lifetime: two references, one held by gRPC (dropped in OnDone) and one by the engine (dropped
// with the request's last output); the object deletes itself when both are gone.
//
// Thread-safe: gRPC reactions, the engine callback and the service's drain calls may come from
// any thread; state is guarded by one mutex, never held while calling into gRPC or the engine.

#ifndef LLMSERVE_WORKER_SERVICE_GENERATE_CALL_H_
#define LLMSERVE_WORKER_SERVICE_GENERATE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc/single_write_stream.h"
#include "common/tracing/span.h"
#include "llmserve/worker/v1/worker.pb.h"
#include "worker/engine/engine.h"
#include "worker/service/worker_metrics.h"

namespace llmserve::worker {

// Writes raw bytes: the service takes and parses its requests itself (worker_service.h).
class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // `on_engine_done` runs once, with this call, when the engine is done with the request or when
  // Start fails (the service forgets the call there; Abort must not be called after it).
  // `metrics` may be null.
  GenerateCall(Engine* engine, WorkerMetrics* metrics,
               std::function<void(GenerateCall*)> on_engine_done);

  // The request's server span (tracing): ended with the request, with its usage and timing.
  // Call before Start.
  void set_span(common::tracing::Span span) { span_ = std::move(span); }

  // Hands the request to the engine. On failure (overload, a request that can never fit) the
  // call finishes with that status, which is returned. The call may be gone when this returns.
  absl::Status Start(EngineRequest request);

  // Ends the call with `status` (UNAVAILABLE while draining): aborts the request in the engine;
  // tokens already produced are still written first.
  void Abort(const grpc::Status& status);

  // The client is gone (cancelled, past its deadline, or a write failed): nothing more is
  // written, and the request is being aborted in the engine.
  bool client_gone() const;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~GenerateCall() override = default;

  // Engine thread.
  void OnEngineOutput(const EngineOutput& output);
  // Engine thread: the span's closing attributes, from the request's last output.
  void EndSpan(const EngineOutput& output);
  // Aborts the engine's request unless it is done (the client is gone).
  void AbortInEngine();
  void Unref();

  Engine* const engine_;
  WorkerMetrics* const metrics_;
  std::function<void(GenerateCall*)> on_engine_done_;
  const absl::Time arrival_ = absl::Now();

  // The responses, one write in flight; the client's departure (cancel, deadline, a failed
  // write) is known there.
  common::SingleWriteStream<v1::GenerateResponse> stream_{this};
  // Guards the engine's side; taken before the stream's lock, never after.
  mutable absl::Mutex mutex_;
  int refs_ ABSL_GUARDED_BY(mutex_) = 1;  // gRPC's, until OnDone
  RequestId engine_id_ ABSL_GUARDED_BY(mutex_) = 0;
  bool engine_done_ ABSL_GUARDED_BY(mutex_) = false;
  // Why the service aborted the request (drain), reported instead of the engine's abort.
  std::optional<grpc::Status> abort_status_ ABSL_GUARDED_BY(mutex_);
  // Engine-thread bookkeeping for metrics and usage of aborted requests.
  int32_t prompt_tokens_ = 0;
  int32_t generated_tokens_ = 0;
  absl::Time last_token_time_ = absl::InfinitePast();
  common::tracing::Span span_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SERVICE_GENERATE_CALL_H_
