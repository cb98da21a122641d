// Speculative decoding in the engine loop: what a request generates does not depend on it.
//   - Exactness: greedy and seeded requests (with every sampling option, logprobs, stop ids,
//     min_tokens, max_tokens, grammars) emit the same tokens, logprobs and finish reasons with
//     and without speculation, under token budgets that cut drafts and KV caches small enough to
//     preempt. The backend is a fake whose logits are exact, so any difference is the engine's.
//   - Distribution: sampled tokens follow the model's distribution, drafts accepted or not
//     (a chi-square test per context over many seeded requests).
//   - Effect: accepted drafts save steps, counted as vLLM counts them.
//   - The real CPU backend on the tiny model: the same tokens with and without speculation.

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"
#include "tests/unit/worker/engine/test_vocabulary.h"
#include "worker/engine/cpu_engine_builder.h"
#include "worker/engine/engine.h"
#include "worker/service/load_accountant.h"

namespace llmserve::worker {
namespace {

constexpr int32_t kVocab = testing::kTestVocabSize;
constexpr int32_t kEos = testing::kTestEos;

// A Markov model over the test vocabulary: the logits at a position depend only on its token,
// table[token], fixed random rows in which each token has one strongly favoured successor (never
// EOS). Greedy runs fall into cycles, so prompt lookup finds drafts the model accepts; sampled
// runs follow the favourite about half the time, so drafts are rejected too.
//
// With a `disagree_seed`, a draft model of that chain: about a third of the rows get a different
// favourite, so its greedy drafts are often but not always what the chain does.
class MarkovBackend : public Backend {
 public:
  explicit MarkovBackend(int32_t num_blocks = 512, int32_t max_model_len = 256,
                         uint64_t disagree_seed = 0)
      : num_blocks_(num_blocks), table_(kVocab * kVocab) {
    config_.vocab_size = kVocab;
    config_.max_model_len = config_.max_position_embeddings = max_model_len;
    config_.eos_token_ids = {kEos};
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> noise(-1.5f, 1.5f);
    for (int32_t from = 0; from < kVocab; ++from) {
      float* row = &table_[from * kVocab];
      for (int32_t to = 0; to < kVocab; ++to) row[to] = noise(rng);
      row[1 + rng() % (kVocab - 1)] += 4.0f;
      row[kEos] -= 2.0f;
    }
    if (disagree_seed == 0) return;
    std::mt19937 other(static_cast<uint32_t>(disagree_seed));
    for (int32_t from = 0; from < kVocab; ++from) {
      if (other() % 3 == 0) table_[from * kVocab + 1 + other() % (kVocab - 1)] += 8.0f;
    }
  }
  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return 4; }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  absl::string_view name() const override { return "markov"; }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    LLMSERVE_RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, block_size(), num_kv_blocks()));
    out->vocab_size = kVocab;
    out->row_start.assign(1, 0);
    out->logits.clear();
    for (int32_t s = 0; s < batch.num_seqs(); ++s) {
      const int32_t end = batch.query_start[s + 1];
      const bool all = !batch.all_logits.empty() && batch.all_logits[s];
      for (int32_t t = all ? batch.query_start[s] : end - 1; t < end; ++t) {
        const float* row = Row(batch.token_ids[t]);
        out->logits.insert(out->logits.end(), row, row + kVocab);
      }
      out->row_start.push_back(static_cast<int32_t>(out->logits.size() / kVocab));
    }
    return absl::OkStatus();
  }

  const float* Row(int32_t token) const { return &table_[token * kVocab]; }

 private:
  ModelConfig config_;
  int32_t num_blocks_;
  std::vector<float> table_;
};

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<std::optional<float>> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  FinishReason finish = FinishReason::kNone;
  int32_t output_tokens = 0;
  friend bool operator==(const Outcome&, const Outcome&) = default;
};

struct RunResult {
  std::vector<Outcome> outcomes;
  EngineLoad load;
};

