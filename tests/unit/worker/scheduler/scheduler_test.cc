// Table-driven scheduler tests: crafted scenarios with the exact plan expected at every step,
// then a randomized simulation checking liveness and FCFS fairness. No backend: "sampled" tokens
// are made up, as a fake backend would.

#include "worker/scheduler/scheduler.h"

#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/prefix_cache/block_hash.h"
#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

constexpr int32_t kEos = 2;

std::unique_ptr<Request> MakeRequest(RequestId id, int32_t prompt_len, int32_t max_tokens,
                                     int32_t priority = 0, int32_t first_token = 100) {
  auto request = std::make_unique<Request>();
  request->id = id;
  for (int32_t i = 0; i < prompt_len; ++i) request->tokens.push_back(first_token + i);
  request->num_prompt_tokens = prompt_len;
  request->stopping.max_tokens = max_tokens;
  request->priority = priority;
  return request;
}

// "id:computed+new" for each scheduled request, with "*" when it samples; then "P:id" for
// preemptions.
std::string Plan(const SchedulerOutput& out) {
  std::vector<std::string> parts;
  for (const ScheduledRequest& s : out.scheduled) {
    parts.push_back(absl::StrCat(s.id, ":", s.num_computed_tokens, "+", s.num_new_tokens,
                                 s.samples ? "*" : ""));
  }
  for (RequestId id : out.preempted) parts.push_back(absl::StrCat("P:", id));
  return absl::StrJoin(parts, " ");
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(int32_t num_blocks, int32_t block_size, int32_t budget, int32_t max_seqs,
            int32_t max_model_len, SchedulerConfig::Policy policy = SchedulerConfig::Policy::kFcfs,
            int32_t max_loras = 0) {
    kv_ = std::make_unique<KvCacheManager>(num_blocks, block_size, true);
    SchedulerConfig config;
    config.max_num_batched_tokens = budget;
    config.max_num_seqs = max_seqs;
    config.max_model_len = max_model_len;
    config.policy = policy;
    config.eos_token_ids = {kEos};
    config.max_loras = max_loras;
    scheduler_ = std::make_unique<Scheduler>(config, kv_.get());
  }

  // Runs one step sampling `token` for everyone; returns the plan and the finished ids.
  std::string Step(int32_t token = 7, std::vector<RequestId>* finished = nullptr) {
    const SchedulerOutput out = scheduler_->Schedule();
    const std::vector<int32_t> sampled(out.scheduled.size(), token);
    for (const RequestOutput& r : scheduler_->Update(out, sampled)) {
      if (IsFinished(r.status) && finished != nullptr) finished->push_back(r.id);
    }
    return Plan(out);
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, AtMostMaxLorasAdaptersRunAndTheOthersWaitWithoutBlockingTheQueue) {
  Init(64, 4, 64, 8, 64, SchedulerConfig::Policy::kFcfs, /*max_loras=*/1);
  const auto add = [this](RequestId id, int64_t lora, int32_t max_tokens) {
    std::unique_ptr<Request> request = MakeRequest(id, 3, max_tokens);
    request->lora_id = lora;
    ASSERT_TRUE(scheduler_->AddRequest(std::move(request)).ok());
  };
  add(1, 7, 2);  // adapter 7 takes the one slot
  add(2, 8, 1);  // adapter 8 must wait...
  add(3, 7, 1);  // ... but the same adapter, and the base model, pass it
  add(4, 0, 1);
  std::vector<RequestId> finished;
  EXPECT_EQ(Step(7, &finished), "1:0+3* 3:0+3* 4:0+3*");
  EXPECT_EQ(finished, (std::vector<RequestId>{3, 4}));
  EXPECT_EQ(Step(7, &finished), "1:3+1*");  // 7 still runs: 8 waits
  // Adapter 7 is gone: 8 runs.
  EXPECT_EQ(Step(7, &finished), "2:0+3*");
  EXPECT_EQ(finished, (std::vector<RequestId>{3, 4, 1, 2}));
}

TEST_F(SchedulerTest, ChunkedPrefillThenDecodeUnderOneTokenBudget) {
  Init(20, 4, 8, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 10, 3)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 3, 2)).ok());
  std::vector<RequestId> finished;
  const std::vector<std::string> expected = {
      "1:0+8",           // the budget takes 8 of request 1's 10 prompt tokens
      "1:8+2* 2:0+3*",   // running first, then the waiting request is admitted
      "1:10+1* 2:3+1*",  // decodes of the sampled tokens; request 2 finishes (max_tokens 2)
      "1:11+1*",         // request 1 finishes (max_tokens 3)
  };
  for (size_t step = 0; step < expected.size(); ++step) {
    EXPECT_EQ(Step(7, &finished), expected[step]) << "step " << step;
  }
  EXPECT_EQ(finished, (std::vector<RequestId>{2, 1}));
  EXPECT_FALSE(scheduler_->HasWork());
  EXPECT_EQ(kv_->Stats().free_blocks, 19);
}

