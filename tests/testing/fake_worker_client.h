// An in-memory WorkerClient (gateway/router/worker_client.h): workers are names with a ModelInfo,
// and every Generate call is a FakeCall that the test drives by hand (send tokens, finish, fail)
// and inspects (its worker, its request, whether the gateway cancelled it). Routing, retries,
// cancellation and drain are then tested without starting a worker.
//
// Like gRPC, the fake calls its observers on its own thread (one, so a call's events keep their
// order), never on the thread that sends, finishes or cancels.
//
// Thread-safe.

#ifndef LLMSERVE_TESTS_TESTING_FAKE_WORKER_CLIENT_H_
#define LLMSERVE_TESTS_TESTING_FAKE_WORKER_CLIENT_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/thread_pool.h"
#include "gateway/router/routing_policy.h"
#include "gateway/router/worker_client.h"
#include "tools/make_model/bpe_builder.h"

namespace llmserve::testing {

// A worker's description of a model called `name` with the tiny test model's real tokenizer (a
// byte-level BPE: text prompts work, and generated ids detokenize), 4-token blocks.
inline ::llmserve::worker::v1::ModelInfo FakeModelInfo(const std::string& name) {
  static const tools::BuiltTokenizer* const built =
      new tools::BuiltTokenizer(tools::BuildByteLevelTokenizer(200));
  ::llmserve::worker::v1::ModelInfo info;
  info.set_model_name(name);
  info.set_max_model_len(512);
  info.set_vocab_size(built->vocab_size);
  info.set_block_size(4);
  info.set_tokenizer_json(built->tokenizer_json);
  info.set_tokenizer_config_json(built->tokenizer_config_json);
  return info;
}

// FakeModelInfo with the worker's chat_template set from its tokenizer config, as a worker that
// read the template sends it (chats, tool calls and reasoning render with it).
inline ::llmserve::worker::v1::ModelInfo FakeModelInfoWithTemplate(const std::string& name) {
  ::llmserve::worker::v1::ModelInfo info = FakeModelInfo(name);
  info.set_chat_template(
      nlohmann::json::parse(info.tokenizer_config_json()).at("chat_template").get<std::string>());
  return info;
}

// FakeModelInfo served as embeddings (--task=embed) of `size` dimensions, mean-pooled and
// normalized; `matryoshka_dimensions` the lengths it may be cut to (empty: none).
inline ::llmserve::worker::v1::ModelInfo FakeEmbeddingModelInfo(
    const std::string& name, uint32_t size,
    const std::vector<uint32_t>& matryoshka_dimensions = {}) {
  ::llmserve::worker::v1::ModelInfo info = FakeModelInfo(name);
  info.set_task("embed");
  info.set_embedding_size(size);
  info.set_pooling("mean");
  info.set_normalize_embeddings(true);
  info.set_matryoshka(!matryoshka_dimensions.empty());
  for (uint32_t d : matryoshka_dimensions) info.add_matryoshka_dimensions(d);
  return info;
}

// FakeModelInfo of a worker with `max_loras` LoRA slots (rank up to 64) holding `adapters`, which
// loads and unloads adapters at run time when `runtime_updates` (--allow_runtime_lora_updating).
inline ::llmserve::worker::v1::ModelInfo FakeLoraModelInfo(const std::string& name,
                                                           uint32_t max_loras,
                                                           const std::vector<std::string>& adapters,
                                                           bool runtime_updates) {
  ::llmserve::worker::v1::ModelInfo info = FakeModelInfo(name);
  info.set_max_loras(max_loras);
  info.set_max_lora_rank(64);
  for (const std::string& adapter : adapters) info.add_lora_adapters(adapter);
  info.set_allow_runtime_lora_updating(runtime_updates);
  return info;
}

// One Generate call as the fake worker sees it.
class FakeCall {
 public:
  const std::string& address() const { return address_; }
  const ::llmserve::worker::v1::GenerateRequest& request() const { return request_; }
  // The W3C traceparent the gateway sent with the call (empty: none).
  const std::string& traceparent() const { return traceparent_; }
  void set_traceparent(std::string traceparent) { traceparent_ = std::move(traceparent); }