// Adds every request, then steps the engine (on this thread) until all have finished.
RunResult RunAll(std::unique_ptr<Backend> backend, const EngineConfig& config,
                 std::vector<EngineRequest> requests, std::unique_ptr<Backend> draft = nullptr) {
  LoadAccountant load;
  EngineConfig reporting = config;
  reporting.on_step = [&load](const StepStats& step) { load.Record(step); };
  auto engine = Engine::Create(std::move(backend), reporting, std::move(draft));
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  RunResult result;
  result.outcomes.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Outcome* outcome = &result.outcomes[i];
    requests[i].on_output = [outcome](const EngineOutput& output) {
      for (const GeneratedToken& token : output.tokens) {
        outcome->ids.push_back(token.token_id);
        outcome->logprobs.push_back(token.logprob);
        outcome->top_logprobs.push_back(token.top_logprobs);
      }
      if (output.finish != FinishReason::kNone) {
        outcome->finish = output.finish;
        outcome->output_tokens = output.output_tokens;
      }
    };
    const absl::StatusOr<RequestId> id = (*engine)->AddRequest(std::move(requests[i]));
    EXPECT_TRUE(id.ok()) << id.status();
  }
  for (int step = 0; (*engine)->StepOnce(); ++step) {
    if (step > 100000) {
      ADD_FAILURE() << "the engine did not finish";
      break;
    }
  }
  result.load = load.Load();
  return result;
}

SpeculativeConfig Ngram(int32_t k) {
  return {.method = SpeculativeMethod::kNgram,
          .num_speculative_tokens = k,
          .prompt_lookup_min = 1,
          .prompt_lookup_max = 3,
          .disable_batch_size = 0};
}

SpeculativeConfig DraftModel(int32_t k) {
  return {.method = SpeculativeMethod::kDraft,
          .num_speculative_tokens = k,
          .disable_batch_size = 0,
          .model = "(in memory)"};
}

EngineRequest Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  EngineRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.stopping.max_tokens = max_tokens;
  request.stopping.ignore_eos = true;
  return request;
}

EngineRequest Sampled(std::vector<int32_t> prompt, int32_t max_tokens, uint64_t seed) {
  EngineRequest request = Greedy(std::move(prompt), max_tokens);
  request.sampling.temperature = 1.0f;
  request.sampling.seed = seed;
  return request;
}

// Every kind of request the engine serves, on prompts that repeat themselves a little.
std::vector<EngineRequest> MixedRequests() {
  std::vector<EngineRequest> requests;
  requests.push_back(Greedy({2, 3, 4, 2, 3}, 40));
  requests.push_back(Greedy({9, 9, 9}, 33));
  requests.back().sampling.top_logprobs = 3;
  requests.push_back(Sampled({5, 6, 7, 5, 6}, 40, 1));
  requests.back().sampling.return_logprobs = true;
  requests.push_back(Sampled({11, 12}, 40, 2));
  requests.back().sampling.top_k = 6;
  requests.back().sampling.top_p = 0.9f;
  requests.back().sampling.top_logprobs = 2;
  requests.push_back(Sampled({13, 14, 13}, 40, 3));
  requests.back().sampling.min_p = 0.05f;
  requests.back().sampling.temperature = 0.7f;
  requests.push_back(Sampled({15, 16, 17}, 40, 4));
  requests.back().sampling.repetition_penalty = 1.3f;
  requests.back().sampling.presence_penalty = 0.4f;
  requests.back().sampling.frequency_penalty = 0.3f;
  requests.back().sampling.return_logprobs = true;
  // Stops: a stop id the greedy cycle reaches, EOS with min_tokens, and short max_tokens.
  requests.push_back(Greedy({2, 3, 4}, 40));
  requests.back().stopping.stop_token_ids = {21, 30, 35};
  requests.push_back(Sampled({20, 21, 22}, 60, 5));
  requests.back().stopping.ignore_eos = false;
  requests.back().stopping.min_tokens = 4;
  for (int32_t max_tokens : {1, 2, 3}) requests.push_back(Sampled({7, 8, 7, 8}, max_tokens, 6));
  return requests;
}

