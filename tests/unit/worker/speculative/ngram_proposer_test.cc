#include "worker/speculative/ngram_proposer.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(NgramProposerTest, CopiesWhatFollowedTheLatestEarlierOccurrence) {
  // "3 4" occurred twice before the end; the later one was followed by 9 8.
  const std::vector<int32_t> tokens = {1, 3, 4, 5, 6, 3, 4, 9, 8, 7, 3, 4};
  EXPECT_THAT(ProposeNgramDrafts(tokens, 2, 2, 2), ElementsAre(9, 8));
  EXPECT_THAT(ProposeNgramDrafts(tokens, 2, 2, 3), ElementsAre(9, 8, 7));
}

TEST(NgramProposerTest, PrefersTheLongestMatchOverTheLatest) {
  // The suffix "2 3 4" occurred once (followed by 5); "3 4" alone occurred later (followed by 0).
  const std::vector<int32_t> tokens = {2, 3, 4, 5, 3, 4, 0, 1, 2, 3, 4};
  EXPECT_THAT(ProposeNgramDrafts(tokens, 2, 3, 1), ElementsAre(5));
  // With at most 2-grams, the latest 2-gram wins.
  EXPECT_THAT(ProposeNgramDrafts(tokens, 2, 2, 1), ElementsAre(0));
}

TEST(NgramProposerTest, RunsOnThroughItsOwnProposalOnAPeriodicTail) {
  // The latest earlier "5 6" is followed only by "5 6" before the end; the copy keeps the period.
  const std::vector<int32_t> tokens = {1, 5, 6, 5, 6, 5, 6};
  EXPECT_THAT(ProposeNgramDrafts(tokens, 2, 2, 5), ElementsAre(5, 6, 5, 6, 5));
  const std::vector<int32_t> same = {7, 7, 7};
  EXPECT_THAT(ProposeNgramDrafts(same, 1, 3, 4), ElementsAre(7, 7, 7, 7));
}

TEST(NgramProposerTest, NothingWithoutAMatchOfTheShortestSize) {
  EXPECT_THAT(ProposeNgramDrafts(std::vector<int32_t>{1, 2, 3, 4}, 1, 3, 4), IsEmpty());
  // "3 4" never occurred before; "4" did, but 1-grams are not looked up.
  EXPECT_THAT(ProposeNgramDrafts(std::vector<int32_t>{4, 1, 3, 4}, 2, 3, 4), IsEmpty());
  EXPECT_THAT(ProposeNgramDrafts(std::vector<int32_t>{4, 1, 3, 4}, 1, 3, 2), ElementsAre(1, 3));
  EXPECT_THAT(ProposeNgramDrafts(std::vector<int32_t>{}, 1, 3, 4), IsEmpty());
  EXPECT_THAT(ProposeNgramDrafts(std::vector<int32_t>{5}, 1, 3, 4), IsEmpty());
  EXPECT_THAT(ProposeNgramDrafts(std::vector<int32_t>{5, 5}, 1, 3, 0), IsEmpty());
}

// Against a direct transcription of the definition on random short sequences over a small
// alphabet (so matches of every length occur).
std::vector<int32_t> Reference(const std::vector<int32_t>& t, int min_n, int max_n, int k) {
  const int size = static_cast<int>(t.size());
  for (int n = max_n; n >= min_n; --n) {
    if (size <= n) continue;
    for (int start = size - n - 1; start >= 0; --start) {
      bool match = true;
      for (int i = 0; i < n && match; ++i) match = t[start + i] == t[size - n + i];
      if (!match) continue;
      std::vector<int32_t> extended = t;
      std::vector<int32_t> out;
      for (int j = 0; j < k; ++j) {
        out.push_back(extended[start + n + j]);
        extended.push_back(out.back());
      }
      return out;
    }
  }
  return {};
}

TEST(NgramProposerTest, AgreesWithTheDefinitionOnRandomSequences) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20000; ++trial) {
    const int size = static_cast<int>(rng() % 24);
    const int alphabet = 2 + static_cast<int>(rng() % 4);
    std::vector<int32_t> tokens(size);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % alphabet);
    const int min_n = 1 + static_cast<int>(rng() % 3);
    const int max_n = min_n + static_cast<int>(rng() % 3);
    const int k = 1 + static_cast<int>(rng() % 5);
    ASSERT_EQ(ProposeNgramDrafts(tokens, min_n, max_n, k), Reference(tokens, min_n, max_n, k))
        << "trial " << trial;
  }
}

}  // namespace
}  // namespace llmserve::worker