TEST_F(SchedulerTest, ThePlanCarriesTheTokensAndBlockTablesToCompute) {
  Init(20, 4, 8, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 10, 3)).ok());
  SchedulerOutput out = scheduler_->Schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].new_token_ids,
            (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(out.scheduled[0].num_new_prompt_tokens, 8);
  EXPECT_EQ(out.scheduled[0].block_table, kv_->BlockTable(1));
  EXPECT_EQ(out.scheduled[0].block_table.size(), 2u);
  scheduler_->Update(out, std::vector<int32_t>{7});
  out = scheduler_->Schedule();  // the prompt's last 2 tokens: a third block
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].new_token_ids, (std::vector<int32_t>{108, 109}));
  EXPECT_EQ(out.scheduled[0].num_new_prompt_tokens, 2);
  EXPECT_EQ(out.scheduled[0].block_table.size(), 3u);
  scheduler_->Update(out, std::vector<int32_t>{7});
  out = scheduler_->Schedule();  // a decode of the sampled token
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].new_token_ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(out.scheduled[0].num_new_prompt_tokens, 0);
}

TEST_F(SchedulerTest, NewestRunningRequestIsPreemptedAndRecomputedLater) {
  // 4 usable blocks of 2 tokens: two requests of 3-token prompts fit, but not their growth.
  Init(5, 2, 16, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 3, 4)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 3, 4, 0, 200)).ok());
  std::vector<RequestId> finished;
  const std::vector<std::string> expected = {
      "1:0+3* 2:0+3*",  // 2 blocks each
      "1:3+1* 2:3+1*",  // 4 tokens each: still 2 blocks each
      "1:4+1* P:2",     // request 1 needs a 3rd block: request 2 (newest) is preempted, its
                        // tail block freed first and so recycled for request 1 at once
      "1:5+1*",         // request 2 does not fit yet; request 1 finishes (max_tokens 4)
      "2:2+3*",         // request 2's first block is still cached: it recomputes from token 2
      "2:5+1*",         // and finishes
  };
  for (size_t step = 0; step < expected.size(); ++step) {
    EXPECT_EQ(Step(7, &finished), expected[step]) << "step " << step;
  }
  EXPECT_EQ(finished, (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(scheduler_->num_preemptions(), 1);
  EXPECT_EQ(kv_->Stats().free_blocks, 4);
}

TEST_F(SchedulerTest, PriorityPolicyAdmitsLowerValuesFirstWithFcfsTieBreak) {
  Init(20, 4, 4, 8, 64, SchedulerConfig::Policy::kPriority);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 4, 1, /*priority=*/5)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 4, 1, /*priority=*/-1)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(3, 4, 1, /*priority=*/-1)).ok());
  EXPECT_EQ(Step(), "2:0+4*");
  EXPECT_EQ(Step(), "3:0+4*");
  EXPECT_EQ(Step(), "1:0+4*");
}

