// DraftModelProposer against a fake draft model whose every prediction depends on the whole
// history it reads back through its paged cache: drafts equal the model's greedy continuation of
// the request's tokens only if the proposer's cache holds exactly those tokens, so a stale slot, a
// wrong rollback or a wrong position shows up as a wrong draft. A simulated target accepts random
// prefixes of the drafts, as verification does.

#include "worker/speculative/draft_model_proposer.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "common/status/status_macros.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

constexpr int32_t kVocab = 40;
constexpr int32_t kEos = 0;
constexpr int32_t kBlockSize = 4;

// Never EOS, except after kEosTrigger.
constexpr int32_t kEosTrigger = 7;

int32_t NextToken(const std::vector<int32_t>& history) {
  if (history.back() == kEosTrigger) return kEos;
  uint64_t hash = 1469598103934665603ull;
  for (int32_t token : history) hash = (hash ^ static_cast<uint64_t>(token)) * 1099511628211ull;
  return 1 + static_cast<int32_t>((hash >> 17) % (kVocab - 1));
}

// The model's greedy continuation of `tokens`, `n` tokens long, stopping after EOS.
std::vector<int32_t> Reference(std::vector<int32_t> tokens, int32_t n) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < n && (out.empty() || out.back() != kEos)) {
    out.push_back(NextToken(tokens));
    tokens.push_back(out.back());
  }
  return out;
}

class PagedHistoryBackend : public Backend {
 public:
  PagedHistoryBackend(int32_t num_blocks, int32_t max_model_len, int32_t vocab = kVocab)
      : num_blocks_(num_blocks), slots_(num_blocks * kBlockSize, -1) {
    config_.vocab_size = vocab;
    config_.max_model_len = config_.max_position_embeddings = max_model_len;
    config_.eos_token_ids = {kEos};
  }
  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return kBlockSize; }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  absl::string_view name() const override { return "paged-history"; }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    if (fail_next_) {
      fail_next_ = false;
      return absl::InternalError("injected failure");
    }
    LLMSERVE_RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, kBlockSize, num_blocks_));
    ++passes_;
    tokens_fed_ += batch.num_tokens();
    out->vocab_size = config_.vocab_size;
    out->row_start.assign(1, 0);
    out->logits.clear();
    for (int32_t s = 0; s < batch.num_seqs(); ++s) {
      const int32_t* table = &batch.block_ids[batch.block_table_start[s]];
      auto slot = [&](int32_t position) {
        return table[position / kBlockSize] * kBlockSize + position % kBlockSize;
      };
      const int32_t begin = batch.query_start[s], end = batch.query_start[s + 1];
      for (int32_t t = begin; t < end; ++t) {
        slots_[slot(batch.num_computed[s] + t - begin)] = batch.token_ids[t];
      }
      const int32_t last = batch.num_computed[s] + end - begin - 1;
      std::vector<int32_t> history;
      for (int32_t p = 0; p <= last; ++p) history.push_back(slots_[slot(p)]);
      std::vector<float> row(config_.vocab_size, 0.0f);
      row[NextToken(history)] = 1.0f;
      out->logits.insert(out->logits.end(), row.begin(), row.end());
      out->row_start.push_back(s + 1);
    }
    return absl::OkStatus();
  }

  int64_t passes() const { return passes_; }
  int64_t tokens_fed() const { return tokens_fed_; }
  void FailNext() { fail_next_ = true; }

 private:
  ModelConfig config_;
  int32_t num_blocks_;
  std::vector<int32_t> slots_;
  int64_t passes_ = 0;
  int64_t tokens_fed_ = 0;
  bool fail_next_ = false;
};

ModelConfig Target() {
  ModelConfig config;
  config.vocab_size = kVocab;
  config.eos_token_ids = {kEos};
  return config;
}

struct Fixture {
  PagedHistoryBackend* backend = nullptr;
  std::unique_ptr<DraftModelProposer> proposer;
};

Fixture Make(int32_t num_blocks, int32_t max_model_len = 1024, int32_t budget = 512) {
  auto backend = std::make_unique<PagedHistoryBackend>(num_blocks, max_model_len);
  Fixture fixture{.backend = backend.get()};
  auto proposer = DraftModelProposer::Create(std::move(backend), Target(), budget);
  EXPECT_TRUE(proposer.ok()) << proposer.status();
  if (proposer.ok()) fixture.proposer = *std::move(proposer);
  return fixture;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int32_t n) {
  std::vector<int32_t> tokens;
  // Never the EOS trigger, so that drafts run their full length unless a test wants otherwise.
  for (int32_t i = 0; i < n; ++i) tokens.push_back(8 + static_cast<int32_t>(rng() % (kVocab - 8)));
  return tokens;
}