// Prompt lookup's drafts, and a draft model's (a chain that disagrees with the target in a third
// of its rows), verified the same way: the same outputs, through budgets that cut drafts and prompt
// chunks and caches small enough to preempt.
TEST(SpeculativeEngineTest, OutputsAreIdenticalWithAndWithoutSpeculation) {
  const RunResult plain = RunAll(std::make_unique<MarkovBackend>(), {}, MixedRequests());
  for (const Outcome& outcome : plain.outcomes) ASSERT_NE(outcome.finish, FinishReason::kNone);
  struct Case {
    const char* name;
    SpeculativeConfig speculative;
    int32_t budget;
    int32_t num_blocks;
  };
  const Case cases[] = {
      {"ngram k=1", Ngram(1), 2048, 512},
      {"ngram k=2", Ngram(2), 2048, 512},
      {"ngram k=4", Ngram(4), 2048, 512},
      {"ngram k=7", Ngram(7), 2048, 512},
      // A budget of 16 tokens cuts drafts (and prompt chunks).
      {"ngram k=5, budget 16", Ngram(5), 16, 512},
      // 40 blocks of 4 tokens for ~450 tokens of requests: preemption, drafts dropped for blocks.
      {"ngram k=4, small cache", Ngram(4), 2048, 41},
      {"draft k=1", DraftModel(1), 2048, 512},
      {"draft k=3", DraftModel(3), 2048, 512},
      {"draft k=6", DraftModel(6), 2048, 512},
      {"draft k=5, budget 16", DraftModel(5), 16, 512},
      // Fewer steps than with prompt lookup: a smaller cache to preempt.
      {"draft k=4, small cache", DraftModel(4), 2048, 30},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RunResult speculative =
        RunAll(std::make_unique<MarkovBackend>(c.num_blocks),
               {.max_num_batched_tokens = c.budget, .speculative = c.speculative}, MixedRequests(),
               c.speculative.method == SpeculativeMethod::kDraft
                   ? std::make_unique<MarkovBackend>(512, 256, /*disagree_seed=*/7)
                   : nullptr);
    ASSERT_EQ(speculative.outcomes.size(), plain.outcomes.size());
    for (size_t i = 0; i < plain.outcomes.size(); ++i) {
      EXPECT_EQ(speculative.outcomes[i], plain.outcomes[i]) << "request " << i;
    }
    // Both ways of verifying happened.
    EXPECT_GT(speculative.load.spec_accepted_tokens, 20);
    EXPECT_GT(speculative.load.spec_draft_tokens - speculative.load.spec_accepted_tokens, 20);
    if (c.num_blocks < 100) {
      EXPECT_GT(speculative.load.preemptions, 0);
    }
  }
}

TEST(SpeculativeEngineTest, ADraftModelOfTheSameChainSavesMostSteps) {
  auto one = [] { return std::vector<EngineRequest>{Greedy({2, 3, 4}, 120)}; };
  const RunResult plain = RunAll(std::make_unique<MarkovBackend>(), {}, one());
  const RunResult speculative =
      RunAll(std::make_unique<MarkovBackend>(), {.speculative = DraftModel(4)}, one(),
             std::make_unique<MarkovBackend>());
  ASSERT_EQ(speculative.outcomes[0], plain.outcomes[0]);
  // Every draft is accepted: 5 tokens a step after the first.
  EXPECT_EQ(speculative.load.spec_accepted_tokens, speculative.load.spec_draft_tokens);
  EXPECT_LE(speculative.load.steps, 1 + (119 + 4) / 5);
}