TEST_F(SchedulerTest, PrefixHitSkipsCachedBlocks) {
  Init(20, 4, 64, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 9, 1)).ok());
  EXPECT_EQ(Step(), "1:0+9*");
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 9, 1)).ok());  // same prompt
  const SchedulerOutput out = scheduler_->Schedule();
  EXPECT_EQ(Plan(out), "2:8+1*");
  EXPECT_EQ(scheduler_->Find(2)->num_cached_prompt_tokens, 8);
  const auto outputs = scheduler_->Update(out, std::vector<int32_t>{7});
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].num_cached_prompt_tokens, 8);
  EXPECT_EQ(outputs[0].num_prompt_tokens, 9);
}

TEST_F(SchedulerTest, BlockHashesFollowTheTokensAndOutputBlocksAreSharedLikePromptOnes) {
  Init(20, 4, 64, 4, 64);
  auto first = MakeRequest(1, 4, 5);
  first->cache_salt = "tenant";
  ASSERT_TRUE(scheduler_->AddRequest(std::move(first)).ok());
  // Prompt 100..103, then five 7s: the hashes always cover the full blocks of the tokens so far.
  for (int step = 0; step < 4; ++step) {
    Step();
    const Request* request = scheduler_->Find(1);
    ASSERT_NE(request, nullptr);
    EXPECT_EQ(request->block_hashes, common::HashFullBlocks(request->tokens, 4, "tenant"))
        << "step " << step;
  }
  Step();  // the fifth token: finished, with its first 8 tokens computed and cached
  EXPECT_EQ(scheduler_->Find(1), nullptr);

  // A follow-up whose prompt is that conversation finds both blocks, the second made of output.
  auto follow_up = std::make_unique<Request>();
  follow_up->id = 2;
  follow_up->tokens = {100, 101, 102, 103, 7, 7, 7, 7, 7, 50};
  follow_up->num_prompt_tokens = 10;
  follow_up->stopping.max_tokens = 1;
  follow_up->cache_salt = "tenant";
  auto other_tenant = std::make_unique<Request>(*follow_up);
  other_tenant->id = 3;
  other_tenant->cache_salt = "other";
  ASSERT_TRUE(scheduler_->AddRequest(std::move(follow_up)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(std::move(other_tenant)).ok());
  EXPECT_EQ(Step(), "2:8+2* 3:0+10*");
}

TEST_F(SchedulerTest, RequestsAdmittedTogetherShareBlocksInTheSameStep) {
  Init(20, 4, 64, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 9, 2)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 9, 2)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(3, 6, 2)).ok());  // shares 1 block of 4
  EXPECT_EQ(Step(), "1:0+9* 2:8+1* 3:4+2*");
  ASSERT_EQ(kv_->BlockTable(2).size(), 3u);
  ASSERT_EQ(kv_->BlockTable(3).size(), 2u);
  EXPECT_EQ(kv_->BlockTable(2)[0], kv_->BlockTable(1)[0]);
  EXPECT_EQ(kv_->BlockTable(2)[1], kv_->BlockTable(1)[1]);
  EXPECT_EQ(kv_->BlockTable(3)[0], kv_->BlockTable(1)[0]);
}

TEST_F(SchedulerTest, AbortAtAnyStateFreesBlocksAtOnce) {
  Init(20, 4, 8, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 20, 4)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 4, 4)).ok());
  EXPECT_EQ(Step(), "1:0+8");
  EXPECT_EQ(kv_->Stats().free_blocks, 17);
  EXPECT_TRUE(scheduler_->AbortRequest(1));  // mid-prefill
  EXPECT_EQ(kv_->Stats().free_blocks, 19);
  EXPECT_TRUE(scheduler_->AbortRequest(2));  // waiting
  EXPECT_FALSE(scheduler_->AbortRequest(2));
  EXPECT_FALSE(scheduler_->HasWork());
  EXPECT_EQ(Step(), "");
}

