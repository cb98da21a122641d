// The prepare stage of a generation request, shared by the gRPC and OpenAI frontends: the chat
// template, tokenization and every check of the prompt (PrepareRequest, prompt_builder.h) run on
// a bounded pool of CPU threads owned by the gateway, never on the thread that parsed the request.
// A megabyte of prompt takes about a tenth of a second to tokenize; on an HTTP I/O thread that
// is a tenth of a second in which no open SSE stream on that thread receives a token.
//
// The frontends parse, authenticate and resolve the model on their own thread (cheap), Submit,
// and resume in `done` with the prepared choices or the error to answer with. Nothing has been
// sent to the client yet at that point, so a bad prompt is still a 400 / INVALID_ARGUMENT, even
// for a streamed request. With n > 1 choices the prompt is rendered and tokenized once and the
// choices share it (PrepareChoices).
//
// Order: first come, first served, except that short prompts (up to 64 KiB of text, and token
// ids) go before long ones still waiting, so that a burst of megabyte prompts delays a short
// request by at most the one long prompt each thread is busy with.
//
// Bounds: at most `threads` prompts are prepared at once and `max_queued` more wait; beyond that
// Submit refuses with RESOURCE_EXHAUSTED (the frontends answer 429 with retry-after). The
// concurrency limit (--max_concurrency) is applied after this stage, because it needs the prompt's
// token count; it therefore does not bound this queue, which has its own limit.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_PIPELINE_PREPARE_STAGE_H_
#define LLMSERVE_GATEWAY_PIPELINE_PREPARE_STAGE_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "common/base/thread_pool.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gateway/pipeline/served_model.h"
#include "llmserve/v1/inference.pb.h"

namespace llmserve::gateway {

struct PrepareStageOptions {
  // Prompts prepared at once (--prepare_threads).
  int threads = 2;
  // Requests waiting for a thread beyond those (--prepare_queue); more are refused.
  int max_queued = 256;
  PromptLimits limits;
  ChatRenderer render_chat = RenderChatPrompt;
};

// `n` >= 1 choices of `request`: the prompt is prepared once (PrepareRequest) and copied into
// each choice; choice i > 0 gets a fresh request id and, when the request has a seed, seed + i
// (distinct but reproducible choices). PrepareRequest's errors, and INVALID_ARGUMENT for choices
// that together exceed limits.max_logprob_entries (CheckLogprobBudget).
absl::StatusOr<std::vector<PreparedRequest>> PrepareChoices(
    const ::llmserve::v1::GenerateRequest& request, std::shared_ptr<const ServedModel> model, int n,
    const PromptLimits& limits, const ChatRenderer& render_chat);

// What a request's prompt weighs for the stage's order: its text, or its chat messages' contents.
size_t PromptBytes(const ::llmserve::v1::GenerateRequest& request);

class PrepareStage {
 public:
  // INVALID_ARGUMENT naming the flag for threads < 1 or max_queued < 0.
  static absl::StatusOr<std::unique_ptr<PrepareStage>> Create(PrepareStageOptions options);
  ~PrepareStage();  // Shutdown()

  // A submitted request, for its frontend to withdraw when the client leaves.
  class Ticket {
   public:
    // Work not started yet is skipped (`done` gets CANCELLED); work running completes.
    void Cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

   private:
    std::atomic<bool> cancelled_{false};
  };

  using Done = absl::AnyInvocable<void(absl::StatusOr<std::vector<PreparedRequest>> choices) &&>;

  // Prepares `n` choices of `request` for `model` on a pool thread, then calls `done` there,
  // exactly once: with the choices; PrepareChoices' error; CANCELLED when `ticket` (may be null)
  // was cancelled before the work started; UNAVAILABLE when the gateway shuts down first. The
  // caller makes the ticket, so that a client who leaves during the call to Submit still reaches
  // it. When the queue is full (RESOURCE_EXHAUSTED) or the stage has shut down (UNAVAILABLE),
  // Submit returns the error and `done` never runs.
  absl::Status Submit(::llmserve::v1::GenerateRequest request,
                      std::shared_ptr<const ServedModel> model, int n,
                      std::shared_ptr<const Ticket> ticket, Done done);

  // Other prompt work (gRPC Tokenize) under the same bounds and order, a prompt of
  // `prompt_bytes` (text or chat contents): `work` runs once on a pool thread with OK, or with
  // CANCELLED / UNAVAILABLE (as `done` above) when it should only answer. Submit's refusals.
  using Work = absl::AnyInvocable<void(absl::Status ready) &&>;
  absl::Status Run(size_t prompt_bytes, std::shared_ptr<const Ticket> ticket, Work work);

  // Requests still waiting end with UNAVAILABLE at once, without their work; running ones
  // finish; returns when every `done` has run. New requests are refused. Idempotent.
  void Shutdown();

  // Requests waiting for a thread now.
  int queued() const { return pool_.queued(); }
  const PromptLimits& limits() const { return options_.limits; }
  const ChatRenderer& render_chat() const { return options_.render_chat; }

 private:
  explicit PrepareStage(PrepareStageOptions options);

  const PrepareStageOptions options_;
  std::atomic<bool> shutting_down_{false};
  common::ThreadPool pool_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_PREPARE_STAGE_H_
