#include "gateway/pipeline/prepare_stage.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

// Prompts up to this size (text, or the chat messages' contents) are prepared before larger ones
// still waiting: they take a few milliseconds, so a burst of megabyte prompts (a tenth of a
// second each) does not hold up every short request behind it. Token-id prompts need no
// tokenizer and always go first.
constexpr size_t kShortPromptBytes = 64 << 10;

}  // namespace

size_t PromptBytes(const ::llmserve::v1::GenerateRequest& request) {
  size_t bytes = 0;
  switch (request.prompt_case()) {
    case ::llmserve::v1::GenerateRequest::kText:
      bytes = request.text().size();
      break;
    case ::llmserve::v1::GenerateRequest::kChat:
      for (const ::llmserve::v1::ChatMessage& message : request.chat().messages()) {
        bytes += message.content().size();
      }
      break;
    default:
      break;
  }
  return bytes;
}

absl::StatusOr<std::vector<PreparedRequest>> PrepareChoices(
    const ::llmserve::v1::GenerateRequest& request, std::shared_ptr<const ServedModel> model, int n,
    const PromptLimits& limits, const ChatRenderer& render_chat) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("n: ", n, " is below 1"));
  absl::StatusOr<PreparedRequest> first =
      PrepareRequest(request, std::move(model), limits, render_chat);
  if (!first.ok()) return first.status();
  // Here, where n is known, for both APIs alike; after PrepareRequest, which resolves max_tokens.
  if (absl::Status budget =
          CheckLogprobBudget(first->worker_request, n, !request.stopping().has_max_tokens(),
                             limits.max_logprob_entries);
      !budget.ok()) {
    return budget;
  }
  std::vector<PreparedRequest> choices;
  choices.reserve(n);
  choices.push_back(*std::move(first));
  for (int i = 1; i < n; ++i) {
    PreparedRequest choice = choices.front();
    // Each choice is its own request on the workers, which refuse duplicate ids.
    absl::StatusOr<std::string> id = ResolveRequestId("");
    if (!id.ok()) return id.status();
    choice.request_id = *std::move(id);
    worker::v1::GenerateRequest& worker_request = choice.worker_request;
    if (worker_request.sampling().has_seed()) {
      worker_request.mutable_sampling()->set_seed(request.sampling().seed() + i);
    }
    choices.push_back(std::move(choice));
  }
  return choices;
}

absl::StatusOr<std::unique_ptr<PrepareStage>> PrepareStage::Create(PrepareStageOptions options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prepare_threads=", options.threads, " must be at least 1"));
  }
  if (options.max_queued < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prepare_queue=", options.max_queued, " must be at least 0"));
  }
  if (!options.render_chat) options.render_chat = RenderChatPrompt;
  return std::unique_ptr<PrepareStage>(new PrepareStage(std::move(options)));
}

PrepareStage::PrepareStage(PrepareStageOptions options)
    : options_(std::move(options)), pool_(options_.threads, options_.max_queued) {}

PrepareStage::~PrepareStage() { Shutdown(); }

absl::Status PrepareStage::Submit(::llmserve::v1::GenerateRequest request,
                                  std::shared_ptr<const ServedModel> model, int n,
                                  std::shared_ptr<const Ticket> ticket, Done done) {
  const size_t bytes = PromptBytes(request);
  return Run(bytes, std::move(ticket),
             [this, request = std::move(request), model = std::move(model), n,
              done = std::move(done)](absl::Status ready) mutable {
               if (!ready.ok()) return std::move(done)(ready);
               std::move(done)(PrepareChoices(request, std::move(model), n, options_.limits,
                                              options_.render_chat));
             });
}

absl::Status PrepareStage::Run(size_t prompt_bytes, std::shared_ptr<const Ticket> ticket,
                               Work work) {
  if (shutting_down_.load()) return absl::UnavailableError("the gateway is shutting down");
  absl::Status queued = pool_.Submit(
      [this, ticket = std::move(ticket), work = std::move(work)]() mutable {
        if (shutting_down_.load()) {
          return std::move(work)(absl::UnavailableError(
              "the gateway shut down before the request's prompt was prepared"));
        }
        if (ticket != nullptr && ticket->cancelled()) {
          return std::move(work)(absl::CancelledError("the request was cancelled"));
        }
        std::move(work)(absl::OkStatus());
      },
      prompt_bytes <= kShortPromptBytes ? common::ThreadPool::Priority::kHigh
                                        : common::ThreadPool::Priority::kNormal);
  if (absl::IsResourceExhausted(queued)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the gateway is busy preparing prompts (", queued.message(), "; --prepare_threads=",
        options_.threads, ", --prepare_queue=", options_.max_queued, "); retry later"));
  }
  if (!queued.ok()) return absl::UnavailableError("the gateway is shutting down");
  return absl::OkStatus();
}

void PrepareStage::Shutdown() {
  shutting_down_.store(true);
  pool_.Shutdown();
}

}  // namespace llmserve::gateway