TEST_F(SchedulerTest, StopConditions) {
  Init(40, 4, 64, 8, 12);
  auto eos = MakeRequest(1, 4, 5);
  auto ignore = MakeRequest(2, 4, 3);
  ignore->stopping.ignore_eos = true;
  auto stop_id = MakeRequest(3, 4, 5);
  stop_id->stopping.stop_token_ids = {9};
  stop_id->stopping.ignore_eos = true;  // stop ids still apply
  auto min_tokens = MakeRequest(4, 4, 5);
  min_tokens->stopping.min_tokens = 2;
  auto context = MakeRequest(5, 10, 2);  // reaches max_model_len 12 after 2 tokens
  for (auto* r : {&eos, &ignore, &stop_id, &min_tokens, &context}) {
    ASSERT_TRUE(scheduler_->AddRequest(std::move(*r)).ok());
  }
  // Everybody samples EOS, then 9, then EOS again, then 5.
  std::map<RequestId, RequestStatus> status;
  for (int32_t token : {kEos, 9, kEos, 5}) {
    const SchedulerOutput out = scheduler_->Schedule();
    for (const RequestOutput& r : scheduler_->Update(out, std::vector<int32_t>(8, token))) {
      if (IsFinished(r.status)) status[r.id] = r.status;
    }
  }
  EXPECT_EQ(status[1], RequestStatus::kFinishedStopped);  // EOS at once
  EXPECT_EQ(status[2], RequestStatus::kFinishedLength);   // EOS ignored: 3 tokens
  EXPECT_EQ(status[3], RequestStatus::kFinishedStopped);  // stop id 9 at the 2nd token
  EXPECT_EQ(status[4], RequestStatus::kFinishedStopped);  // 1st EOS too early, 2nd one stops
  EXPECT_EQ(status[5], RequestStatus::kFinishedStopped);  // EOS at once as well
  EXPECT_FALSE(scheduler_->HasWork());
}

TEST_F(SchedulerTest, MinTokensDelaysEosAndContextEndIsLength) {
  Init(40, 4, 64, 8, 12);
  auto min_tokens = MakeRequest(1, 4, 5);
  min_tokens->stopping.min_tokens = 2;
  ASSERT_TRUE(scheduler_->AddRequest(std::move(min_tokens)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 10, 2)).ok());
  std::vector<RequestId> finished;
  Step(kEos, &finished);  // 1 has 1 token (< min_tokens), 2 stops on EOS
  EXPECT_EQ(finished, (std::vector<RequestId>{2}));
  Step(kEos, &finished);
  EXPECT_EQ(finished, (std::vector<RequestId>{2, 1}));

  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(3, 10, 2)).ok());
  const SchedulerOutput out = scheduler_->Schedule();
  auto outputs = scheduler_->Update(out, std::vector<int32_t>{5});
  EXPECT_EQ(outputs[0].status, RequestStatus::kRunning);
  outputs = scheduler_->Update(scheduler_->Schedule(), std::vector<int32_t>{5});
  EXPECT_EQ(outputs[0].status, RequestStatus::kFinishedLength);  // 12 tokens = max_model_len
}

TEST_F(SchedulerTest, RejectsRequestsThatCanNeverRun) {
  Init(5, 4, 64, 8, 32);
  auto check = [&](std::unique_ptr<Request> r, absl::StatusCode code, const std::string& text) {
    const absl::Status status = scheduler_->AddRequest(std::move(r));
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_NE(status.message().find(text), absl::string_view::npos) << status.message();
  };
  check(MakeRequest(1, 0, 4), absl::StatusCode::kInvalidArgument, "at least one token");
  check(MakeRequest(1, 4, 0), absl::StatusCode::kInvalidArgument, "max_tokens");
  check(MakeRequest(1, 30, 4), absl::StatusCode::kInvalidArgument,
        "exceeds the model's context of 32 tokens");
  check(MakeRequest(1, 10, 10), absl::StatusCode::kInvalidArgument,
        "needs 5 KV cache blocks; this worker has 4");
  auto bad_min = MakeRequest(1, 4, 2);
  bad_min->stopping.min_tokens = 3;
  check(std::move(bad_min), absl::StatusCode::kInvalidArgument, "min_tokens");
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 4, 2)).ok());
  check(MakeRequest(1, 4, 2), absl::StatusCode::kAlreadyExists, "already live");
}

