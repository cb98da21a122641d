// LoraAdapterManager against the in-memory FakeWorkerClient: admin loads go to every worker of the
// base model that loads adapters at run time and are remembered; unloads go to every worker that
// has the adapter; a request's adapter that no ready worker has is loaded on demand on the least
// loaded such worker, once for every request that waits for it; and every refusal says why.

#include "gateway/pipeline/lora_adapter_manager.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeLoraCall;
using ::llmserve::testing::FakeLoraModelInfo;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;

// A change's result, waited for (the fake answers on its own thread).
struct ChangeWaiter {
  absl::Notification done;
  absl::StatusOr<LoraAdapterChangeResult> result = absl::UnknownError("never answered");

  LoraAdapterManager::ChangeDone Callback() {
    return [this](absl::StatusOr<LoraAdapterChangeResult> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  const absl::StatusOr<LoraAdapterChangeResult>& Wait() {
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return result;
  }
};

struct StatusWaiter {
  absl::Notification done;
  absl::Status status = absl::UnknownError("never answered");

  absl::AnyInvocable<void(absl::Status) &&> Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
  absl::Status Wait() {
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return status;
  }
};

class LoraAdapterManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.AddWorker("a:1", FakeLoraModelInfo("tiny", 2, {"startup"}, false));
    fake_.AddWorker("b:1", FakeLoraModelInfo("tiny", 4, {}, true));
    fake_.AddWorker("c:1", FakeLoraModelInfo("tiny", 4, {}, true));
    fake_.AddWorker("d:1", FakeModelInfo("other"));
    fake_.SetLoraAnswer([](const FakeLoraCall&) { return absl::OkStatus(); });
  }

  absl::StatusOr<LoraAdapterChangeResult> Load(LoraAdapterSource source) {
    ChangeWaiter waiter;
    manager_.Load(std::move(source), waiter.Callback());
    return waiter.Wait();
  }
  absl::StatusOr<LoraAdapterChangeResult> Unload(const std::string& name) {
    ChangeWaiter waiter;
    manager_.Unload(name, waiter.Callback());
    return waiter.Wait();
  }
  bool HasAdapter(const std::string& address, const std::string& name) const {
    for (const WorkerStatus& worker : fake_.Workers()) {
      if (worker.address != address) continue;
      for (const std::string& adapter : worker.lora_adapters) {
        if (adapter == name) return true;
      }
    }
    return false;
  }

  FakeWorkerClient fake_;
  LoraAdapterManager manager_{&fake_, absl::Seconds(7)};
};

