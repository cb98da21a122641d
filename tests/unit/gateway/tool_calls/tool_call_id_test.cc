#include "gateway/tool_calls/tool_call_id.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::gateway::tool_calls {
namespace {

TEST(NewToolCallIdTest, ShapedLikeOpenAiAndDistinctAcrossThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ids, t] {
      for (int i = 0; i < kPerThread; ++i) ids[t].push_back(NewToolCallId());
    });
  }
  for (std::thread& thread : threads) thread.join();
  absl::flat_hash_set<std::string> seen;
  for (const auto& list : ids) {
    for (const std::string& id : list) {
      EXPECT_THAT(id, ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
      EXPECT_TRUE(seen.insert(id).second) << id;
    }
  }
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls
