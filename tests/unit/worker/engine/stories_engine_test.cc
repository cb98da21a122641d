// The engine's features on a real trained model (stories260K-f32.gguf, $LLMSERVE_TESTDATA/models):
// none of them may change a greedy token, and on a real model a wrong KV block, position or
// verification shows at once as a different story. Each test checks that the feature did act:
// - chunked prefill: a 130-token real prompt (a reference prompt and the first 119 tokens of its
//   story) in chunks of 8 tokens continues with the reference's next 40 tokens, as in one pass;
// - prefix caching: the three reference cases (each prompt lengthened by the first 40 tokens of
//   its story, so that it fills whole blocks) run twice, the second time from cached blocks (hits
//   counted), and continue the reference both times;
// - preemption: the three cases, each twice, batched in a KV cache too small to hold them together
//   (preemptions counted) still give the reference ids;
// - speculative decoding by n-grams, and by a draft model (the llama2.c checkpoint of the same
//   model in int8 with quantized activations, so that its drafts are sometimes wrong): the
//   reference ids, with drafts accepted (and, for the draft model, some rejected).
// Skips with a message when LLMSERVE_TESTDATA is unset or lacks the models.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/testdata_models.h"
#include "tests/unit/worker/engine/greedy_generation.h"
#include "tests/unit/worker/engine/stories_reference.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {
namespace {

using ::llmserve::testing::ModelsDir;
using ::llmserve::worker::testing::ReadReference;
using ::llmserve::worker::testing::ReferenceCase;
using ::llmserve::worker::testing::ReferenceRun;
using ::llmserve::worker::testing::RunReferenceCases;
using ::llmserve::worker::testing::StoriesOptions;

class StoriesEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ModelsDir("stories260K", &why_);
    if (dir_.empty()) GTEST_SKIP() << why_;
    cases_ = ReadReference(dir_);
    ASSERT_GE(cases_.size(), 3u);
  }
  CpuEngineOptions Options() const { return StoriesOptions(dir_ + "/gguf/stories260K-f32.gguf"); }
  void ExpectTheReference(const ReferenceRun& run) const {
    for (size_t i = 0; i < run.tokens.size(); ++i) {
      EXPECT_EQ(run.tokens[i], cases_[i % cases_.size()].greedy) << cases_[i % cases_.size()].name;
    }
  }

  std::string dir_, why_;
  std::vector<ReferenceCase> cases_;
};

TEST_F(StoriesEngineTest, ChunkedPrefillOfARealPromptContinuesTheStory) {
  const ReferenceCase* longest = &cases_[0];
  for (const ReferenceCase& c : cases_) {
    if (c.greedy.size() > longest->greedy.size()) longest = &c;
  }
  ASSERT_GE(longest->greedy.size(), 160u);
  std::vector<int32_t> prompt = longest->prompt;
  prompt.insert(prompt.end(), longest->greedy.begin(), longest->greedy.begin() + 119);
  const std::vector<int32_t> want(longest->greedy.begin() + 119, longest->greedy.begin() + 159);
  for (const int32_t budget : {8, 2048}) {
    CpuEngineOptions options = Options();
    options.engine.max_num_batched_tokens = budget;
    EXPECT_EQ(testing::GreedyTokens(options, prompt, 40), want)
        << prompt.size() << "-token prompt in chunks of " << budget;
  }
}

TEST_F(StoriesEngineTest, PrefixCachingServesTheSecondRunFromCachedBlocks) {
  // The reference prompts are shorter than a block (nothing to cache): each case's prompt here is
  // its reference prompt and the first 40 tokens of its story, and the rest of the story follows.
  std::vector<ReferenceCase> longer;
  for (const ReferenceCase& c : cases_) {
    ReferenceCase l{c.name, c.prompt, {}};
    l.prompt.insert(l.prompt.end(), c.greedy.begin(), c.greedy.begin() + 40);
    l.greedy.assign(c.greedy.begin() + 40, c.greedy.end());
    longer.push_back(std::move(l));
  }
  const ReferenceRun run = RunReferenceCases(Options(), longer, /*waves=*/2);
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    EXPECT_EQ(run.tokens[i], longer[i % longer.size()].greedy) << longer[i % longer.size()].name;
  }
  // Every prompt's full blocks: 2 or 3 per case in the second wave.
  EXPECT_GE(run.load.prefix_cache_hits, 2 * 16 * 3) << "the second wave hit no cached block";
}

TEST_F(StoriesEngineTest, PreemptionUnderATightKvCacheKeepsEveryStory) {
  CpuEngineOptions options = Options();
  absl::StatusOr<ModelConfig> config = LoadModelConfig(options.model_dir, options.max_model_len);
  ASSERT_TRUE(config.ok()) << config.status();
  // 18 blocks (one kept back: 17 usable, 272 tokens) hold any one case (at most 201 tokens, 13
  // blocks) but not the six requests below together: after 50 tokens each holds 4 blocks.
  options.kv_cache_bytes = 18 * CpuBackend::KvBytesPerBlock(*config, options.block_size);
  std::vector<ReferenceCase> twice = cases_;
  twice.insert(twice.end(), cases_.begin(), cases_.end());
  const ReferenceRun run = RunReferenceCases(options, twice);
  ExpectTheReference(run);
  EXPECT_EQ(run.load.kv_blocks_total, 17);
  EXPECT_GT(run.load.preemptions, 0) << "the cache was large enough for all: nothing preempted";
}

TEST_F(StoriesEngineTest, NgramSpeculationAcceptsDraftsAndKeepsEveryStory) {
  CpuEngineOptions options = Options();
  options.engine.speculative = {.method = SpeculativeMethod::kNgram, .num_speculative_tokens = 3};
  const ReferenceRun run = RunReferenceCases(options, cases_);
  ExpectTheReference(run);
  EXPECT_GT(run.load.spec_accepted_tokens, 0) << "no draft was accepted";
}

TEST_F(StoriesEngineTest, ADraftModelInInt8AcceptsSomeDraftsRejectsOthersAndKeepsEveryStory) {
  CpuEngineOptions options = Options();
  options.engine.speculative = {.method = SpeculativeMethod::kDraft,
                                .num_speculative_tokens = 3,
                                .disable_batch_size = 0,
                                .model = dir_ + "/stories260K.bin",
                                .model_int8 = true};
  const ReferenceRun run = RunReferenceCases(options, cases_);
  ExpectTheReference(run);
  EXPECT_GT(run.load.spec_accepted_tokens, 0) << "no draft was accepted";
  EXPECT_LT(run.load.spec_accepted_tokens, run.load.spec_draft_tokens)
      << "every draft was accepted: the check saw no rejection";
}

}  // namespace
}  // namespace llmserve::worker