TEST(DraftModelProposerTest, DraftsAreTheDraftModelsGreedyContinuation) {
  Fixture f = Make(64);
  const std::vector<int32_t> prompt = {9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  auto drafts = f.proposer->Propose({{.id = 1, .tokens = prompt, .max_drafts = 3}});
  ASSERT_TRUE(drafts.ok()) << drafts.status();
  ASSERT_EQ(drafts->size(), 1u);
  EXPECT_EQ((*drafts)[0], Reference(prompt, 3));
  // The prompt once, then the first two drafts: the third is decoded, not fed.
  EXPECT_EQ(f.backend->tokens_fed(), 10 + 2);
  EXPECT_EQ(f.backend->passes(), 3);
}

// Many requests, each step a random number of drafts accepted and a token of the target's own
// (equal to the next draft now and then, as a sampled token can be): every draft is the model's
// continuation of the request's tokens at the time, and each step feeds only what changed.
TEST(DraftModelProposerTest, FollowsRequestsThroughRandomVerifications) {
  std::mt19937 rng(11);
  Fixture f = Make(/*num_blocks=*/400);
  struct Sim {
    RequestId id;
    std::vector<int32_t> tokens;
  };
  std::vector<Sim> sims;
  int64_t expected_fed_bound = 0;
  for (RequestId id = 1; id <= 6; ++id) {
    sims.push_back({id, RandomTokens(rng, 3 + static_cast<int32_t>(rng() % 30))});
    expected_fed_bound += static_cast<int64_t>(sims.back().tokens.size());
  }
  int64_t drafted = 0;
  for (int step = 0; step < 60; ++step) {
    std::vector<DraftQuery> queries;
    std::vector<size_t> which;
    for (size_t i = 0; i < sims.size(); ++i) {
      if (rng() % 5 == 0) continue;  // not decoding this step (not drafting, or no room)
      queries.push_back({.id = sims[i].id,
                         .tokens = sims[i].tokens,
                         .max_drafts = 1 + static_cast<int32_t>(rng() % 5)});
      which.push_back(i);
    }
    auto drafts = f.proposer->Propose(queries);
    ASSERT_TRUE(drafts.ok()) << drafts.status();
    for (size_t q = 0; q < queries.size(); ++q) {
      Sim& sim = sims[which[q]];
      const std::vector<int32_t>& own = (*drafts)[q];
      ASSERT_EQ(own, Reference(sim.tokens, queries[q].max_drafts))
          << "step " << step << " request " << sim.id;
      drafted += static_cast<int64_t>(own.size());
      // Verification: accept a prefix, then the target's token.
      const size_t accepted = rng() % (own.size() + 1);
      sim.tokens.insert(sim.tokens.end(), own.begin(), own.begin() + accepted);
      const bool agrees = accepted < own.size() && rng() % 3 == 0;
      sim.tokens.push_back(agrees ? own[accepted] : 8 + static_cast<int32_t>(rng() % (kVocab - 8)));
      expected_fed_bound += static_cast<int64_t>(accepted) + 1 + static_cast<int64_t>(own.size());
    }
    // Blocks held are those of the tokens and at most 4 fed drafts: rollbacks free the rest.
    int32_t needed = 0;
    for (const Sim& sim : sims) {
      needed += (static_cast<int32_t>(sim.tokens.size()) + 4 + kBlockSize - 1) / kBlockSize;
    }
    ASSERT_LE(400 - 1 - f.proposer->free_blocks(), needed) << "step " << step;
  }
  EXPECT_GT(drafted, 500);
  EXPECT_EQ(f.proposer->num_tracked(), 6);
  // Nothing is fed twice: at most the prompts, each step's new tokens and the fed drafts.
  EXPECT_LE(f.backend->tokens_fed(), expected_fed_bound);
  for (const Sim& sim : sims) f.proposer->Release(sim.id);
  EXPECT_EQ(f.proposer->num_tracked(), 0);
  EXPECT_EQ(f.proposer->free_blocks(), 400 - 1);
}

TEST(DraftModelProposerTest, LongPromptsCatchUpInChunksUnderTheBudget) {
  std::mt19937 rng(3);
  Fixture f = Make(64, 1024, /*budget=*/32);
  const std::vector<int32_t> prompt = RandomTokens(rng, 100);
  const std::vector<int32_t> other = RandomTokens(rng, 5);
  for (int call = 0; call < 3; ++call) {
    auto drafts = f.proposer->Propose({{.id = 1, .tokens = prompt, .max_drafts = 3}});
    ASSERT_TRUE(drafts.ok());
    EXPECT_TRUE((*drafts)[0].empty()) << "call " << call;
  }
  EXPECT_EQ(f.backend->tokens_fed(), 96);
  // The budget left after the last 4 tokens lets a short request draft in the same call.
  auto drafts = f.proposer->Propose(
      {{.id = 1, .tokens = prompt, .max_drafts = 3}, {.id = 2, .tokens = other, .max_drafts = 2}});
  ASSERT_TRUE(drafts.ok());
  EXPECT_EQ((*drafts)[0], Reference(prompt, 3));
  EXPECT_EQ((*drafts)[1], Reference(other, 2));
}

TEST(DraftModelProposerTest, EvictsRequestsNotDraftingWhenTheCacheIsFull) {
  std::mt19937 rng(5);
  // 9 blocks of 4 tokens, one of them the null block: 32 tokens.
  Fixture f = Make(9);
  const std::vector<int32_t> a = RandomTokens(rng, 20), b = RandomTokens(rng, 20);
  auto first = f.proposer->Propose({{.id = 1, .tokens = a, .max_drafts = 2}});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0], Reference(a, 2));
  auto second = f.proposer->Propose({{.id = 2, .tokens = b, .max_drafts = 2}});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)[0], Reference(b, 2));
  EXPECT_EQ(f.proposer->num_tracked(), 1);
  // Both at once do not fit: one drafts, the other waits; nothing breaks.
  auto both = f.proposer->Propose(
      {{.id = 1, .tokens = a, .max_drafts = 2}, {.id = 2, .tokens = b, .max_drafts = 2}});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ((*both)[0].empty() + (*both)[1].empty(), 1);
  if (!(*both)[0].empty()) {
    EXPECT_EQ((*both)[0], Reference(a, 2));
  }
  if (!(*both)[1].empty()) {
    EXPECT_EQ((*both)[1], Reference(b, 2));
  }
  f.proposer->Release(1);
  f.proposer->Release(2);
  EXPECT_EQ(f.proposer->free_blocks(), 8);
}

