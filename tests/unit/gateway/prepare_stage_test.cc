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
                  const ::llmserve::v1::ChatPrompt& chat) -> absl::StatusOr<std::string> {
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