  // The worker sends `tokens` (ids; logprob 0) and, when `finish` is set, ends the request with
  // that reason and closes the stream OK. False when the call has ended already.
  bool Send(const std::vector<int32_t>& tokens,
            ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_UNSPECIFIED) {
    ::llmserve::worker::v1::GenerateResponse message;
    for (int32_t id : tokens) message.add_tokens()->set_token_id(id);
    message.set_finish_reason(finish);
    message.mutable_usage()->set_prompt_tokens(request_.prompt_token_ids_size());
    return Deliver(std::move(message), finish != ::llmserve::v1::FINISH_REASON_UNSPECIFIED
                                           ? std::optional<absl::Status>(absl::OkStatus())
                                           : std::nullopt);
  }
  // The worker's whole answer: `ids` in messages of `piece` tokens, the last one with `finish`.
  // False when the call ended before.
  bool SendInPieces(const std::vector<int32_t>& ids, size_t piece,
                    ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_STOP) {
    for (size_t i = 0; i < ids.size(); i += piece) {
      const std::vector<int32_t> part(ids.begin() + i,
                                      ids.begin() + std::min(ids.size(), i + piece));
      if (!Send(part,
                i + piece >= ids.size() ? finish : ::llmserve::v1::FINISH_REASON_UNSPECIFIED)) {
        return false;
      }
    }
    return true;
  }
  // An embedding worker's answer: `values` on its one message, finish STOP.
  bool SendEmbedding(const std::vector<float>& values) {
    ::llmserve::worker::v1::GenerateResponse message;
    message.mutable_embedding()->Assign(values.begin(), values.end());
    message.set_finish_reason(::llmserve::v1::FINISH_REASON_STOP);
    message.mutable_usage()->set_prompt_tokens(request_.prompt_token_ids_size());
    return Deliver(std::move(message), absl::OkStatus());
  }
  // The call ends with `status` (a worker refusing or failing it). False when it ended already.
  bool Finish(const absl::Status& status) { return Deliver(std::nullopt, status); }

  bool cancelled() const {
    absl::MutexLock lock(&mutex_);
    return cancelled_;
  }
  bool WaitUntilCancelled(absl::Duration timeout) const {
    absl::MutexLock lock(&mutex_);
    return mutex_.AwaitWithTimeout(absl::Condition(&cancelled_), timeout);
  }
  // Whether the call has ended (its OnDone is delivered or on its way).
  bool ended() const {
    absl::MutexLock lock(&mutex_);
    return ended_;
  }

 private:
  friend class FakeWorkerClient;
  class Handle;
  std::string traceparent_;

  FakeCall(common::ThreadPool* delivery, std::string address,
           ::llmserve::worker::v1::GenerateRequest request,
           std::shared_ptr<gateway::WorkerCallObserver> observer)
      : delivery_(delivery),
        address_(std::move(address)),
        request_(std::move(request)),
        observer_(std::move(observer)) {}

  // Queues `message` and/or the end of the call for the delivery thread.
  bool Deliver(std::optional<::llmserve::worker::v1::GenerateResponse> message,
               std::optional<absl::Status> end) {
    std::unique_ptr<gateway::WorkerCall> handle;
    std::shared_ptr<gateway::WorkerCallObserver> observer;
    {
      absl::MutexLock lock(&mutex_);
      if (ended_ || !started_) return false;
      observer = observer_;
      if (end.has_value()) {
        ended_ = true;
        handle = std::move(handle_);
        // Like a real call, which is destroyed after its end: what the observer holds (the
        // request) must not outlive the call because the test keeps its FakeCall.
        observer_.reset();
      }
    }
    const absl::Status queued = delivery_->Submit(
        [observer, message = std::move(message), end, handle = std::move(handle)]() mutable {
          if (message.has_value()) observer->OnMessage(*message);
          if (end.has_value()) observer->OnDone(*end);
          handle.reset();  // the WorkerCall is destroyed after its OnDone returned
          observer.reset();
        });
    return queued.ok();
  }