TEST(DraftModelProposerTest, DraftsStayWithinTheDraftModelsContext) {
  std::mt19937 rng(7);
  Fixture f = Make(64, /*max_model_len=*/16);
  const std::vector<int32_t> fifteen = RandomTokens(rng, 15);
  auto drafts = f.proposer->Propose({{.id = 1, .tokens = fifteen, .max_drafts = 4}});
  ASSERT_TRUE(drafts.ok()) << drafts.status();
  EXPECT_EQ((*drafts)[0], Reference(fifteen, 2));
  std::vector<int32_t> seventeen = fifteen;
  seventeen.insert(seventeen.end(), {9, 9});
  drafts = f.proposer->Propose({{.id = 1, .tokens = seventeen, .max_drafts = 4}});
  ASSERT_TRUE(drafts.ok()) << drafts.status();
  EXPECT_TRUE((*drafts)[0].empty());
  EXPECT_EQ(f.proposer->num_tracked(), 0);
}

TEST(DraftModelProposerTest, DraftsEndAtEos) {
  Fixture f = Make(64);
  const std::vector<int32_t> tokens = {9, 10, kEosTrigger};
  auto drafts = f.proposer->Propose({{.id = 1, .tokens = tokens, .max_drafts = 4}});
  ASSERT_TRUE(drafts.ok());
  EXPECT_EQ((*drafts)[0], std::vector<int32_t>{kEos});
}

TEST(DraftModelProposerTest, ABackendFailureDropsEveryStateAndTheNextCallRecovers) {
  std::mt19937 rng(9);
  Fixture f = Make(64);
  const std::vector<int32_t> a = RandomTokens(rng, 12), b = RandomTokens(rng, 9);
  ASSERT_TRUE(f.proposer->Propose({{.id = 1, .tokens = a, .max_drafts = 3}}).ok());
  f.backend->FailNext();
  const auto failed = f.proposer->Propose({{.id = 2, .tokens = b, .max_drafts = 3}});
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(f.proposer->num_tracked(), 0);
  EXPECT_EQ(f.proposer->free_blocks(), 63);
  auto drafts = f.proposer->Propose(
      {{.id = 1, .tokens = a, .max_drafts = 3}, {.id = 2, .tokens = b, .max_drafts = 3}});
  ASSERT_TRUE(drafts.ok());
  EXPECT_EQ((*drafts)[0], Reference(a, 3));
  EXPECT_EQ((*drafts)[1], Reference(b, 3));
}

TEST(DraftModelProposerTest, CreateRefusesADraftWithALargerVocabulary) {
  auto proposer = DraftModelProposer::Create(
      std::make_unique<PagedHistoryBackend>(64, 1024, kVocab + 1), Target(), 512);
  ASSERT_FALSE(proposer.ok());
  EXPECT_EQ(proposer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(proposer.status().message().find("vocabulary"), absl::string_view::npos);
  EXPECT_FALSE(
      DraftModelProposer::Create(std::make_unique<PagedHistoryBackend>(64, 1024), Target(), 0)
          .ok());
}

}  // namespace
}  // namespace llmserve::worker
