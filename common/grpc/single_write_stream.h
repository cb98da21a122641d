// The writing half of a server-streaming call fed by a producer that must never wait for the
// client (the worker's engine thread, the gateway's worker calls): one write in flight at a time
// (gRPC's route_guide_callback_server shape), and what the producer adds meanwhile is merged into
// the next message, so a slow reader costs at most one message's worth of buffered output. The
// call ends with Finish once what was added is written, or at once when the client is gone.
//
// The reactor that owns it forwards OnWriteDone and OnCancel here, and the producer calls Add and
// FinishAfterPending. The stream starts writes and the one Finish on the reactor, never while
// holding its lock.
//
// Thread-safe.

#ifndef LLMSERVE_COMMON_GRPC_SINGLE_WRITE_STREAM_H_
#define LLMSERVE_COMMON_GRPC_SINGLE_WRITE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/status/grpc_raw_message.h"

namespace llmserve::common {

template <typename Message>
class SingleWriteStream {
 public:
  // `reactor` writes the serialized messages; it must outlive the stream's last call.
  explicit SingleWriteStream(grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor)
      : reactor_(reactor) {}

  // Runs `update` on the message to be written next (what was added since the last write
  // started), then writes it unless a write is in flight.
  template <typename Update>
  void Add(Update update) {
    {
      absl::MutexLock lock(&mutex_);
      if (finish_called_) return;
      update(pending_);
      has_pending_ = true;
    }
    Pump();
  }

  // Finishes the call with `status` once everything added is written (the first status counts).
  // `before_finish`, when set, runs right before that Finish (the call's context is still alive:
  // e.g. to add trailing metadata).
  void FinishAfterPending(grpc::Status status, std::function<void()> before_finish = nullptr) {
    {
      absl::MutexLock lock(&mutex_);
      if (finish_status_.has_value()) return;
      finish_status_ = std::move(status);
      before_finish_ = std::move(before_finish);
    }
    Pump();
  }

  // The reactor's OnWriteDone. Returns true when this write failed and the client was not known
  // to be gone before (the producer may then stop working for nobody).
  bool OnWriteDone(bool ok) {
    bool newly_gone = false;
    {
      absl::MutexLock lock(&mutex_);
      writing_ = false;
      if (!ok && !client_gone_) newly_gone = client_gone_ = true;
    }
    Pump();
    return newly_gone;
  }

  // The client is gone (the reactor's OnCancel): nothing more is written; the call finishes with
  // CANCELLED as soon as no write is in flight.
  void ClientGone() {
    {
      absl::MutexLock lock(&mutex_);
      client_gone_ = true;
    }
    Pump();
  }

  bool client_gone() const {
    absl::MutexLock lock(&mutex_);
    return client_gone_;
  }

 private:
  void Pump() {
    enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
    grpc::Status status;
    std::function<void()> before_finish;
    {
      absl::MutexLock lock(&mutex_);
      if (writing_ || finish_called_) return;
      if (client_gone_) {
        // Nobody reads any more: end at once (gRPC needs Finish even for a cancelled call).
        finish_called_ = true;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
        action = Action::kFinish;
      } else if (has_pending_) {
        in_flight_.Clear();
        in_flight_.Swap(&pending_);
        has_pending_ = false;
        writing_ = true;
        action = Action::kWrite;
      } else if (finish_status_.has_value()) {
        finish_called_ = true;
        status = *finish_status_;
        before_finish = std::move(before_finish_);
        action = Action::kFinish;
      }
    }
    if (action == Action::kWrite) {
      // Only the thread that set writing_ touches the message in flight until OnWriteDone.
      SerializeRawResponse(in_flight_, &in_flight_bytes_);
      reactor_->StartWrite(&in_flight_bytes_);
    }
    if (action == Action::kFinish) {
      if (before_finish) before_finish();
      reactor_->Finish(status);
    }
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* const reactor_;
  mutable absl::Mutex mutex_;
  Message pending_ ABSL_GUARDED_BY(mutex_);
  bool has_pending_ ABSL_GUARDED_BY(mutex_) = false;
  bool writing_ ABSL_GUARDED_BY(mutex_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mutex_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mutex_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mutex_);
  std::function<void()> before_finish_ ABSL_GUARDED_BY(mutex_);
  // Owned by the write in flight (gRPC reads the bytes until OnWriteDone).
  Message in_flight_;
  grpc::ByteBuffer in_flight_bytes_;
};

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_GRPC_SINGLE_WRITE_STREAM_H_