  common::ThreadPool* const delivery_;
  const std::string address_;
  const ::llmserve::worker::v1::GenerateRequest request_;
  mutable absl::Mutex mutex_;
  std::shared_ptr<gateway::WorkerCallObserver> observer_ ABSL_GUARDED_BY(mutex_);
  bool started_ ABSL_GUARDED_BY(mutex_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  bool ended_ ABSL_GUARDED_BY(mutex_) = false;
  // The WorkerCall the gateway started: owned by the call from Start until its OnDone.
  std::unique_ptr<gateway::WorkerCall> handle_ ABSL_GUARDED_BY(mutex_);
};

// The WorkerCall the gateway holds.
class FakeCall::Handle final : public gateway::WorkerCall {
 public:
  explicit Handle(std::shared_ptr<FakeCall> call, std::function<void()> on_start)
      : call_(std::move(call)), on_start_(std::move(on_start)) {}
  void Start() override {
    {
      absl::MutexLock lock(&call_->mutex_);
      call_->started_ = true;
      call_->handle_.reset(this);
    }
    on_start_();
  }
  void Cancel() override {
    {
      absl::MutexLock lock(&call_->mutex_);
      call_->cancelled_ = true;
    }
    call_->Finish(absl::CancelledError("cancelled by the gateway"));
  }

 private:
  const std::shared_ptr<FakeCall> call_;
  const std::function<void()> on_start_;
};

// One LoadLoraAdapter / UnloadLoraAdapter call as the fake worker sees it.
struct FakeLoraCall {
  std::string address;
  bool load = false;
  std::string lora_name;
  std::string lora_path;
  absl::Time deadline;
};

class FakeWorkerClient final : public gateway::WorkerClient {
 public:
  explicit FakeWorkerClient(gateway::RoutingPolicy policy = gateway::RoutingPolicy::kLeastLoad)
      : policy_(policy) {}
  ~FakeWorkerClient() override { delivery_.Shutdown(); }

  // A ready worker at `address` serving `info.model_name()`.
  void AddWorker(const std::string& address, ::llmserve::worker::v1::ModelInfo info) {
    absl::MutexLock lock(&mutex_);
    Worker& worker = workers_[address];
    worker.lora_adapters.assign(info.lora_adapters().begin(), info.lora_adapters().end());
    worker.info = std::make_shared<const ::llmserve::worker::v1::ModelInfo>(std::move(info));
    worker.ready = true;
    known_models_.insert(worker.info->model_name());
  }
  void SetReady(const std::string& address, bool ready) {
    absl::MutexLock lock(&mutex_);
    workers_[address].ready = ready;
  }

