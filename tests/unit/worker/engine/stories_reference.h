// The stories260K reference ($LLMSERVE_TESTDATA/models/stories260K/expected/reference_greedy.jsonl)
// and the two ways the engine tests check a format of that model against it: each prompt alone and
// all of them batched in one engine. Shared by the GGUF and llama2.c checkpoint tests, which load
// the same weights from different files. Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_STORIES_REFERENCE_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_STORIES_REFERENCE_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/service/load_accountant.h"

namespace llmserve::worker::testing {

// The checkpoint's context length (the models README); bos-200 needs 201 positions.
inline constexpr int64_t kStoriesContext = 512;

struct ReferenceCase {
  std::string name;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
};

// The cases of `stories_dir`/expected/reference_greedy.jsonl (empty when the file is missing).
inline std::vector<ReferenceCase> ReadReference(const std::string& stories_dir) {
  std::vector<ReferenceCase> cases;
  std::ifstream in(stories_dir + "/expected/reference_greedy.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json json = nlohmann::json::parse(line);
    cases.push_back({json["case"].get<std::string>(),
                     json["prompt_ids"].get<std::vector<int32_t>>(),
                     json["greedy_ids"].get<std::vector<int32_t>>()});
  }
  return cases;
}

// A one-thread f32 CPU engine over the stories model at `path`, with its full context.
inline CpuEngineOptions StoriesOptions(const std::string& path) {
  return {.model_dir = path,
          .dtype = DType::kF32,
          .num_threads = 1,
          .kv_cache_bytes = 16 << 20,
          .max_model_len = kStoriesContext};
}

struct ReferenceRun {
  // tokens[w * cases + i]: wave w's case i, as many greedy tokens as its reference (EOS ignored).
  std::vector<std::vector<int32_t>> tokens;
  EngineLoad load;  // once the last wave finished
};

// Every case's greedy tokens from one engine, in `waves` rounds: the first is added before the
// engine starts, so that its first step schedules the cases together; each later one after the
// previous finished, so that it can hit the prefix cache the earlier ones filled.
inline ReferenceRun RunReferenceCases(const CpuEngineOptions& options,
                                      const std::vector<ReferenceCase>& cases, int waves = 1) {
  ReferenceRun run;
  run.tokens.resize(cases.size() * waves);
  LoadAccountant load;
  CpuEngineOptions reporting = options;
  reporting.engine.on_step = [&load](const StepStats& step) { load.Record(step); };
  absl::StatusOr<std::unique_ptr<Engine>> engine = BuildCpuEngine(reporting);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  absl::Mutex mu;
  for (int wave = 0; wave < waves; ++wave) {
    int finished = 0;
    absl::Notification done;
    for (size_t i = 0; i < cases.size(); ++i) {
      EngineRequest request;
      request.prompt = cases[i].prompt;
      request.sampling.temperature = 0;
      request.stopping.max_tokens = static_cast<int32_t>(cases[i].greedy.size());
      request.stopping.ignore_eos = true;
      std::vector<int32_t>* out = &run.tokens[wave * cases.size() + i];
      request.on_output = [&, out](const EngineOutput& output) {
        absl::MutexLock lock(&mu);
        for (const GeneratedToken& t : output.tokens) out->push_back(t.token_id);
        if (output.finish != FinishReason::kNone && ++finished == static_cast<int>(cases.size())) {
          done.Notify();
        }
      };
      EXPECT_TRUE((*engine)->AddRequest(std::move(request)).ok());
    }
    if (wave == 0) (*engine)->Start();
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(120)));
  }
  // Stops the loop before the tokens are read without the lock, and after the last step's report.
  (*engine).reset();
  run.load = load.Load();
  return run;
}

// The greedy tokens of every case, all added before the engine starts so that its first step
// schedules them together (each as long as its reference; EOS ignored).
inline std::vector<std::vector<int32_t>> BatchedGreedyTokens(
    const CpuEngineOptions& options, const std::vector<ReferenceCase>& cases) {
  return RunReferenceCases(options, cases).tokens;
}

// The model at `path` (a format of the stories model in `stories_dir`) gives every reference
// case's greedy ids exactly: each prompt in an engine of its own, or all of them batched in one.
inline void ExpectTheReferenceGreedyIds(const std::string& stories_dir, const std::string& path,
                                        bool batched) {
  const std::vector<ReferenceCase> cases = ReadReference(stories_dir);
  ASSERT_GE(cases.size(), 3u);
  if (batched) {
    const std::vector<std::vector<int32_t>> tokens =
        BatchedGreedyTokens(StoriesOptions(path), cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(tokens[i], cases[i].greedy) << cases[i].name;
    }
    return;
  }
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(GreedyTokens(StoriesOptions(path), c.prompt, static_cast<int32_t>(c.greedy.size())),
              c.greedy);
  }
}

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_STORIES_REFERENCE_H_