TEST(SpeculativeEngineTest, CreateNeedsADraftBackendExactlyForDraftModelSpeculation) {
  const auto without =
      Engine::Create(std::make_unique<MarkovBackend>(), {.speculative = DraftModel(3)});
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), absl::StatusCode::kInvalidArgument);
  const auto unasked = Engine::Create(std::make_unique<MarkovBackend>(), {.speculative = Ngram(3)},
                                      std::make_unique<MarkovBackend>());
  ASSERT_FALSE(unasked.ok());
  EXPECT_EQ(unasked.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpeculativeEngineTest, ConstrainedOutputsAreIdentical) {
  auto requests = [] {
    const std::shared_ptr<const structured::CompiledGrammar> regex =
        testing::CompileForTestVocabulary(
            {.kind = structured::Constraint::Kind::kRegex, .text = "((ab|bc|k)[a-e ]){3,30}z"});
    const std::shared_ptr<const structured::CompiledGrammar> choice =
        testing::CompileForTestVocabulary({.kind = structured::Constraint::Kind::kChoice,
                                           .choices = {"abab abab abab", "kk kk kk kk z"}});
    std::vector<EngineRequest> list;
    for (uint64_t seed = 0; seed < 6; ++seed) {
      for (const auto& grammar : {regex, choice}) {
        EngineRequest request = seed == 0 ? Greedy({34, 2, 34, 2}, 60) : Sampled({34, 2}, 60, seed);
        request.stopping.ignore_eos = false;
        request.sampling.return_logprobs = true;
        request.grammar = grammar;
        list.push_back(std::move(request));
      }
    }
    return list;
  };
  const RunResult plain = RunAll(std::make_unique<MarkovBackend>(), {}, requests());
  const RunResult speculative =
      RunAll(std::make_unique<MarkovBackend>(), {.speculative = Ngram(4)}, requests());
  const std::vector<std::string> texts = testing::TestTokenTexts();
  for (size_t i = 0; i < plain.outcomes.size(); ++i) {
    EXPECT_EQ(speculative.outcomes[i], plain.outcomes[i]) << "request " << i;
    EXPECT_EQ(plain.outcomes[i].finish, FinishReason::kStop);
    EXPECT_EQ(plain.outcomes[i].ids.back(), kEos);
  }
  EXPECT_GT(speculative.load.spec_accepted_tokens, 0);
  EXPECT_GT(speculative.load.spec_draft_tokens, speculative.load.spec_accepted_tokens);
}

TEST(SpeculativeEngineTest, AcceptedDraftsSaveStepsAndAreCountedByPosition) {
  auto one = [] { return std::vector<EngineRequest>{Greedy({2, 3, 4}, 120)}; };
  const RunResult plain = RunAll(std::make_unique<MarkovBackend>(), {}, one());
  const RunResult speculative =
      RunAll(std::make_unique<MarkovBackend>(), {.speculative = Ngram(4)}, one());
  ASSERT_EQ(speculative.outcomes[0], plain.outcomes[0]);
  EXPECT_EQ(plain.load.steps, 120);
  // The greedy cycle is found after its first turn; then about 5 tokens a step.
  EXPECT_LT(speculative.load.steps, 45);
  const EngineLoad& load = speculative.load;
  ASSERT_EQ(load.spec_accepted_per_position.size(), 4u);
  int64_t sum = 0;
  for (size_t j = 0; j < 4; ++j) {
    sum += load.spec_accepted_per_position[j];
    if (j > 0) {
      EXPECT_LE(load.spec_accepted_per_position[j], load.spec_accepted_per_position[j - 1]);
    }
  }
  EXPECT_EQ(sum, load.spec_accepted_tokens);
  EXPECT_LE(load.spec_draft_tokens, 4 * load.spec_drafts);
  // Each step emits one token of the model's own, plus the drafts it accepted.
  EXPECT_EQ(load.steps + load.spec_accepted_tokens, 120);
  EXPECT_TRUE(plain.load.spec_accepted_per_position.empty());
}

