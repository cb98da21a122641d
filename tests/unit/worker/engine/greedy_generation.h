// Greedy tokens from a whole engine built over a model directory, for tests that compare what two
// models (or two weight formats of one) generate. Header-only, for gtest tests.

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_GREEDY_GENERATION_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_GREEDY_GENERATION_H_

#include <cstdint>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/engine/cpu_engine_builder.h"

namespace llmserve::worker::testing {

// `max_tokens` greedy tokens after `prompt` (EOS ignored), or fewer with a test failure when the
// engine cannot be built or does not finish within a minute.
inline std::vector<int32_t> GreedyTokens(const CpuEngineOptions& options,
                                         const std::vector<int32_t>& prompt, int32_t max_tokens) {
  auto engine = BuildCpuEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  (*engine)->Start();
  std::vector<int32_t> tokens;
  absl::Notification done;
  EngineRequest request;
  request.prompt = prompt;
  request.sampling.temperature = 0;
  request.stopping.max_tokens = max_tokens;
  request.stopping.ignore_eos = true;
  request.on_output = [&](const EngineOutput& output) {
    for (const GeneratedToken& t : output.tokens) tokens.push_back(t.token_id);
    if (output.finish != FinishReason::kNone) done.Notify();
  };
  EXPECT_TRUE((*engine)->AddRequest(std::move(request)).ok());
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return tokens;
}

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_GREEDY_GENERATION_H_