// Random arrivals, lengths and pool sizes: every request finishes (no deadlock, no starvation),
// FCFS admits in arrival order, the budget and sequence cap hold every step, and no block leaks.
TEST_F(SchedulerTest, RandomSimulationIsLiveAndFair) {
  for (int seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + rng() % 8, num_blocks = 16 + rng() % 64;
    const int32_t budget = 4 + rng() % 60, max_seqs = 1 + rng() % 8;
    Init(num_blocks, bs, budget, max_seqs, 256);
    const int total_requests = 40;
    int added = 0, finished = 0;
    std::vector<RequestId> admitted;
    for (int step = 0; step < 20000 && finished < total_requests; ++step) {
      while (added < total_requests && rng() % 3 == 0) {
        const int32_t max_tokens = 1 + rng() % 20;
        const int32_t max_prompt = std::min<int32_t>(40, (num_blocks - 1) * bs - max_tokens);
        auto request = MakeRequest(++added, 1 + rng() % max_prompt, max_tokens, 0,
                                   static_cast<int32_t>(rng() % 3) * 10);
        ASSERT_TRUE(scheduler_->AddRequest(std::move(request)).ok());
      }
      const SchedulerOutput out = scheduler_->Schedule();
      ASSERT_LE(out.num_batched_tokens, budget);
      ASSERT_LE(scheduler_->num_running(), max_seqs);
      admitted.insert(admitted.end(), out.first_scheduled.begin(), out.first_scheduled.end());
      std::vector<int32_t> sampled(out.scheduled.size());
      for (int32_t& token : sampled) token = rng() % 10 == 0 ? kEos : 50;
      for (const RequestOutput& r : scheduler_->Update(out, sampled)) {
        if (IsFinished(r.status)) ++finished;
      }
    }
    ASSERT_EQ(finished, total_requests) << "seed " << seed << ": not every request finished";
    for (size_t i = 0; i < admitted.size(); ++i) {
      ASSERT_EQ(admitted[i], static_cast<RequestId>(i + 1)) << "FCFS order broken, seed " << seed;
    }
    EXPECT_EQ(kv_->Stats().free_blocks, num_blocks - 1) << "leaked blocks, seed " << seed;
  }
}

// Speculative decoding: a request's drafts ride after its last token in the next step, and
// Update takes the run the engine emitted.
class SpeculativeSchedulerTest : public SchedulerTest {
 protected:
  // Schedules, checks the plan, and applies `emitted` to request `id` (others get token 7).
  std::vector<RequestOutput> StepEmitting(RequestId id, std::vector<int32_t> emitted,
                                          const std::string& expected_plan) {
    const SchedulerOutput out = scheduler_->Schedule();
    EXPECT_EQ(Plan(out), expected_plan);
    std::vector<std::vector<int32_t>> runs(out.scheduled.size());
    for (size_t i = 0; i < out.scheduled.size(); ++i) {
      if (!out.scheduled[i].samples) continue;
      runs[i] = out.scheduled[i].id == id ? emitted : std::vector<int32_t>{7};
    }
    return scheduler_->Update(out, runs);
  }
  int32_t FreeBlocks() const { return kv_->Stats().free_blocks; }
};