// Sampled tokens at temperature 1 follow softmax(table[previous token]) whether they came from a
// verification or not: over 1000 seeded requests of 60 tokens (~3,000 drafts accepted, ~15,000
// rejected), the successors of each frequent token pass a chi-square test against the model's
// distribution at p = 1e-4. Verification that samples a position from the wrong row fails it for
// many tokens (tried). A bias towards drafts is a weak signal here, since prompt lookup's drafts
// on a Markov chain are earlier samples of the same distributions: the exactness tests above
// catch that instead.
void ExpectSampledTokensFollowTheModelsDistribution(const SpeculativeConfig& speculative,
                                                    std::unique_ptr<Backend> draft) {
  std::vector<EngineRequest> requests;
  std::vector<std::vector<int32_t>> prompts;
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    prompts.push_back({static_cast<int32_t>(2 + seed % 30), static_cast<int32_t>(2 + seed % 7)});
    requests.push_back(Sampled(prompts.back(), 60, seed));
  }
  const MarkovBackend model;
  const RunResult run = RunAll(std::make_unique<MarkovBackend>(), {.speculative = speculative},
                               std::move(requests), std::move(draft));
  EXPECT_GT(run.load.spec_accepted_tokens, 2000);
  EXPECT_GT(run.load.spec_draft_tokens - run.load.spec_accepted_tokens, 2000);

  std::map<int32_t, std::vector<int64_t>> successors;
  for (size_t r = 0; r < run.outcomes.size(); ++r) {
    int32_t previous = prompts[r].back();
    for (int32_t token : run.outcomes[r].ids) {
      auto& counts = successors[previous];
      counts.resize(kVocab);
      ++counts[token];
      previous = token;
    }
  }
  int tested = 0;
  for (const auto& [previous, counts] : successors) {
    int64_t n = 0;
    for (int64_t c : counts) n += c;
    if (n < 300) continue;
    ++tested;
    const float* logits = model.Row(previous);
    const float top = *std::max_element(logits, logits + kVocab);
    std::vector<double> p(kVocab);
    double total = 0;
    for (int32_t t = 0; t < kVocab; ++t) total += p[t] = std::exp(double{logits[t]} - top);
    // Tokens expected fewer than 5 times are pooled into one cell.
    double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
    int cells = 0;
    for (int32_t t = 0; t < kVocab; ++t) {
      const double expected = n * p[t] / total;
      if (expected < 5) {
        pooled_expected += expected;
        pooled_observed += counts[t];
        continue;
      }
      chi2 += (counts[t] - expected) * (counts[t] - expected) / expected;
      ++cells;
    }
    if (pooled_expected > 0) {
      chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) /
              pooled_expected;
      ++cells;
    }
    // The chi-square quantile at 1 - 1e-4 (Wilson-Hilferty; z = 3.719).
    const double df = cells - 1;
    const double h = 2.0 / (9.0 * df);
    const double critical = df * std::pow(1 - h + 3.719 * std::sqrt(h), 3);
    EXPECT_LT(chi2, critical) << "successors of token " << previous << " (" << n << " samples)";
  }
  EXPECT_GE(tested, 10);
}

TEST(SpeculativeEngineTest, SampledTokensFollowTheModelsDistribution) {
  ExpectSampledTokensFollowTheModelsDistribution(Ngram(4), nullptr);
}

// A draft model's drafts are its greedy chain, which the sampled chain follows about half the time.
TEST(SpeculativeEngineTest, SampledTokensFollowTheModelsDistributionWithADraftModel) {
  ExpectSampledTokensFollowTheModelsDistribution(
      DraftModel(4), std::make_unique<MarkovBackend>(512, 256, /*disagree_seed=*/7));
}

TEST(SpeculativeEngineTest, NoDraftsWhileTheBatchIsLargerThanTheLimit) {
  auto four = [] {
    std::vector<EngineRequest> list;
    for (int32_t i = 0; i < 4; ++i) list.push_back(Greedy({2 + i, 3, 2 + i, 3}, 30));
    return list;
  };
  SpeculativeConfig limited = Ngram(4);
  limited.disable_batch_size = 3;
  EXPECT_EQ(RunAll(std::make_unique<MarkovBackend>(), {.speculative = limited}, four())
                .load.spec_draft_tokens,
            0);
  limited.disable_batch_size = 4;
  EXPECT_GT(RunAll(std::make_unique<MarkovBackend>(), {.speculative = limited}, four())
                .load.spec_accepted_tokens,
            0);
}

