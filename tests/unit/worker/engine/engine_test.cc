// The engine loop with a fake backend (deterministic logits, no model) and, end to end, with the
// CPU backend on a generated tiny model.

#include "worker/engine/engine.h"

#include <filesystem>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/simulated_clock.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"
#include "worker/model/model_writer.h"

namespace llmserve::worker {
namespace {

constexpr int32_t kVocab = 32;
constexpr int32_t kEos = 0;

// Logits that make token (last + 1) % kVocab by far the likeliest, skipping EOS unless the last
// token was `eos_after`. Optionally fails at a given forward call.
class FakeBackend : public Backend {
 public:
  explicit FakeBackend(int32_t num_blocks, int fail_at_call = -1)
      : num_blocks_(num_blocks), fail_at_call_(fail_at_call) {
    config_.vocab_size = kVocab;
    config_.max_model_len = config_.max_position_embeddings = 64;
    config_.eos_token_ids = {kEos};
  }
  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return 4; }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  absl::string_view name() const override { return "fake"; }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    if (calls_++ == fail_at_call_) return absl::InternalError("device lost");
    LLMSERVE_RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, block_size(), num_kv_blocks()));
    out->vocab_size = kVocab;
    out->row_start.assign(1, 0);
    out->logits.assign(batch.num_seqs() * kVocab, 0.0f);
    for (int32_t s = 0; s < batch.num_seqs(); ++s) {
      const int32_t last = batch.token_ids[batch.query_start[s + 1] - 1];
      const int32_t next = last == 20                    ? kEos
                           : (last + 1) % kVocab == kEos ? 1
                                                         : (last + 1) % kVocab;
      out->logits[s * kVocab + next] = 10.0f;
      out->row_start.push_back(s + 1);
    }
    return absl::OkStatus();
  }

 private:
  ModelConfig config_;
  int32_t num_blocks_;
  int fail_at_call_;
  int calls_ = 0;
};

// Collects every output, thread-safely.
class Collector {
 public:
  OutputCallback Callback() {
    return [this](const EngineOutput& output) {
      absl::MutexLock lock(&mutex_);
      for (const GeneratedToken& t : output.tokens) tokens_[output.id].push_back(t.token_id);
      if (output.finish != FinishReason::kNone) finished_[output.id] = output;
    };
  }
  std::vector<int32_t> Tokens(RequestId id) {
    absl::MutexLock lock(&mutex_);
    return tokens_[id];
  }
  std::optional<EngineOutput> Final(RequestId id) {
    absl::MutexLock lock(&mutex_);
    const auto it = finished_.find(id);
    if (it == finished_.end()) return std::nullopt;
    return it->second;
  }
  bool WaitForFinished(size_t count, absl::Duration timeout) {
    std::pair<Collector*, size_t> arg(this, count);
    absl::MutexLock lock(&mutex_);
    return mutex_.AwaitWithTimeout(absl::Condition(
                                       +[](std::pair<Collector*, size_t>* a) {
                                         return a->first->finished_.size() >= a->second;
                                       },
                                       &arg),
                                   timeout);
  }

 private:
  absl::Mutex mutex_;
  std::map<RequestId, std::vector<int32_t>> tokens_;
  std::map<RequestId, EngineOutput> finished_;
};

// Every StepStats the engine reports, for tests that step it on their own thread.
struct Reports {
  std::function<void(const StepStats&)> Callback() {
    return [this](const StepStats& step) { all.push_back(step); };
  }
  std::vector<StepStats> Forward() const {
    std::vector<StepStats> passes;
    for (const StepStats& step : all) {
      if (step.forward) passes.push_back(step);
    }
    return passes;
  }
  std::vector<StepStats> all;
};

EngineRequest Greedy(std::vector<int32_t> prompt, int32_t max_tokens, OutputCallback callback) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.stopping.max_tokens = max_tokens;
  request.on_output = std::move(callback);
  return request;
}