TEST_F(SpeculativeSchedulerTest, DraftsFollowTheLastTokenAndRejectedOnesGiveTheirBlocksBack) {
  Init(20, 4, 16, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 6, 20)).ok());
  EXPECT_EQ(Step(), "1:0+6*");  // tokens 100..105, 7
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {50, 51, 52}), 3);
  const int32_t free_before = FreeBlocks();  // 2 blocks held
  {
    const SchedulerOutput out = scheduler_->Schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    const ScheduledRequest& step = out.scheduled[0];
    EXPECT_EQ(Plan(out), "1:6+4*");
    EXPECT_EQ(step.num_draft_tokens, 3);
    EXPECT_EQ(step.new_token_ids, (std::vector<int32_t>{7, 50, 51, 52}));
    EXPECT_EQ(step.block_table.size(), 3u);  // 10 positions
    EXPECT_EQ(out.num_batched_tokens, 4);
    EXPECT_TRUE(scheduler_->Find(1)->draft_tokens.empty());  // consumed by the plan
    // Two drafts accepted, then the model's own token.
    const auto outputs = scheduler_->Update(out, std::vector<std::vector<int32_t>>{{50, 51, 9}});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].new_tokens, (std::vector<int32_t>{50, 51, 9}));
    EXPECT_EQ(outputs[0].status, RequestStatus::kRunning);
  }
  const Request* request = scheduler_->Find(1);
  EXPECT_EQ(request->num_tokens(), 10);
  EXPECT_EQ(request->num_computed_tokens, 9);  // 9 (the new token) is still to compute
  EXPECT_EQ(FreeBlocks(), free_before - 1);    // 9 computed tokens fill 3 blocks

  // All four drafts rejected: 5 positions computed, 1 kept; the table shrinks back.
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {60, 61, 62, 63}), 4);
  const auto outputs = StepEmitting(1, {5}, "1:9+5*");
  EXPECT_EQ(outputs[0].new_tokens, (std::vector<int32_t>{5}));
  EXPECT_EQ(request->num_computed_tokens, 10);
  EXPECT_EQ(kv_->BlockTable(1).size(), 3u);
  EXPECT_EQ(FreeBlocks(), free_before - 1);
  // And the request goes on decoding one token at a time.
  EXPECT_EQ(Step(), "1:10+1*");
}

TEST_F(SpeculativeSchedulerTest, DraftsAreCutToLimitsAndBudget) {
  Init(20, 4, 8, 4, 16);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 4, 6)).ok());
  // Not running yet, or still in prefill: no drafts.
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {1, 2}), 0);
  EXPECT_EQ(Step(), "1:0+4*");
  // max_tokens 6 with 1 output: the drafts' run may hold 5 more tokens, one of them the model's.
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {1, 1, 1, 1, 1, 1, 1}), 4);
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {}), 0);  // replaced, not appended
  EXPECT_TRUE(scheduler_->Find(1)->draft_tokens.empty());

  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 13, 3, 0, 200)).ok());
  EXPECT_EQ(Step(), "1:4+1* 2:0+7");  // budget 8
  EXPECT_EQ(Step(), "1:5+1* 2:7+6*");
  EXPECT_EQ(scheduler_->Find(2)->num_tokens(), 14);
  // max_model_len 16 would allow 2 drafts (positions 14 and 15); max_tokens 3 allows 1.
  EXPECT_EQ(scheduler_->SetDraftTokens(2, {3, 3, 3, 3}), 1);
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {1, 1, 1, 1}), 2);  // 3 outputs of 6
  const auto outputs = StepEmitting(2, {3, 4}, "1:6+3* 2:13+2*");
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[1].new_tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(outputs[1].status, RequestStatus::kFinishedLength);

  // Running requests come first: request 1's token and draft, then request 4's prompt chunk gets
  // what is left of the budget.
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(4, 9, 2, 0, 400)).ok());
  EXPECT_EQ(scheduler_->Find(1)->num_tokens(), 8);
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {1, 1}), 1);  // 4 outputs of 6
  EXPECT_EQ(Step(), "1:7+2* 4:0+6");                    // the draft rejected (7 != 1)
  EXPECT_EQ(scheduler_->Find(1)->num_output_tokens(), 5);
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {1, 1}), 0);  // the last token leaves no room
}