  // The `index`-th call started (from 0), waiting for it up to `timeout`; null when it never came.
  std::shared_ptr<FakeCall> WaitForCall(size_t index, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mutex_);
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return started_.size() > index; };
    mutex_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
    return started_.size() > index ? started_[index] : nullptr;
  }
  size_t calls_started() const {
    absl::MutexLock lock(&mutex_);
    return started_.size();
  }
  // Addresses passed to ReportFailure, in order.
  std::vector<std::string> reported_failures() const {
    absl::MutexLock lock(&mutex_);
    return failures_;
  }
  // How LoRA adapter calls are answered: by `answer` at once (on the delivery thread), or, when
  // it is null (the default), only by AnswerLoraCall. A call answered OK changes the worker's
  // adapters.
  void SetLoraAnswer(std::function<absl::Status(const FakeLoraCall&)> answer) {
    absl::MutexLock lock(&mutex_);
    lora_answer_ = std::move(answer);
  }
  // Every LoRA adapter call made so far, in order.
  std::vector<FakeLoraCall> lora_calls() const {
    absl::MutexLock lock(&mutex_);
    std::vector<FakeLoraCall> calls;
    for (const PendingLoraCall& call : lora_calls_) calls.push_back(call.call);
    return calls;
  }
  // Waits up to `timeout` for the `index`-th LoRA call (from 0); false when it never came.
  bool WaitForLoraCall(size_t index, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mutex_);
    auto arrived = [&]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return lora_calls_.size() > index; };
    return mutex_.AwaitWithTimeout(absl::Condition(&arrived), timeout);
  }
  // Answers the `index`-th LoRA call (held because no answer function was set).
  void AnswerLoraCall(size_t index, absl::Status status) {
    absl::MutexLock lock(&mutex_);
    FinishLoraCallLocked(index, std::move(status));
  }

  // The prompt's hash_passes() at the last Route (how often it was hashed so far).
  int last_hash_passes() const {
    absl::MutexLock lock(&mutex_);
    return last_hash_passes_;
  }

  absl::StatusOr<gateway::RoutedWorker> Route(
      absl::string_view model, gateway::PromptRoutingHashes& prompt,
      const absl::flat_hash_set<std::string>& excluded) override {
    absl::MutexLock lock(&mutex_);
    std::vector<gateway::RoutingCandidate> candidates;
    std::vector<const std::string*> addresses;
    for (const auto& [address, worker] : workers_) {
      if (!worker.ready || excluded.contains(address)) continue;
      if (!model.empty() && worker.info->model_name() != model) continue;
      if (!prompt.lora_adapter().empty() &&
          std::find(worker.lora_adapters.begin(), worker.lora_adapters.end(),
                    prompt.lora_adapter()) == worker.lora_adapters.end()) {
        continue;
      }
      prompt.ForBlockSize(static_cast<int32_t>(worker.info->block_size()));
      candidates.push_back({.worker = address, .in_flight = OpenCallsLocked(address)});
      addresses.push_back(&address);
    }
    last_hash_passes_ = prompt.hash_passes();
    const std::optional<gateway::RoutingDecision> decision =
        gateway::ChooseWorker(candidates, {.policy = policy_}, &turn_);
    if (!decision.has_value()) {
      if (!model.empty() && !known_models_.contains(model)) {
        return absl::NotFoundError(absl::StrCat("model \"", model, "\" is not served here"));
      }
      return absl::UnavailableError(
          absl::StrCat("no ready worker for ", model, excluded.empty() ? "" : " left to try"));
    }
    const std::string& address = *addresses[decision->index];
    return gateway::RoutedWorker{
        .address = address, .model_info = workers_.at(address).info, .decision = *decision};
  }

  void ReportFailure(const std::string& address, const std::string& /*error*/) override {
    absl::MutexLock lock(&mutex_);
    failures_.push_back(address);
  }

  std::unique_ptr<gateway::WorkerCall> NewCall(
      const gateway::RoutedWorker& worker, ::llmserve::worker::v1::GenerateRequest request,
      const gateway::WorkerCallOptions& options,
      std::shared_ptr<gateway::WorkerCallObserver> observer) override {
    std::shared_ptr<FakeCall> call(
        new FakeCall(&delivery_, worker.address, std::move(request), std::move(observer)));
    call->set_traceparent(options.traceparent);
    return std::make_unique<FakeCall::Handle>(call, [this, call] {
      absl::MutexLock lock(&mutex_);
      started_.push_back(call);
    });
  }

  void LoadLoraAdapter(const std::string& address,
                       const ::llmserve::worker::v1::LoadLoraAdapterRequest& request,
                       absl::Time deadline,
                       absl::AnyInvocable<void(absl::Status) &&> done) override {
    StartLoraCall({.address = address,
                   .load = true,
                   .lora_name = request.lora_name(),
                   .lora_path = request.lora_path(),
                   .deadline = deadline},
                  std::move(done));
  }
  void UnloadLoraAdapter(const std::string& address, const std::string& lora_name,
                         absl::Time deadline,
                         absl::AnyInvocable<void(absl::Status) &&> done) override {
    StartLoraCall({.address = address, .load = false, .lora_name = lora_name, .deadline = deadline},
                  std::move(done));
  }

  void OnLoraAdapterMissing(const std::string& address, const std::string& lora_name) override {
    absl::MutexLock lock(&mutex_);
    const auto worker = workers_.find(address);
    if (worker == workers_.end()) return;
    std::vector<std::string>& adapters = worker->second.lora_adapters;
    adapters.erase(std::remove(adapters.begin(), adapters.end(), lora_name), adapters.end());
    missing_reports_.push_back(address + " " + lora_name);
  }
  // "address name" of every OnLoraAdapterMissing, in order.
  std::vector<std::string> missing_reports() const {
    absl::MutexLock lock(&mutex_);
    return missing_reports_;
  }

  std::vector<gateway::WorkerStatus> Workers() const override {
    absl::MutexLock lock(&mutex_);
    std::vector<gateway::WorkerStatus> statuses;
    for (const auto& [address, worker] : workers_) {
      statuses.push_back({.address = address,
                          .ready = worker.ready,
                          .model_info = worker.info,
                          .lora_adapters = worker.lora_adapters});
    }
    return statuses;
  }
  std::vector<std::string> KnownModels() const override {
    absl::MutexLock lock(&mutex_);
    std::vector<std::string> models(known_models_.begin(), known_models_.end());
    std::sort(models.begin(), models.end());
    return models;
  }
  bool AnyReady() const override {
    absl::MutexLock lock(&mutex_);
    for (const auto& [address, worker] : workers_) {
      if (worker.ready) return true;
    }
    return false;
  }
  gateway::RoutingPolicy routing_policy() const override { return policy_; }

 private:
  struct Worker {
    std::shared_ptr<const ::llmserve::worker::v1::ModelInfo> info;
    bool ready = false;
    // Sorted.
    std::vector<std::string> lora_adapters;
  };
  struct PendingLoraCall {
    FakeLoraCall call;
    // Null once answered.
    std::shared_ptr<absl::AnyInvocable<void(absl::Status) &&>> done;
  };

  void StartLoraCall(FakeLoraCall call, absl::AnyInvocable<void(absl::Status) &&> done) {
    absl::MutexLock lock(&mutex_);
    lora_calls_.push_back(
        {std::move(call),
         std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done))});
    if (lora_answer_) {
      FinishLoraCallLocked(lora_calls_.size() - 1, lora_answer_(lora_calls_.back().call));
    }
  }

  void FinishLoraCallLocked(size_t index, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    PendingLoraCall& pending = lora_calls_.at(index);
    if (pending.done == nullptr) return;
    const auto worker = workers_.find(pending.call.address);
    if (worker == workers_.end() && status.ok()) status = absl::UnavailableError("no such worker");
    if (status.ok()) {
      std::vector<std::string>& adapters = worker->second.lora_adapters;
      adapters.erase(std::remove(adapters.begin(), adapters.end(), pending.call.lora_name),
                     adapters.end());
      if (pending.call.load) adapters.push_back(pending.call.lora_name);
      std::sort(adapters.begin(), adapters.end());
    }
    const absl::Status queued =
        delivery_.Submit([done = std::move(pending.done), status = std::move(status)]() mutable {
          std::move (*done)(std::move(status));
        });
    (void)queued;  // refused only while the fake is destroyed
  }

  int32_t OpenCallsLocked(const std::string& address) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    int32_t open = 0;
    for (const auto& call : started_) open += call->address() == address && !call->ended();
    return open;
  }

  const gateway::RoutingPolicy policy_;
  // One thread: every observer callback, in the order the test caused them.
  common::ThreadPool delivery_{1, 1 << 16};
  mutable absl::Mutex mutex_;
  // Ordered, so that routing among equals is predictable.
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_set<std::string> known_models_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::shared_ptr<FakeCall>> started_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mutex_);
  uint64_t turn_ ABSL_GUARDED_BY(mutex_) = 0;
  int last_hash_passes_ ABSL_GUARDED_BY(mutex_) = 0;
  std::function<absl::Status(const FakeLoraCall&)> lora_answer_ ABSL_GUARDED_BY(mutex_);
  std::vector<PendingLoraCall> lora_calls_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> missing_reports_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace llmserve::testing

#endif  // LLMSERVE_TESTS_TESTING_FAKE_WORKER_CLIENT_H_