TEST_F(LoraAdapterManagerTest, LoadGoesToEveryRuntimeWorkerOfTheBaseAndIsRemembered) {
  const absl::Time before = absl::Now();
  const absl::StatusOr<LoraAdapterChangeResult> loaded =
      Load({.name = "sql", .path = "/adapters/sql"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // The only model whose workers load at run time is the base.
  EXPECT_EQ(loaded->base_model, "tiny");
  EXPECT_EQ(loaded->changed, (std::vector<std::string>{"b:1", "c:1"}));
  EXPECT_TRUE(loaded->failed.empty());
  const std::vector<FakeLoraCall> calls = fake_.lora_calls();
  ASSERT_EQ(calls.size(), 2u);
  for (const FakeLoraCall& call : calls) {
    EXPECT_TRUE(call.load);
    EXPECT_EQ(call.lora_name, "sql");
    EXPECT_EQ(call.lora_path, "/adapters/sql");
    // Bounded by the load timeout.
    EXPECT_GE(call.deadline, before + absl::Seconds(7));
    EXPECT_LE(call.deadline, absl::Now() + absl::Seconds(7));
  }
  ASSERT_EQ(manager_.Sources().size(), 1u);
  EXPECT_EQ(manager_.Sources()[0].base_model, "tiny");
  EXPECT_EQ(manager_.Sources()[0].path, "/adapters/sql");
}

TEST_F(LoraAdapterManagerTest, LoadRefusesWhatCannotWorkBeforeCallingAnyWorker) {
  struct Case {
    LoraAdapterSource source;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{.name = "", .path = "/p"}, absl::StatusCode::kInvalidArgument, "lora_name"},
      {{.name = "a b", .path = "/p"}, absl::StatusCode::kInvalidArgument, "without spaces"},
      {{.name = std::string(129, 'n'), .path = "/p"},
       absl::StatusCode::kInvalidArgument,
       "1 to 128"},
      {{.name = "x", .path = ""}, absl::StatusCode::kInvalidArgument, "lora_path"},
      {{.name = "tiny", .path = "/p"}, absl::StatusCode::kAlreadyExists, "name of a model"},
      {{.name = "startup", .path = "/p"},
       absl::StatusCode::kAlreadyExists,
       "already loaded (on a:1)"},
      {{.name = "x", .path = "/p", .base_model = "nope"},
       absl::StatusCode::kNotFound,
       "no worker serves model \"nope\""},
      {{.name = "x", .path = "/p", .base_model = "other"},
       absl::StatusCode::kFailedPrecondition,
       "--allow_runtime_lora_updating"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<LoraAdapterChangeResult> loaded = Load(c.source);
    EXPECT_EQ(loaded.status().code(), c.code) << c.source.name << ": " << loaded.status();
    EXPECT_TRUE(absl::StrContains(loaded.status().message(), c.message)) << loaded.status();
  }
  EXPECT_TRUE(fake_.lora_calls().empty());
  EXPECT_TRUE(manager_.Sources().empty());

  // With runtime workers of two models, the base model must be named.
  fake_.AddWorker("e:1", FakeLoraModelInfo("other", 4, {}, true));
  const absl::StatusOr<LoraAdapterChangeResult> ambiguous = Load({.name = "x", .path = "/p"});
  EXPECT_EQ(ambiguous.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(ambiguous.status().message(), "base_model_name: required"))
      << ambiguous.status();
  const absl::StatusOr<LoraAdapterChangeResult> named =
      Load({.name = "x", .path = "/p", .base_model = "other"});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->changed, std::vector<std::string>{"e:1"});
  // A second load of the same name is refused.
  EXPECT_EQ(Load({.name = "x", .path = "/p", .base_model = "other"}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(LoraAdapterManagerTest, ALoadThatEveryWorkerRefusesIsNotRemembered) {
  fake_.SetLoraAnswer([](const FakeLoraCall& call) {
    return absl::NotFoundError(absl::StrCat(call.lora_path, "/adapter_config.json: no such file"));
  });
  const absl::StatusOr<LoraAdapterChangeResult> loaded = Load({.name = "sql", .path = "/gone"});
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "worker b:1: /gone/adapter_config"))
      << loaded.status();
  EXPECT_TRUE(manager_.Sources().empty());

  // One worker of two refusing: loaded, and the refusal is reported.
  fake_.SetLoraAnswer([](const FakeLoraCall& call) {
    return call.address == "c:1" ? absl::ResourceExhaustedError("out of memory") : absl::OkStatus();
  });
  const absl::StatusOr<LoraAdapterChangeResult> partly = Load({.name = "sql", .path = "/p"});
  ASSERT_TRUE(partly.ok()) << partly.status();
  EXPECT_EQ(partly->changed, std::vector<std::string>{"b:1"});
  EXPECT_EQ(partly->failed, std::vector<std::string>{"c:1: out of memory"});
  EXPECT_EQ(manager_.Sources().size(), 1u);
}

TEST_F(LoraAdapterManagerTest, UnloadGoesToEveryWorkerThatHasItAndForgetsIt) {
  ASSERT_TRUE(Load({.name = "sql", .path = "/p"}).ok());
  const absl::StatusOr<LoraAdapterChangeResult> unloaded = Unload("sql");
  ASSERT_TRUE(unloaded.ok()) << unloaded.status();
  EXPECT_EQ(unloaded->changed, (std::vector<std::string>{"b:1", "c:1"}));
  EXPECT_TRUE(manager_.Sources().empty());
  EXPECT_FALSE(HasAdapter("b:1", "sql"));
  EXPECT_EQ(Unload("sql").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Unload("").status().code(), absl::StatusCode::kInvalidArgument);

  // A worker that refuses (its adapters are fixed): the error names it.
  fake_.SetLoraAnswer([](const FakeLoraCall&) {
    return absl::PermissionDeniedError("adapters are fixed at start");
  });
  const absl::StatusOr<LoraAdapterChangeResult> fixed = Unload("startup");
  EXPECT_EQ(fixed.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(fixed.status().message(), "worker a:1: adapters are fixed"))
      << fixed.status();
}

TEST_F(LoraAdapterManagerTest, EnsureLoadedAnswersAtOnceWhenAWorkerHasItOrTheAdapterIsUnknown) {
  StatusWaiter present;
  manager_.EnsureLoaded("tiny", "startup", {}, present.Callback());
  EXPECT_TRUE(present.done.HasBeenNotified());
  EXPECT_TRUE(present.status.ok());
  StatusWaiter unknown;
  manager_.EnsureLoaded("tiny", "never-loaded", {}, unknown.Callback());
  EXPECT_TRUE(unknown.done.HasBeenNotified());
  EXPECT_TRUE(unknown.status.ok());
  EXPECT_TRUE(fake_.lora_calls().empty());
}

TEST_F(LoraAdapterManagerTest, AnAdapterNoWorkerHasIsLoadedOnceForEveryoneWaiting) {
  ASSERT_TRUE(Load({.name = "sql", .path = "/adapters/sql"}).ok());
  // The workers lost it (say they restarted): nobody has it now.
  for (const char* address : {"b:1", "c:1"}) {
    StatusWaiter dropped;
    fake_.UnloadLoraAdapter(address, "sql", absl::InfiniteFuture(), dropped.Callback());
    ASSERT_TRUE(dropped.Wait().ok());
  }
  const size_t before = fake_.lora_calls().size();
  // Held: the test answers.
  fake_.SetLoraAnswer(nullptr);
  StatusWaiter first, second;
  manager_.EnsureLoaded("tiny", "sql", {}, first.Callback());
  manager_.EnsureLoaded("tiny", "sql", {}, second.Callback());
  ASSERT_TRUE(fake_.WaitForLoraCall(before));
  EXPECT_FALSE(first.done.HasBeenNotified());
  EXPECT_EQ(fake_.lora_calls().size(), before + 1);  // one load for both
  const FakeLoraCall call = fake_.lora_calls()[before];
  EXPECT_TRUE(call.load);
  EXPECT_EQ(call.address, "b:1");  // equally loaded: the first
  EXPECT_EQ(call.lora_path, "/adapters/sql");
  fake_.AnswerLoraCall(before, absl::OkStatus());
  EXPECT_TRUE(first.Wait().ok());
  EXPECT_TRUE(second.Wait().ok());
  EXPECT_TRUE(HasAdapter("b:1", "sql"));

  // A worker excluded (it failed this request) is not used; a failed load fails its waiters.
  StatusWaiter third;
  manager_.EnsureLoaded("tiny", "sql", {"b:1"}, third.Callback());
  ASSERT_TRUE(fake_.WaitForLoraCall(before + 1));
  EXPECT_EQ(fake_.lora_calls()[before + 1].address, "c:1");
  fake_.AnswerLoraCall(before + 1, absl::DeadlineExceededError("deadline exceeded"));
  const absl::Status failed = third.Wait();
  EXPECT_EQ(failed.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(failed.message(),
            "loading LoRA adapter \"sql\" on worker c:1 failed: deadline exceeded");

  // No worker left that could load it.
  StatusWaiter none;
  manager_.EnsureLoaded("tiny", "sql", {"b:1", "c:1"}, none.Callback());
  EXPECT_TRUE(none.done.HasBeenNotified());
  EXPECT_EQ(none.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(none.status.message(), "can load it now")) << none.status;
}

}  // namespace
}  // namespace llmserve::gateway