TEST_F(SpeculativeSchedulerTest, DraftsAreDroppedRatherThanPreemptAnyone) {
  Init(6, 4, 32, 4, 64);  // 5 usable blocks
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 4, 10)).ok());
  EXPECT_EQ(Step(), "1:0+4*");
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(3, 11, 4, 0, 300)).ok());
  EXPECT_EQ(Step(), "1:4+1* 3:0+11*");  // 2 + 3 blocks: none free
  EXPECT_EQ(kv_->Stats().free_blocks, 0);
  EXPECT_EQ(scheduler_->SetDraftTokens(1, {1, 1, 1}), 3);
  const SchedulerOutput out = scheduler_->Schedule();
  EXPECT_EQ(Plan(out), "1:5+1* 3:11+1*");
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 0);
  EXPECT_TRUE(out.preempted.empty());
}

TEST_F(SpeculativeSchedulerTest, AStopInsideTheAcceptedRunEndsItThere) {
  Init(20, 4, 16, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 4, 10)).ok());
  Step();
  scheduler_->SetDraftTokens(1, {50, kEos, 52});
  const auto stopped = StepEmitting(1, {50, kEos, 52, 53}, "1:4+4*");
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].new_tokens, (std::vector<int32_t>{50, kEos}));
  EXPECT_EQ(stopped[0].status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(stopped[0].num_output_tokens, 3);
  EXPECT_EQ(kv_->Stats().free_blocks, 19);

  // Drafts are cut so that a run ends at max_tokens at the latest, and finishes there.
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 4, 3)).ok());
  Step();
  EXPECT_EQ(scheduler_->SetDraftTokens(2, {50, 51}), 1);
  const auto length = StepEmitting(2, {50, 52}, "2:4+2*");
  EXPECT_EQ(length[0].new_tokens, (std::vector<int32_t>{50, 52}));
  EXPECT_EQ(length[0].status, RequestStatus::kFinishedLength);
}

TEST_F(SpeculativeSchedulerTest, OnlyBlocksOfKnownTokensEnterThePrefixCache) {
  Init(20, 4, 16, 4, 64);
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 4, 20)).ok());
  Step();  // 100..103, 7
  // Drafts 8 9 10 fill block 1 with 7 8 9 10, all rejected: that block must not be shared.
  scheduler_->SetDraftTokens(1, {8, 9, 10});
  StepEmitting(1, {3}, "1:4+4*");
  auto probe = [&](RequestId id) {
    auto request = MakeRequest(id, 0, 1);
    request->tokens = {100, 101, 102, 103, 7, 8, 9, 10, 11};
    request->num_prompt_tokens = 9;
    return request;
  };
  ASSERT_TRUE(scheduler_->AddRequest(probe(2)).ok());
  const SchedulerOutput miss = scheduler_->Schedule();
  EXPECT_EQ(Plan(miss), "1:5+1* 2:4+5*");
  scheduler_->Update(miss, std::vector<int32_t>{7, 7});  // request 2 finishes (max_tokens 1)

  // Request 3 drafts the same tokens and the model accepts them: once known, they are shared.
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(3, 4, 20)).ok());
  Step();  // request 3 hits block 0 and computes 103, then 7; request 1 decodes
  scheduler_->SetDraftTokens(3, {8, 9, 10});
  const SchedulerOutput out = scheduler_->Schedule();
  std::vector<std::vector<int32_t>> runs(out.scheduled.size(), std::vector<int32_t>{7});
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    if (out.scheduled[i].id == 3) runs[i] = {8, 9, 10, 12};
  }
  scheduler_->Update(out, runs);
  Step();  // registers request 3's block 1 (its hash came with token 10)
  ASSERT_TRUE(scheduler_->AddRequest(probe(4)).ok());
  const SchedulerOutput hit = scheduler_->Schedule();
  EXPECT_EQ(hit.scheduled.back().id, 4);
  EXPECT_EQ(hit.scheduled.back().num_computed_tokens, 8);
}

