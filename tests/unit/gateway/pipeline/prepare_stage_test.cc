// The prepare stage on its own: a real tokenizer (the generated models'), a chat renderer that
// counts, holds or fails its calls, and no workers.

#include "gateway/pipeline/prepare_stage.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tools/make_model/bpe_builder.h"

namespace llmserve::gateway {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(60);

std::shared_ptr<const ServedModel> TestModel() {
  const tools::BuiltTokenizer built = tools::BuildByteLevelTokenizer(200);
  worker::v1::ModelInfo info;
  info.set_model_name("m");
  info.set_max_model_len(4096);
  info.set_vocab_size(built.vocab_size);
  info.set_tokenizer_json(built.tokenizer_json);
  info.set_tokenizer_config_json(built.tokenizer_config_json);
  absl::StatusOr<std::shared_ptr<const ServedModel>> model = ServedModel::Create(info);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// A chat renderer that counts its calls; a chat saying "hold" waits for release, "bad" fails.
struct Renderer {
  std::atomic<int> calls{0};
  absl::Notification held;
  absl::Notification release;

  ChatRenderer Get() {
    return [this](const ServedModel& model,
                  const ::llmserve::v1::ChatPrompt& chat) -> absl::StatusOr<common::RenderedChat> {
      ++calls;
      const std::string& content = chat.messages(0).content();
      if (content == "hold") {
        held.Notify();
        release.WaitForNotificationWithTimeout(kPatience);
      }
      if (content == "bad") return absl::InvalidArgumentError("chat: bad on purpose");
      return RenderChatPrompt(model, chat);
    };
  }
};

::llmserve::v1::GenerateRequest Chat(const std::string& content) {
  ::llmserve::v1::GenerateRequest request;
  ::llmserve::v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content(content);
  request.mutable_stopping()->set_max_tokens(4);
  return request;
}

// What `done` received, once.
struct Outcome {
  absl::Notification done;
  absl::StatusOr<std::vector<PreparedRequest>> choices = absl::UnknownError("not run");
  std::thread::id thread;

  PrepareStage::Done Callback() {
    return [this](absl::StatusOr<std::vector<PreparedRequest>> result) {
      choices = std::move(result);
      thread = std::this_thread::get_id();
      done.Notify();
    };
  }
};

std::unique_ptr<PrepareStage> MakeStage(Renderer& renderer, int threads, int max_queued) {
  absl::StatusOr<std::unique_ptr<PrepareStage>> stage = PrepareStage::Create(
      {.threads = threads, .max_queued = max_queued, .render_chat = renderer.Get()});
  EXPECT_TRUE(stage.ok()) << stage.status();
  return stage.ok() ? *std::move(stage) : nullptr;
}

TEST(PrepareStageTest, NChoicesShareOnePreparedPrompt) {
  Renderer renderer;
  ::llmserve::v1::GenerateRequest request = Chat("Hello there");
  request.mutable_sampling()->set_seed(5);
  absl::StatusOr<std::vector<PreparedRequest>> choices =
      PrepareChoices(request, TestModel(), 3, PromptLimits(), renderer.Get());
  ASSERT_TRUE(choices.ok()) << choices.status();
  EXPECT_EQ(renderer.calls.load(), 1);
  ASSERT_EQ(choices->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const PreparedRequest& choice = (*choices)[i];
    EXPECT_GT(choice.worker_request.prompt_token_ids_size(), 0);
    EXPECT_EQ(choice.worker_request.prompt_token_ids_size(),
              (*choices)[0].worker_request.prompt_token_ids_size());
    EXPECT_EQ(choice.worker_request.sampling().seed(), 5u + i);
    for (int j = 0; j < i; ++j) EXPECT_NE(choice.request_id, (*choices)[j].request_id);
  }
}

TEST(PrepareStageTest, ChoicesWithoutASeedStayWithoutOne) {
  Renderer renderer;
  absl::StatusOr<std::vector<PreparedRequest>> choices =
      PrepareChoices(Chat("Hi"), TestModel(), 2, PromptLimits(), renderer.Get());
  ASSERT_TRUE(choices.ok()) << choices.status();
  EXPECT_FALSE((*choices)[1].worker_request.sampling().has_seed());
}

// Logprobs asked with `top` alternatives, `max_tokens` each.
::llmserve::v1::GenerateRequest WithLogprobs(int top, int max_tokens) {
  ::llmserve::v1::GenerateRequest request = Chat("Hi");
  request.mutable_sampling()->set_return_logprobs(true);
  request.mutable_sampling()->set_top_logprobs(top);
  request.mutable_stopping()->set_max_tokens(max_tokens);
  return request;
}

TEST(PrepareStageTest, LogprobEntriesUpToTheLimitAreAcceptedAndOneTokenMoreIsRefused) {
  Renderer renderer;
  PromptLimits limits;
  limits.max_logprob_entries = 100;
  // 2 choices x 10 tokens x (4 alternatives + the token's own) = 100.
  EXPECT_TRUE(PrepareChoices(WithLogprobs(4, 10), TestModel(), 2, limits, renderer.Get()).ok());
  absl::StatusOr<std::vector<PreparedRequest>> over =
      PrepareChoices(WithLogprobs(4, 11), TestModel(), 2, limits, renderer.Get());
  ASSERT_TRUE(absl::IsInvalidArgument(over.status())) << over.status();
  const std::string message(over.status().message());
  EXPECT_NE(message.find("n * max_tokens * (top_logprobs + 1) = 2 * 11 * (4 + 1) = 110"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("limit of 100"), std::string::npos) << message;
  EXPECT_NE(message.find("--max_logprob_entries"), std::string::npos) << message;
}

TEST(PrepareStageTest, OnlyRequestsAskingForLogprobsAreCounted) {
  Renderer renderer;
  PromptLimits limits;
  limits.max_logprob_entries = 10;
  // The chosen tokens' logprobs alone count one entry a token: 16 x 4000.
  EXPECT_TRUE(absl::IsInvalidArgument(
      PrepareChoices(WithLogprobs(0, 4000), TestModel(), 16, limits, renderer.Get()).status()));
  // No logprobs: 16 choices of 4000 tokens cost no entries.
  ::llmserve::v1::GenerateRequest plain = WithLogprobs(0, 4000);
  plain.mutable_sampling()->set_return_logprobs(false);
  EXPECT_TRUE(PrepareChoices(plain, TestModel(), 16, limits, renderer.Get()).ok());
  // Alternatives alone carry the token's own logprob too (the worker's rule): 1 x 4 x 3 = 12.
  ::llmserve::v1::GenerateRequest top_only = WithLogprobs(2, 4);
  top_only.mutable_sampling()->set_return_logprobs(false);
  EXPECT_TRUE(absl::IsInvalidArgument(
      PrepareChoices(top_only, TestModel(), 1, limits, renderer.Get()).status()));
}

TEST(PrepareStageTest, AnUnsetMaxTokensIsCountedAtItsDefaultAndSaysSo) {
  Renderer renderer;
  PromptLimits limits;
  limits.default_max_tokens = 50;
  limits.max_logprob_entries = 49;
  ::llmserve::v1::GenerateRequest request = WithLogprobs(0, 1);
  request.mutable_stopping()->clear_max_tokens();
  absl::StatusOr<std::vector<PreparedRequest>> over =
      PrepareChoices(request, TestModel(), 1, limits, renderer.Get());
  ASSERT_TRUE(absl::IsInvalidArgument(over.status())) << over.status();
  EXPECT_NE(over.status().message().find("1 * 50 (max_tokens unset: the default) * (0 + 1) = 50"),
            std::string::npos)
      << over.status();
}

TEST(PrepareStageTest, TheDefaultLimitRefusesTheRequestOfIssue28) {
  Renderer renderer;
  // n: 16, top_logprobs: 20, max_tokens: 2000 made a 45 MB response and took the gateway from
  // 78 MB to 895 MB: 672,000 entries.
  absl::StatusOr<std::vector<PreparedRequest>> issue =
      PrepareChoices(WithLogprobs(20, 2000), TestModel(), 16, PromptLimits(), renderer.Get());
  ASSERT_TRUE(absl::IsInvalidArgument(issue.status())) << issue.status();
  EXPECT_NE(issue.status().message().find("= 672000 logprob entries"), std::string::npos)
      << issue.status();
  // The largest of its shape within the default: 16 x 780 x 21 = 262,080 <= 262,144.
  absl::StatusOr<std::vector<PreparedRequest>> largest =
      PrepareChoices(WithLogprobs(20, 780), TestModel(), 16, PromptLimits(), renderer.Get());
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(LogprobEntries(largest->front().worker_request, 16), 262080);
}

TEST(PrepareStageTest, PreparesOnAPoolThreadAndReturnsErrorsThroughDone) {
  Renderer renderer;
  std::unique_ptr<PrepareStage> stage = MakeStage(renderer, 2, 8);
  Outcome good;
  Outcome bad;
  ASSERT_TRUE(stage->Submit(Chat("Hello"), TestModel(), 2, nullptr, good.Callback()).ok());
  ASSERT_TRUE(stage->Submit(Chat("bad"), TestModel(), 1, nullptr, bad.Callback()).ok());
  ASSERT_TRUE(good.done.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(bad.done.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(good.choices.ok()) << good.choices.status();
  EXPECT_EQ(good.choices->size(), 2u);
  EXPECT_NE(good.thread, std::this_thread::get_id());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.choices.status())) << bad.choices.status();
  EXPECT_EQ(renderer.calls.load(), 2);
}

TEST(PrepareStageTest, ACancelledRequestIsSkippedWhileItWaits) {
  Renderer renderer;
  std::unique_ptr<PrepareStage> stage = MakeStage(renderer, 1, 8);
  Outcome held;
  Outcome cancelled;
  ASSERT_TRUE(stage->Submit(Chat("hold"), TestModel(), 1, nullptr, held.Callback()).ok());
  ASSERT_TRUE(renderer.held.WaitForNotificationWithTimeout(kPatience));
  auto ticket = std::make_shared<PrepareStage::Ticket>();
  ASSERT_TRUE(
      stage->Submit(Chat("never rendered"), TestModel(), 1, ticket, cancelled.Callback()).ok());
  ticket->Cancel();
  renderer.release.Notify();
  ASSERT_TRUE(cancelled.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(absl::IsCancelled(cancelled.choices.status())) << cancelled.choices.status();
  ASSERT_TRUE(held.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(held.choices.ok()) << held.choices.status();
  EXPECT_EQ(renderer.calls.load(), 1);
}

// A short prompt does not wait behind a long one queued before it.
TEST(PrepareStageTest, ShortPromptsGoBeforeLongOnesWaiting) {
  Renderer renderer;
  std::unique_ptr<PrepareStage> stage = MakeStage(renderer, 1, 8);
  Outcome held;
  ASSERT_TRUE(stage->Submit(Chat("hold"), TestModel(), 1, nullptr, held.Callback()).ok());
  ASSERT_TRUE(renderer.held.WaitForNotificationWithTimeout(kPatience));
  absl::Mutex mutex;
  std::vector<std::string> order;
  auto record = [&](std::string name) {
    return [&, name](absl::StatusOr<std::vector<PreparedRequest>>) {
      absl::MutexLock lock(&mutex);
      order.push_back(name);
    };
  };
  ::llmserve::v1::GenerateRequest long_text;
  std::string text;
  while (text.size() <= (64 << 10)) text += "many words ";
  long_text.set_text(text);
  ::llmserve::v1::GenerateRequest ids;
  ids.mutable_token_ids()->add_ids(1);
  ASSERT_TRUE(stage->Submit(long_text, TestModel(), 1, nullptr, record("long")).ok());
  ASSERT_TRUE(stage->Submit(Chat("short"), TestModel(), 1, nullptr, record("short")).ok());
  ASSERT_TRUE(stage->Submit(ids, TestModel(), 1, nullptr, record("ids")).ok());
  renderer.release.Notify();
  stage->Shutdown();
  EXPECT_EQ(order, (std::vector<std::string>{"short", "ids", "long"}));
}

TEST(PrepareStageTest, AFullQueueRefusesAtOnceAndNeverCallsDone) {
  Renderer renderer;
  std::unique_ptr<PrepareStage> stage = MakeStage(renderer, 1, 1);
  Outcome held;
  Outcome queued;
  ASSERT_TRUE(stage->Submit(Chat("hold"), TestModel(), 1, nullptr, held.Callback()).ok());
  ASSERT_TRUE(renderer.held.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(stage->Submit(Chat("queued"), TestModel(), 1, nullptr, queued.Callback()).ok());
  std::atomic<bool> refused_done_ran{false};
  const absl::Status refused =
      stage->Submit(Chat("refused"), TestModel(), 1, nullptr,
                    [&](absl::StatusOr<std::vector<PreparedRequest>>) { refused_done_ran = true; });
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_NE(refused.message().find("--prepare_queue=1"), std::string::npos) << refused;
  renderer.release.Notify();
  ASSERT_TRUE(queued.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(queued.choices.ok()) << queued.choices.status();
  stage->Shutdown();
  EXPECT_FALSE(refused_done_ran.load());
}

TEST(PrepareStageTest, ShutdownEndsWaitingRequestsWithUnavailable) {
  Renderer renderer;
  std::unique_ptr<PrepareStage> stage = MakeStage(renderer, 1, 100000);
  Outcome held;
  Outcome waiting;
  ASSERT_TRUE(stage->Submit(Chat("hold"), TestModel(), 1, nullptr, held.Callback()).ok());
  ASSERT_TRUE(renderer.held.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(stage->Submit(Chat("waiting"), TestModel(), 1, nullptr, waiting.Callback()).ok());
  std::thread shutdown([&] { stage->Shutdown(); });
  // Released once Shutdown has begun: new requests are refused from then on. (The probes queued
  // before are text prompts, which the renderer does not see.)
  ::llmserve::v1::GenerateRequest probe;
  probe.set_text("probe");
  const absl::Time deadline = absl::Now() + kPatience;
  while (!absl::IsUnavailable(stage->Submit(probe, TestModel(), 1, nullptr,
                                            [](absl::StatusOr<std::vector<PreparedRequest>>) {})) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  renderer.release.Notify();
  shutdown.join();
  // Shutdown returned: every accepted request has had its `done`.
  ASSERT_TRUE(held.done.HasBeenNotified());
  ASSERT_TRUE(waiting.done.HasBeenNotified());
  EXPECT_TRUE(held.choices.ok()) << held.choices.status();
  EXPECT_TRUE(absl::IsUnavailable(waiting.choices.status())) << waiting.choices.status();
  EXPECT_EQ(renderer.calls.load(), 1);
  Outcome late;
  EXPECT_TRUE(
      absl::IsUnavailable(stage->Submit(Chat("late"), TestModel(), 1, nullptr, late.Callback())));
}

TEST(PrepareStageTest, BadSizesNameTheirFlag) {
  absl::StatusOr<std::unique_ptr<PrepareStage>> no_threads = PrepareStage::Create({.threads = 0});
  EXPECT_TRUE(absl::IsInvalidArgument(no_threads.status()));
  EXPECT_NE(no_threads.status().message().find("--prepare_threads"), std::string::npos);
  absl::StatusOr<std::unique_ptr<PrepareStage>> bad_queue =
      PrepareStage::Create({.threads = 1, .max_queued = -1});
  EXPECT_NE(bad_queue.status().message().find("--prepare_queue"), std::string::npos);
}

}  // namespace
}  // namespace llmserve::gateway