TEST(SpeculativeEngineTest, CreateRefusesABadConfig) {
  SpeculativeConfig bad = Ngram(0);
  const auto engine = Engine::Create(std::make_unique<MarkovBackend>(), {.speculative = bad});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("num_speculative_tokens"), absl::string_view::npos);
}

// The real CPU backend: the tiny model's greedy and seeded outputs are the same with speculation,
// through preemption (a 12-block cache) and prefix-cache hits (requests that share prompts).
// Logprobs may differ in the last bits, since a position's logits come from a forward pass of a
// different shape (as when it is batched with other requests).
TEST(SpeculativeEngineTest, TheCpuBackendGeneratesTheSameTokens) {
  const ::llmserve::testing::ScopedTempDir temp("speculative_tiny");
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(temp.path()).ok());
  auto run = [&](SpeculativeConfig speculative) {
    if (speculative.method == SpeculativeMethod::kDraft) speculative.model = temp.path();
    // 2 layers x 2 KV heads x 16 dims x (K, V) x 4 bytes x 16 tokens = 8 KiB a block.
    auto load = std::make_unique<LoadAccountant>();
    auto engine = BuildCpuEngine({.model_dir = temp.path(),
                                  .num_threads = 1,
                                  .kv_cache_bytes = 12 * 8192,
                                  .engine = {.speculative = speculative,
                                             .on_step = [load = load.get()](const StepStats& step) {
                                               load->Record(step);
                                             }}});
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<EngineRequest> requests;
    for (int32_t i = 0; i < 6; ++i) {
      // 20 tokens, so the first block of 16 is shared.
      std::vector<int32_t> prompt = {5, 17, 42, 99,  3, 150, 7, 5, 17, 42,
                                     8, 19, 44, 101, 5, 152, 9, 7, 19, 44};
      prompt.push_back(1 + i % 3);
      EngineRequest request =
          i % 2 == 0 ? Greedy(prompt, 48) : Sampled(prompt, 48, static_cast<uint64_t>(i));
      request.sampling.top_logprobs = 2;
      requests.push_back(std::move(request));
    }
    std::vector<Outcome> outcomes(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      Outcome* outcome = &outcomes[i];
      requests[i].on_output = [outcome](const EngineOutput& output) {
        for (const GeneratedToken& token : output.tokens) {
          outcome->ids.push_back(token.token_id);
          outcome->logprobs.push_back(token.logprob);
        }
        if (output.finish != FinishReason::kNone) outcome->finish = output.finish;
      };
      EXPECT_TRUE((*engine)->AddRequest(std::move(requests[i])).ok());
    }
    while ((*engine)->StepOnce()) {
    }
    return std::make_pair(outcomes, load->Load());
  };
  const auto [plain, plain_load] = run({});
  SpeculativeConfig ngram = Ngram(4);
  ngram.prompt_lookup_min = 2;
  // The model as its own draft: greedy drafts are (nearly) always accepted, sampled ones often.
  for (const SpeculativeConfig& config : {ngram, DraftModel(3)}) {
    SCOPED_TRACE(SpeculativeMethodName(config.method));
    const auto [speculative, load] = run(config);
    EXPECT_GT(plain_load.preemptions, 0);
    EXPECT_GT(load.prefix_cache_hits, 0);
    EXPECT_GT(load.spec_accepted_tokens, 20);
    for (size_t i = 0; i < plain.size(); ++i) {
      ASSERT_EQ(plain[i].finish, FinishReason::kLength);
      EXPECT_EQ(speculative[i].ids, plain[i].ids) << "request " << i;
      ASSERT_EQ(speculative[i].logprobs.size(), plain[i].logprobs.size());
      for (size_t t = 0; t < plain[i].logprobs.size(); ++t) {
        EXPECT_NEAR(*speculative[i].logprobs[t], *plain[i].logprobs[t], 1e-4)
            << "request " << i << " token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace llmserve::worker