TEST(EngineTest, GeneratesUntilLengthOrEosAndReportsUsage) {
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32), {});
  ASSERT_TRUE(engine.ok());
  Collector collector;
  const RequestId a = *(*engine)->AddRequest(Greedy({3, 4, 5}, 4, collector.Callback()));
  const RequestId b = *(*engine)->AddRequest(Greedy({17}, 10, collector.Callback()));
  while ((*engine)->StepOnce()) {
  }
  EXPECT_EQ(collector.Tokens(a), (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(collector.Final(a)->finish, FinishReason::kLength);
  EXPECT_EQ(collector.Final(a)->prompt_tokens, 3);
  EXPECT_EQ(collector.Final(a)->output_tokens, 4);
  EXPECT_EQ(collector.Tokens(b), (std::vector<int32_t>{18, 19, 20, kEos}));
  EXPECT_EQ(collector.Final(b)->finish, FinishReason::kStop);
  EXPECT_GE(collector.Final(b)->ttft_s, 0);
  const EngineCounts counts = (*engine)->Counts();
  EXPECT_EQ(counts.running + counts.waiting, 0);
  EXPECT_EQ(counts.kv_blocks_free, (*engine)->num_kv_blocks());
}

// The engine's reports are the whole account of what it did: the first one comes at creation
// (the cache's size before any traffic), one when queued work is taken, one per forward pass;
// summed, they give the usage every request reported, and the last one the state it left.
TEST(EngineTest, ReportsEveryIterationAndTheStateItLeaves) {
  Reports reports;
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32), {.on_step = reports.Callback()});
  ASSERT_TRUE(engine.ok());
  ASSERT_EQ(reports.all.size(), 1u);
  EXPECT_FALSE(reports.all[0].forward);
  EXPECT_EQ(reports.all[0].kv_blocks_total, (*engine)->num_kv_blocks());
  EXPECT_EQ(reports.all[0].kv_blocks_free, (*engine)->num_kv_blocks());
  Collector collector;
  const RequestId a = *(*engine)->AddRequest(Greedy({3, 4, 5}, 4, collector.Callback()));
  const RequestId b = *(*engine)->AddRequest(Greedy({17, 18}, 2, collector.Callback()));
  int64_t passes = 0;
  while ((*engine)->StepOnce()) ++passes;
  ++passes;  // the last call's pass ended the work
  // Creation, the adds taken, then the passes.
  ASSERT_EQ(reports.all.size(), 2u + passes);
  EXPECT_FALSE(reports.all[1].forward);
  EXPECT_EQ(reports.all[1].waiting, 2);
  EXPECT_EQ((*engine)->Counts().steps, passes);
  int64_t prompt = 0, generated = 0, queries = 0;
  for (const StepStats& step : reports.Forward()) {
    EXPECT_FALSE(step.failed);
    EXPECT_GT(step.num_seqs, 0);
    // The prefill pass computes both prompts; every later one a token per request.
    EXPECT_EQ(step.num_tokens, step.prompt_tokens > 0 ? step.prompt_tokens : step.num_seqs);
    EXPECT_NEAR(step.duration_s, step.forward_s + step.overhead_s, 1e-9);
    prompt += step.prompt_tokens;
    generated += step.generated_tokens;
    queries += step.prefix_cache_queries;
  }
  EXPECT_EQ(prompt, collector.Final(a)->prompt_tokens + collector.Final(b)->prompt_tokens);
  EXPECT_EQ(generated, collector.Final(a)->output_tokens + collector.Final(b)->output_tokens);
  EXPECT_EQ(queries, 5) << "every prompt token is looked up in the prefix cache once";
  const StepStats& last = reports.all.back();
  EXPECT_EQ(last.running + last.waiting, 0);
  EXPECT_EQ(last.kv_blocks_free, last.kv_blocks_total);
}