// The random simulation with drafts: random requests get random drafts, a random prefix of which
// is accepted. Every step stays in the budget with tables long enough for its tokens, every
// request finishes, and no block leaks through rollbacks and preemptions.
TEST_F(SpeculativeSchedulerTest, RandomSimulationWithDraftsKeepsTheInvariants) {
  for (int seed = 0; seed < 30; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + rng() % 8, num_blocks = 24 + rng() % 64;
    const int32_t budget = 4 + rng() % 60, max_seqs = 1 + rng() % 8;
    Init(num_blocks, bs, budget, max_seqs, 128);
    const int total_requests = 40;
    int added = 0, finished = 0;
    int64_t drafted = 0, accepted = 0;
    for (int step = 0; step < 20000 && finished < total_requests; ++step) {
      while (added < total_requests && rng() % 3 == 0) {
        const int32_t max_tokens = 1 + rng() % 20;  // so that a prompt fits: max_prompt >= 3
        const int32_t max_prompt = std::min<int32_t>(40, (num_blocks - 1) * bs - max_tokens);
        ASSERT_TRUE(
            scheduler_->AddRequest(MakeRequest(++added, 1 + rng() % max_prompt, max_tokens)).ok());
      }
      const SchedulerOutput out = scheduler_->Schedule();
      ASSERT_LE(out.num_batched_tokens, budget) << "seed " << seed;
      std::vector<std::vector<int32_t>> runs(out.scheduled.size());
      for (size_t i = 0; i < out.scheduled.size(); ++i) {
        const ScheduledRequest& planned = out.scheduled[i];
        ASSERT_GE(static_cast<int64_t>(planned.block_table.size()) * bs,
                  planned.num_computed_tokens + planned.num_new_tokens)
            << "seed " << seed;
        if (!planned.samples) continue;
        const int32_t d = planned.num_draft_tokens;
        const int32_t take = static_cast<int32_t>(rng() % (d + 1));
        runs[i].assign(planned.new_token_ids.end() - d, planned.new_token_ids.end() - d + take);
        runs[i].push_back(rng() % 10 == 0 ? kEos : 60);
        drafted += d;
        accepted += take;
      }
      for (const RequestOutput& r : scheduler_->Update(out, runs)) {
        if (IsFinished(r.status)) ++finished;
      }
      for (RequestId id : scheduler_->running()) {
        const Request* request = scheduler_->Find(id);
        if (request->num_tokens() - request->num_computed_tokens != 1 || rng() % 2 == 0) continue;
        std::vector<int32_t> drafts(1 + rng() % 5);
        for (int32_t& token : drafts)
          token = rng() % 8 == 0 ? kEos : 50 + static_cast<int32_t>(rng() % 2);
        scheduler_->SetDraftTokens(id, std::move(drafts));
      }
    }
    ASSERT_EQ(finished, total_requests) << "seed " << seed << ": not every request finished";
    EXPECT_EQ(kv_->Stats().free_blocks, num_blocks - 1) << "leaked blocks, seed " << seed;
    EXPECT_GT(accepted, 0) << "seed " << seed;
    EXPECT_GT(drafted, accepted) << "seed " << seed;
  }
}

TEST_F(SpeculativeSchedulerTest, PreemptionDropsDrafts) {
  Init(5, 4, 32, 4, 64);  // 4 usable blocks
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(1, 8, 8)).ok());
  ASSERT_TRUE(scheduler_->AddRequest(MakeRequest(2, 8, 8, 0, 200)).ok());
  EXPECT_EQ(Step(), "1:0+8* 2:0+8*");  // all 4 blocks held
  scheduler_->SetDraftTokens(2, {1, 2});
  // Request 1 needs a third block for position 8: request 2 (the newest) is preempted.
  const SchedulerOutput out = scheduler_->Schedule();
  EXPECT_EQ(Plan(out), "1:8+1* P:2");
  EXPECT_TRUE(scheduler_->Find(2)->draft_tokens.empty());
}

}  // namespace
}  // namespace llmserve::worker
