#include "worker/service/generate_call.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status/grpc_status.h"
#include "worker/service/request_conversion.h"

namespace llmserve::worker {

GenerateCall::GenerateCall(Engine* engine, WorkerMetrics* metrics,
                           std::function<void(GenerateCall*)> on_engine_done)
    : engine_(engine), metrics_(metrics), on_engine_done_(std::move(on_engine_done)) {}

absl::Status GenerateCall::Start(EngineRequest request) {
  prompt_tokens_ = static_cast<int32_t>(request.prompt.size());
  request.on_output = [this](const EngineOutput& output) { OnEngineOutput(output); };
  {
    // The engine's reference (taken before the engine can call back), and this function's own:
    // the engine may finish the request and gRPC end the call before AddRequest returns.
    absl::MutexLock lock(&mutex_);
    refs_ += 2;
  }
  const absl::StatusOr<RequestId> id = engine_->AddRequest(std::move(request));
  bool abort_now = false;
  {
    absl::MutexLock lock(&mutex_);
    if (id.ok()) {
      engine_id_ = *id;
      abort_now = stream_.client_gone() || abort_status_.has_value();
    } else {
      --refs_;  // the engine never took it
      engine_done_ = true;
    }
  }
  if (id.ok() && abort_now) {
    // A cancel or drain that came while AddRequest ran could not name the engine request yet.
    engine_->AbortRequest(*id);
  }
  if (!id.ok()) {
    span_.SetError(absl::StatusCodeToString(id.status().code()), id.status().message());
    span_.End();
    if (metrics_ != nullptr) metrics_->OnFailed(id.status().code());
    on_engine_done_(this);
    stream_.FinishAfterPending(common::ToGrpcStatus(id.status()));
  }
  Unref();
  return id.ok() ? absl::OkStatus() : id.status();
}

void GenerateCall::Abort(const grpc::Status& status) {
  RequestId id = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (engine_done_ || abort_status_.has_value()) return;
    abort_status_ = status;
    id = engine_id_;
  }
  if (id != 0) engine_->AbortRequest(id);
}

bool GenerateCall::client_gone() const { return stream_.client_gone(); }

void GenerateCall::OnCancel() {
  stream_.ClientGone();
  AbortInEngine();
}

void GenerateCall::AbortInEngine() {
  RequestId id = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (!engine_done_) id = engine_id_;
  }
  if (id != 0) engine_->AbortRequest(id);
}

void GenerateCall::OnEngineOutput(const EngineOutput& output) {
  const absl::Time now = absl::Now();
  const int num_tokens = static_cast<int>(output.tokens.size());
  if (metrics_ != nullptr && num_tokens > 0) {
    if (generated_tokens_ == 0) {
      metrics_->OnFirstToken(absl::ToDoubleSeconds(now - arrival_));
      if (num_tokens > 1) metrics_->OnInterToken(num_tokens - 1, 0);
    } else {
      metrics_->OnInterToken(num_tokens, absl::ToDoubleSeconds(now - last_token_time_));
    }
  }
  generated_tokens_ += num_tokens;
  if (num_tokens > 0) last_token_time_ = now;

  const bool last = output.finish != FinishReason::kNone;
  std::optional<grpc::Status> finish;
  std::optional<EngineOutput> final_output;
  if (last) {
    absl::MutexLock lock(&mutex_);
    engine_done_ = true;
    if (output.finish == FinishReason::kError) {
      finish = common::ToGrpcStatus(output.error.ok() ? absl::InternalError("the engine failed")
                                                      : output.error);
    } else if (output.finish == FinishReason::kAbort && abort_status_.has_value()) {
      finish = *abort_status_;
    } else if (output.finish == FinishReason::kAbort && !stream_.client_gone()) {
      // Only the engine shutting down aborts a request nobody asked to abort.
      finish = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "the worker stopped before the request finished");
    } else {
      final_output = output;
      if (output.finish == FinishReason::kAbort) {
        final_output->prompt_tokens = prompt_tokens_;
        final_output->output_tokens = generated_tokens_;
      }
      finish = grpc::Status::OK;
    }
  }
  // Counted before the last message is handed to the stream, which may deliver it at once on
  // another thread: a client that saw its request end finds it in /metrics (dns_scaling_test read
  // a success counter that had not moved yet).
  if (last && metrics_ != nullptr) {
    if (output.finish == FinishReason::kError) {
      metrics_->OnFailed(output.error.ok() ? absl::StatusCode::kInternal : output.error.code());
    } else {
      metrics_->OnFinished(output, prompt_tokens_, generated_tokens_);
    }
  }
  if (num_tokens > 0 || final_output.has_value()) {
    stream_.Add([&](v1::GenerateResponse& message) {
      if (num_tokens > 0) AppendTokens(output, &message);
      if (final_output.has_value()) SetFinal(*final_output, &message);
    });
  }
  if (finish.has_value()) stream_.FinishAfterPending(*std::move(finish));
  if (last) EndSpan(output);
  if (last) {
    on_engine_done_(this);
    Unref();
  }
}