// A request streaming its first token runs: it no longer counts against max_waiting, and a new
// request is admitted (the waiting count used to be refreshed only at the end of the step, after
// the outputs, so that a client could see its first token and still be refused as overloaded by
// its own request; seen in the sanitizer build's slower steps).
TEST(EngineTest, ARequestStreamingItsFirstTokenNoLongerCountsAsWaiting) {
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32), {.max_waiting = 1});
  ASSERT_TRUE(engine.ok());
  Engine* const e = engine->get();
  int32_t waiting_at_first_token = -1;
  absl::Status second_admitted = absl::UnknownError("not tried");
  Collector collector;
  OutputCallback collect = collector.Callback();
  const RequestId first =
      *e->AddRequest(Greedy({3, 4, 5}, 4, [&, collect](const EngineOutput& output) {
        if (waiting_at_first_token < 0) {
          waiting_at_first_token = e->Counts().waiting;
          second_admitted = e->AddRequest(Greedy({7}, 2, collect)).status();
        }
        collect(output);
      }));
  while (e->StepOnce()) {
  }
  EXPECT_EQ(waiting_at_first_token, 0);
  EXPECT_TRUE(second_admitted.ok()) << second_admitted;
  EXPECT_EQ(collector.Final(first)->finish, FinishReason::kLength);
}

TEST(EngineTest, ReportsPrefixCacheEventsInTheStepThatMadeThem) {
  Reports reports;
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32), {.on_step = reports.Callback()});
  ASSERT_TRUE(engine.ok());
  Collector collector;
  // 9 prompt tokens + 3 generated: blocks of 4 fill as tokens are computed.
  (void)*(*engine)->AddRequest(Greedy({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3, collector.Callback()));
  while ((*engine)->StepOnce()) {
  }
  const std::vector<StepStats> passes = reports.Forward();
  ASSERT_FALSE(passes.empty());
  // Tokens 0-7 are computed by the prefill: 2 full blocks, stored in the first pass's report.
  ASSERT_EQ(passes[0].cache_events.size(), 1u);
  EXPECT_EQ(passes[0].cache_events[0].kind, PrefixCacheEvent::Kind::kStored);
  EXPECT_EQ(passes[0].cache_events[0].block_hashes.size(), 2u);
  // Tokens 8-10 fill no further block of 4.
  for (size_t i = 1; i < passes.size(); ++i) EXPECT_TRUE(passes[i].cache_events.empty()) << i;
}

TEST(EngineTest, RejectsBadRequestsUpFront) {
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32), {});
  ASSERT_TRUE(engine.ok());
  Collector collector;
  auto expect = [&](EngineRequest request, const std::string& fragment) {
    const auto added = (*engine)->AddRequest(std::move(request));
    ASSERT_FALSE(added.ok()) << fragment;
    EXPECT_EQ(added.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(added.status().message().find(fragment), absl::string_view::npos)
        << added.status().message();
  };
  auto bad_temperature = Greedy({1}, 2, collector.Callback());
  bad_temperature.sampling.temperature = -1;
  expect(std::move(bad_temperature), "temperature");
  expect(Greedy({1, kVocab}, 2, collector.Callback()), "32");
  expect(Greedy({}, 2, collector.Callback()), "at least one token");
  expect(Greedy(std::vector<int32_t>(60, 1), 10, collector.Callback()), "context of 64");
  expect(Greedy({1}, 2, nullptr), "callback");
  // max_tokens 0 means "to the end of the context".
  EngineRequest to_the_end = Greedy({21}, 0, collector.Callback());
  to_the_end.stopping.ignore_eos = true;
  const RequestId id = *(*engine)->AddRequest(std::move(to_the_end));
  while ((*engine)->StepOnce()) {
  }
  EXPECT_EQ(collector.Final(id)->output_tokens, 63);
}

