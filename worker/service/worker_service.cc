#include "worker/service/worker_service.h"

#include <algorithm>
#include <csignal>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/status/grpc_raw_message.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "worker/service/request_conversion.h"

namespace llmserve::worker {
namespace {

constexpr uint32_t kDefaultWatchIntervalMs = 500;
constexpr uint32_t kMaxWatchIntervalMs = 60000;

// A call refused before it started: finishes at once with `status`.
class RefusedCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedCall(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

namespace {

RequestLimits LimitsOf(const v1::ModelInfo& info) {
  RequestLimits limits{.vocab_size = static_cast<int64_t>(info.vocab_size()),
                       .max_model_len = static_cast<int32_t>(info.max_model_len())};
  if (info.task() == "embed") {
    EmbeddingTask task{.method = ParsePoolingMethod(info.pooling()).value_or(PoolingMethod::kLast),
                       .normalize = info.normalize_embeddings(),
                       .size = info.embedding_size(),
                       .matryoshka = info.matryoshka()};
    task.matryoshka_dimensions.assign(info.matryoshka_dimensions().begin(),
                                      info.matryoshka_dimensions().end());
    limits.embedding = std::move(task);
  }
  return limits;
}

}  // namespace

WorkerService::WorkerService(Engine* engine, LoadAccountant* load, WorkerMetrics* metrics,
                             v1::ModelInfo model_info, StructuredOutputCompiler* structured,
                             std::string structured_error)
    : engine_(engine),
      metrics_(metrics),
      model_info_(std::move(model_info)),
      limits_(LimitsOf(model_info_)),
      structured_(structured),
      structured_error_(std::move(structured_error)),
      broadcaster_(load, engine, model_info_.prefix_caching()) {}

WorkerService::~WorkerService() = default;

namespace {

std::string MetadataOf(const grpc::CallbackServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  // The request's server span, in the trace of the gateway's attempt when it sent one.
  common::tracing::Span span;
  if (tracer_ != nullptr) {
    span = tracer_->StartSpan(
        absl::StrCat(limits_.embedding.has_value() ? "embeddings " : "text_completion ",
                     model_info_.model_name()),
        common::tracing::SpanKind::kServer,
        common::tracing::ParseTraceParent(MetadataOf(*context, "traceparent"),
                                          MetadataOf(*context, "tracestate")));
    span.SetAttribute("gen_ai.operation.name", std::string("text_completion"));
    span.SetAttribute("gen_ai.provider.name", std::string("llmserve"));
    span.SetAttribute("gen_ai.request.model", model_info_.model_name());
  }
  auto refuse = [this, &span](const absl::Status& status) {
    if (metrics_ != nullptr) metrics_->OnFailed(status.code());
    span.SetError(absl::StatusCodeToString(status.code()), status.message());
    span.End();
    return new RefusedCall(common::ToGrpcStatus(status));
  };
  v1::GenerateRequest parsed;
  if (absl::Status status = common::ParseRawRequest(*bytes, &parsed); !status.ok()) {
    return refuse(status);
  }
  const v1::GenerateRequest* request = &parsed;
  if (span.recording()) {
    span.SetAttribute("llmserve.request_id", request->request_id());
    span.SetAttribute("gen_ai.request.max_tokens", int64_t{request->max_tokens()});
  }
  if (!crash_marker_.empty() &&
      std::search(request->prompt_token_ids().begin(), request->prompt_token_ids().end(),
                  crash_marker_.begin(),
                  crash_marker_.end()) != request->prompt_token_ids().end()) {
    LLMSERVE_LOG(ERROR) << "request " << request->request_id()
                        << ": crashing on purpose (--test_only_crash_on_prompt_tokens)";
    // The default action, not the sanitizers' handler: under ASan a raised SIGSEGV is a report,
    // and every report fails `make test-sanitize`, while this crash is what the test wants.
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (const absl::Status id = ValidateRequestId(request->request_id()); !id.ok()) {
    return refuse(id);
  }
  absl::StatusOr<EngineRequest> engine_request = ToEngineRequest(*request, limits_);
  if (!engine_request.ok()) return refuse(engine_request.status());
  if (request->has_structured_output()) {
    if (structured_ == nullptr) {
      return refuse(absl::FailedPreconditionError(structured_error_.empty()
                                                      ? "structured outputs are off on this worker"
                                                      : structured_error_));
    }
    absl::StatusOr<std::shared_ptr<const structured::CompiledGrammar>> grammar =
        structured_->Compile(request->structured_output());
    if (!grammar.ok()) return refuse(grammar.status());
    engine_request->grammar = *std::move(grammar);
  }

  const std::string request_id = request->request_id();
  GenerateCall* call = nullptr;
  absl::Status refused;
  {
    absl::MutexLock lock(&mutex_);
    if (draining_) {
      refused = absl::UnavailableError(
          "the worker is draining (shutting down) and accepts no new requests; retry on another "
          "worker");
    } else if (HeldByListeningCall(request_id)) {
      refused = absl::AlreadyExistsError(
          absl::StrCat("request_id \"", request_id, "\" is already running on this worker"));
    } else {
      call = new GenerateCall(engine_, metrics_, [this, request_id](GenerateCall* done) {
        absl::MutexLock lock(&mutex_);
        const auto it = live_.find(request_id);
        if (it == live_.end()) return;
        absl::InlinedVector<GenerateCall*, 1>& calls = it->second;
        const auto found = std::find(calls.begin(), calls.end(), done);
        if (found == calls.end()) return;
        calls.erase(found);
        --live_count_;
        if (calls.empty()) live_.erase(it);
      });
      live_[request_id].push_back(call);
      ++live_count_;
    }
  }
  if (call == nullptr) return refuse(refused);
  call->set_span(std::move(span));
  // On failure the call has finished itself with the status (and left live_).
  (void)call->Start(*std::move(engine_request));
  return call;
}

grpc::ServerUnaryReactor* WorkerService::GetModelInfo(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* bytes,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetModelInfoRequest request;
  if (absl::Status status = common::ParseRawRequest(*bytes, &request); !status.ok()) {
    reactor->Finish(common::ToGrpcStatus(status));
    return reactor;
  }
  v1::ModelInfo info = model_info_;
  for (const std::string& name : engine_->LoraAdapters()) info.add_lora_adapters(name);
  common::SerializeRawResponse(info, response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

absl::Status WorkerService::LoraUpdatesAllowed() const {
  if (allow_runtime_lora_updating_) return absl::OkStatus();
  return absl::PermissionDeniedError(
      "this worker's LoRA adapters are fixed at start (--lora_modules); run it with "
      "--allow_runtime_lora_updating to load and unload them at run time");
}

grpc::ServerUnaryReactor* WorkerService::LoadLoraAdapter(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* bytes,
                                                         grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const auto finish = [reactor](const absl::Status& status) {
    reactor->Finish(common::ToGrpcStatus(status));
    return reactor;
  };
  v1::LoadLoraAdapterRequest request;
  if (absl::Status status = common::ParseRawRequest(*bytes, &request); !status.ok()) {
    return finish(status);
  }
  if (absl::Status allowed = LoraUpdatesAllowed(); !allowed.ok()) return finish(allowed);
  if (request.lora_path().empty()) {
    return finish(absl::InvalidArgumentError("lora_path: the adapter's directory is required"));
  }
  const absl::Status queued =
      lora_loader_.Submit([this, reactor, response, request = std::move(request)]() {
        reactor->Finish(common::ToGrpcStatus(LoadAndAddLoraAdapter(request, response)));
      });
  if (absl::IsUnavailable(queued)) return finish(absl::UnavailableError("the worker is stopping"));
  if (!queued.ok()) {
    return finish(absl::ResourceExhaustedError("too many LoRA adapter loads waiting; retry later"));
  }
  return reactor;
}

absl::Status WorkerService::LoadAndAddLoraAdapter(const v1::LoadLoraAdapterRequest& request,
                                                  grpc::ByteBuffer* response) {
  absl::StatusOr<std::unique_ptr<LoraAdapter>> adapter = worker::LoadLoraAdapter(
      request.lora_path(), engine_->model_config(), engine_->backend().max_lora_rank());
  if (!adapter.ok()) {
    return absl::Status(adapter.status().code(),
                        absl::StrCat("LoRA adapter \"", request.lora_name(), "\" at ",
                                     request.lora_path(), ": ", adapter.status().message()));
  }
  const int64_t rank = (*adapter)->rank;
  LLMSERVE_RETURN_IF_ERROR(engine_->AddLoraAdapter(request.lora_name(), *std::move(adapter)));
  LLMSERVE_LOG(INFO) << "loaded LoRA adapter " << request.lora_name() << " (rank " << rank
                     << ") from " << request.lora_path();
  v1::LoadLoraAdapterResponse answer;
  answer.set_rank(static_cast<uint32_t>(rank));
  common::SerializeRawResponse(answer, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* WorkerService::UnloadLoraAdapter(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* bytes,
                                                           grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const auto finish = [reactor](const absl::Status& status) {
    reactor->Finish(common::ToGrpcStatus(status));
    return reactor;
  };
  v1::UnloadLoraAdapterRequest request;
  if (absl::Status status = common::ParseRawRequest(*bytes, &request); !status.ok()) {
    return finish(status);
  }
  if (absl::Status allowed = LoraUpdatesAllowed(); !allowed.ok()) return finish(allowed);
  if (absl::Status removed = engine_->RemoveLoraAdapter(request.lora_name()); !removed.ok()) {
    return finish(removed);
  }
  LLMSERVE_LOG(INFO) << "unloaded LoRA adapter " << request.lora_name();
  common::SerializeRawResponse(v1::UnloadLoraAdapterResponse(), response);
  return finish(absl::OkStatus());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerService::WatchLoad(
    grpc::CallbackServerContext* /*context*/, const grpc::ByteBuffer* bytes) {
  v1::WatchLoadRequest request;
  if (absl::Status status = common::ParseRawRequest(*bytes, &request); !status.ok()) {
    return new RefusedCall(common::ToGrpcStatus(status));
  }
  uint32_t interval_ms = request.interval_ms();
  if (interval_ms == 0) interval_ms = kDefaultWatchIntervalMs;
  const uint32_t min_ms = absl::ToInt64Milliseconds(LoadBroadcaster::kMinInterval);
  if (interval_ms < min_ms || interval_ms > kMaxWatchIntervalMs) {
    return new RefusedCall(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("interval_ms: ", interval_ms, " is outside [", min_ms, ", ",
                                  kMaxWatchIntervalMs, "] (0 means the default, ",
                                  kDefaultWatchIntervalMs, ")")));
  }
  return broadcaster_.Watch(absl::Milliseconds(interval_ms));
}

void WorkerService::StartDrain() {
  {
    absl::MutexLock lock(&mutex_);
    draining_ = true;
  }
  broadcaster_.SetDraining();
}

int WorkerService::WaitForIdle(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  mutex_.AwaitWithDeadline(absl::Condition(
                               +[](int* live_count) { return *live_count == 0; }, &live_count_),
                           deadline);
  return live_count_;
}

void WorkerService::AbortAll(const std::string& message) {
  absl::MutexLock lock(&mutex_);
  // A registered call is alive: it leaves live_ (under this lock) before it can be deleted.
  for (const auto& [id, calls] : live_) {
    for (GenerateCall* call : calls) {
      call->Abort(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
    }
  }
}

void WorkerService::FinishWatchers() { broadcaster_.FinishAll(); }

int WorkerService::live_requests() const {
  absl::MutexLock lock(&mutex_);
  return live_count_;
}

bool WorkerService::HeldByListeningCall(const std::string& request_id) const {
  const auto it = live_.find(request_id);
  if (it == live_.end()) return false;
  // Lock order: the service's mutex, then a call's (as in AbortAll).
  return std::any_of(it->second.begin(), it->second.end(),
                     [](GenerateCall* call) { return !call->client_gone(); });
}

}  // namespace llmserve::worker