void GenerateCall::EndSpan(const EngineOutput& output) {
  if (!span_.recording()) return;
  const absl::Time end = absl::Now();
  span_.SetAttribute("gen_ai.usage.input_tokens", int64_t{prompt_tokens_});
  span_.SetAttribute("gen_ai.usage.output_tokens", int64_t{generated_tokens_});
  if (output.finish == FinishReason::kError) {
    const absl::Status error =
        output.error.ok() ? absl::InternalError("the engine failed") : output.error;
    span_.SetError(absl::StatusCodeToString(error.code()), error.message());
    return span_.End(end);
  }
  if (output.finish == FinishReason::kAbort) {
    std::optional<grpc::Status> abort_status;
    {
      absl::MutexLock lock(&mutex_);
      abort_status = abort_status_;
    }
    // The client's cancel (the gateway stopping at a stop string, or a client that left) is not
    // this worker's error; a drain or a shutdown is.
    span_.SetAttribute("llmserve.aborted", true);
    if (abort_status.has_value()) {
      span_.SetError("UNAVAILABLE", abort_status->error_message());
    }
    return span_.End(end);
  }
  span_.SetAttribute(
      "gen_ai.response.finish_reasons",
      std::vector<std::string>{output.finish == FinishReason::kStop ? "stop" : "length"});
  span_.SetAttribute("llmserve.usage.cached_prompt_tokens", int64_t{output.cached_prompt_tokens});
  // Where the time went: waiting for the scheduler, the prefill, then decoding.
  span_.SetAttribute("llmserve.queue_time_s", output.queue_s);
  span_.SetAttribute("llmserve.time_to_first_token_s", output.ttft_s);
  span_.SetAttribute("llmserve.prefill_time_s", std::max(0.0, output.ttft_s - output.queue_s));
  span_.SetAttribute("llmserve.decode_time_s", std::max(0.0, output.total_s - output.ttft_s));
  span_.SetAttribute("llmserve.preemptions", int64_t{output.preemptions});
  span_.AddEvent("scheduled", arrival_ + absl::Seconds(output.queue_s));
  if (generated_tokens_ > 0) span_.AddEvent("first_token", arrival_ + absl::Seconds(output.ttft_s));
  span_.End(end);
}

void GenerateCall::OnWriteDone(bool ok) {
  // The stream broke (client gone): stop the request rather than compute for nobody.
  if (stream_.OnWriteDone(ok)) AbortInEngine();
}

void GenerateCall::OnDone() { Unref(); }

void GenerateCall::Unref() {
  bool last = false;
  {
    absl::MutexLock lock(&mutex_);
    last = --refs_ == 0;
  }
  if (last) delete this;
}

}  // namespace llmserve::worker