TEST(EngineTest, AbortFreesBlocksAndBackendFailureEndsTheStepsRequests) {
  Reports reports;
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32, /*fail_at_call=*/2),
                               {.on_step = reports.Callback()});
  ASSERT_TRUE(engine.ok());
  Collector collector;
  const RequestId a = *(*engine)->AddRequest(Greedy({1, 2, 3, 4, 5}, 20, collector.Callback()));
  const RequestId b = *(*engine)->AddRequest(Greedy({7}, 20, collector.Callback()));
  (*engine)->StepOnce();
  (*engine)->StepOnce();
  (*engine)->AbortRequest(a);
  (*engine)->StepOnce();  // takes the abort, then the 3rd forward fails for b
  EXPECT_EQ(collector.Final(a)->finish, FinishReason::kAbort);
  EXPECT_EQ(collector.Tokens(a).size(), 2u);
  EXPECT_EQ(collector.Final(b)->finish, FinishReason::kError);
  EXPECT_EQ(collector.Final(b)->error.message(), "device lost");
  const StepStats& failed = reports.all.back();
  EXPECT_TRUE(failed.forward && failed.failed);
  ASSERT_FALSE(failed.cache_events.empty());
  EXPECT_EQ(failed.cache_events.back().kind, PrefixCacheEvent::Kind::kCleared)
      << "a failed step's blocks are not reused";
  EXPECT_FALSE((*engine)->StepOnce());
  (*engine)->AbortRequest(b);  // already finished: ignored
  EXPECT_FALSE((*engine)->StepOnce());
}

TEST(EngineTest, SeededSamplingIsIndependentOfTheBatch) {
  auto run = [](int others) {
    auto engine = Engine::Create(std::make_unique<FakeBackend>(64), {});
    Collector collector;
    EngineRequest request = Greedy({5}, 8, collector.Callback());
    request.sampling.temperature = 5.0f;  // flat enough that the seed matters
    request.sampling.seed = 1234;
    request.stopping.ignore_eos = true;
    for (int i = 0; i < others; ++i) {
      EngineRequest other = Greedy({static_cast<int32_t>(1 + i % 9)}, 3 + i, collector.Callback());
      other.sampling.temperature = 1.0f;
      (void)(*engine)->AddRequest(std::move(other));
    }
    const RequestId id = *(*engine)->AddRequest(std::move(request));
    while ((*engine)->StepOnce()) {
    }
    return collector.Tokens(id);
  };
  const std::vector<int32_t> alone = run(0);
  EXPECT_EQ(alone.size(), 8u) << ::testing::PrintToString(alone);
  EXPECT_EQ(run(1), alone);
  EXPECT_EQ(run(3), alone);
  EXPECT_EQ(run(7), alone);
}

TEST(EngineTest, ThreadedEngineServesConcurrentClientsAndIdles) {
  auto engine = Engine::Create(std::make_unique<FakeBackend>(64), {.max_num_seqs = 4});
  ASSERT_TRUE(engine.ok());
  (*engine)->Start();
  Collector collector;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE((*engine)->AddRequest(Greedy({1 + c, 2 + i}, 6, collector.Callback())).ok());
      }
    });
  }
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(collector.WaitForFinished(20, absl::Seconds(30)));
  for (RequestId id = 1; id <= 20; ++id) EXPECT_EQ(collector.Tokens(id).size(), 6u) << id;
  // Callbacks run inside the step; its load snapshot is published just after. Wait for the
  // snapshot of the last step (nothing running or waiting) before counting steps.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*engine)->Counts().running + (*engine)->Counts().waiting > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const int64_t steps = (*engine)->Counts().steps;
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ((*engine)->Counts().steps, steps) << "an idle engine runs no steps";
  // Work added after idling wakes it up.
  ASSERT_TRUE((*engine)->AddRequest(Greedy({9}, 2, collector.Callback())).ok());
  EXPECT_TRUE(collector.WaitForFinished(21, absl::Seconds(30)));
}

TEST(EngineTest, TimingsAndReportTimesFollowTheEngineClock) {
  ::llmserve::testing::SimulatedClock clock;
  Reports reports;
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32),
                               {.on_step = reports.Callback(), .clock = &clock});
  const absl::Time start = clock.Now();
  ASSERT_TRUE(engine.ok());
  Collector collector;
  const RequestId id = *(*engine)->AddRequest(Greedy({3, 4, 5}, 4, collector.Callback()));
  // Scheduled (and its first token sampled) 2 s after it arrived, then a token a second.
  clock.Advance(absl::Seconds(2));
  (*engine)->StepOnce();
  for (int i = 0; i < 3; ++i) {
    clock.Advance(absl::Seconds(1));
    (*engine)->StepOnce();
  }
  ASSERT_TRUE(collector.Final(id).has_value());
  EXPECT_DOUBLE_EQ(collector.Final(id)->queue_s, 2);
  EXPECT_DOUBLE_EQ(collector.Final(id)->ttft_s, 2);
  EXPECT_DOUBLE_EQ(collector.Final(id)->total_s, 5);
  const std::vector<StepStats> passes = reports.Forward();
  ASSERT_EQ(passes.size(), 4u);
  for (size_t i = 0; i < passes.size(); ++i) {
    EXPECT_EQ(passes[i].time, start + absl::Seconds(2 + i)) << i;
    EXPECT_EQ(passes[i].duration_s, 0) << "the simulated clock stands still within a step";
  }
}

TEST(EngineTest, WaitForStepsWakesWhenAStepEndsAndOtherwiseAtItsDeadline) {
  auto engine = Engine::Create(std::make_unique<FakeBackend>(32), {});
  ASSERT_TRUE(engine.ok());
  const int64_t before = (*engine)->Counts().steps;
  EXPECT_EQ((*engine)->WaitForSteps(before + 1, absl::Now() + absl::Milliseconds(20)).steps, before)
      << "nothing steps the loop: the wait ends at its deadline";
  Collector collector;
  const absl::StatusOr<RequestId> id = (*engine)->AddRequest(Greedy({3}, 2, collector.Callback()));
  ASSERT_TRUE(id.ok());
  std::thread stepper([&] {
    while ((*engine)->StepOnce()) {
    }
  });
  EXPECT_GE((*engine)->WaitForSteps(before + 1, absl::Now() + absl::Seconds(30)).steps, before + 1);
  stepper.join();
  EXPECT_TRUE(collector.Final(*id).has_value());
}

TEST(EngineTest, DestroyingTheEngineAbortsLiveRequests) {
  Collector collector;
  RequestId id;
  {
    auto engine = Engine::Create(std::make_unique<FakeBackend>(64), {});
    id = *(*engine)->AddRequest(Greedy({1}, 50, collector.Callback()));
    (*engine)->StepOnce();
  }
  ASSERT_TRUE(collector.Final(id).has_value());
  EXPECT_EQ(collector.Final(id)->finish, FinishReason::kAbort);
}

TEST(EngineTest, RunsTheCpuBackendEndToEnd) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = c.max_model_len = 128;
  c.eos_token_ids = {0};
  const ::llmserve::testing::ScopedTempDir temp("engine_test_model");
  const std::string& dir = temp.path();
  ASSERT_TRUE(WriteRandomModel(c, {.seed = 3, .scale = 0.3f}, dir).ok());
  auto files = ModelFiles::Open(dir);
  ASSERT_TRUE(files.ok());
  auto weights = LoadModelWeights(**files, c, DType::kF32);
  ASSERT_TRUE(weights.ok());
  auto backend = CpuBackend::Create(*std::move(weights), {.kv_cache_bytes = 1 << 20});
  ASSERT_TRUE(backend.ok());
  Reports reports;
  auto engine = Engine::Create(*std::move(backend),
                               {.max_num_batched_tokens = 16, .on_step = reports.Callback()});
  ASSERT_TRUE(engine.ok());
  Collector collector;
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt(5 + 7 * i);
    for (size_t t = 0; t < prompt.size(); ++t)
      prompt[t] = static_cast<int32_t>(1 + (t * 7 + i) % 63);
    EngineRequest request = Greedy(prompt, 12, collector.Callback());
    request.stopping.ignore_eos = true;
    request.sampling.top_logprobs = 2;
    ids.push_back(*(*engine)->AddRequest(std::move(request)));
  }
  while ((*engine)->StepOnce()) {
  }
  for (RequestId id : ids) {
    ASSERT_TRUE(collector.Final(id).has_value());
    EXPECT_EQ(collector.Final(id)->finish, FinishReason::kLength);
    EXPECT_EQ(collector.Tokens(id).size(), 12u);
  }
  double forward_s = 0;
  for (const StepStats& step : reports.Forward()) forward_s += step.forward_s;
  EXPECT_GT(forward_s, 0);
}

}  // namespace
}  // namespace llmserve::worker
