// Constrained decoding in the engine loop: a request carrying a compiled grammar only ever samples
// tokens that keep its output in the grammar's language, ends with EOS exactly where the language
// ends, and keeps its logprobs consistent with the mask. The backend is a fake whose logits push
// hard towards tokens the grammar forbids, so any leak in the mask shows.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/status/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/engine/test_vocabulary.h"
#include "worker/engine/engine.h"
#include "worker/structured/constraint.h"

namespace llmserve::worker {
namespace {

constexpr int32_t kVocab = testing::kTestVocabSize;
constexpr int32_t kEos = testing::kTestEos;
constexpr int32_t kSpecial = testing::kTestSpecial;

std::vector<std::string> TokenTexts() { return testing::TestTokenTexts(); }

std::shared_ptr<const structured::CompiledGrammar> Compile(structured::Constraint constraint) {
  return testing::CompileForTestVocabulary(constraint);
}

// Logits that favour the special token, then "z", then EOS: all things a constraint forbids.
class TemptingBackend : public Backend {
 public:
  TemptingBackend() {
    config_.vocab_size = kVocab;
    config_.max_model_len = config_.max_position_embeddings = 256;
    config_.eos_token_ids = {kEos};
  }
  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return 4; }
  int32_t num_kv_blocks() const override { return 256; }
  absl::string_view name() const override { return "tempting"; }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    LLMSERVE_RETURN_IF_ERROR(ValidateForwardBatch(batch, config_, block_size(), num_kv_blocks()));
    out->vocab_size = kVocab;
    out->row_start.assign(1, 0);
    out->logits.assign(batch.num_seqs() * kVocab, 0.0f);
    for (int32_t s = 0; s < batch.num_seqs(); ++s) {
      float* row = &out->logits[s * kVocab];
      row[kSpecial] = 9.0f;
      row[2 + 25] = 8.0f;  // "z"
      row[kEos] = 7.0f;
      // Some spread for the sampled runs.
      for (int32_t t = 2; t < kVocab; ++t) row[t] += 0.1f * static_cast<float>((t * 7) % 5);
      out->row_start.push_back(s + 1);
    }
    return absl::OkStatus();
  }

 private:
  ModelConfig config_;
};

struct Finished {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
};

// Runs each request to the end with StepOnce.
std::vector<Finished> RunAll(std::vector<EngineRequest> requests) {
  auto engine = Engine::Create(std::make_unique<TemptingBackend>(), {});
  EXPECT_TRUE(engine.ok()) << engine.status();
  const std::vector<std::string> texts = TokenTexts();
  std::vector<Finished> results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].on_output = [&results, &texts, i](const EngineOutput& output) {
      for (const GeneratedToken& token : output.tokens) {
        results[i].ids.push_back(token.token_id);
        if (token.token_id != kEos) results[i].text += texts[token.token_id];
        if (token.logprob.has_value()) results[i].logprobs.push_back(*token.logprob);
      }
      if (output.finish != FinishReason::kNone) results[i].finish = output.finish;
    };
    absl::StatusOr<RequestId> id = (*engine)->AddRequest(std::move(requests[i]));
    EXPECT_TRUE(id.ok()) << id.status();
  }
  while ((*engine)->StepOnce()) {
  }
  return results;
}

EngineRequest Request(std::shared_ptr<const structured::CompiledGrammar> grammar,
                      std::optional<uint64_t> seed) {
  EngineRequest request;
  request.prompt = {2, 3, 4};
  if (seed.has_value()) {
    request.sampling.temperature = 1.0f;
    request.sampling.seed = *seed;
  } else {
    request.sampling.temperature = 0;
  }
  request.stopping.max_tokens = 64;
  request.grammar = std::move(grammar);
  return request;
}

TEST(ConstrainedEngineTest, AChoiceIsFollowedExactlyGreedyAndSampled) {
  structured::Constraint choice{.kind = structured::Constraint::Kind::kChoice,
                                .choices = {"abc", "cab", "zz top"}};
  std::shared_ptr<const structured::CompiledGrammar> grammar = Compile(choice);
  ASSERT_NE(grammar, nullptr);
  std::vector<EngineRequest> requests;
  requests.push_back(Request(grammar, std::nullopt));
  for (uint64_t seed = 1; seed <= 12; ++seed) requests.push_back(Request(grammar, seed));
  const std::vector<Finished> results = RunAll(std::move(requests));
  // Greedy follows the logits as far as the grammar lets it: "z" first, then the only way on.
  EXPECT_EQ(results[0].text, "zz top");
  for (const Finished& result : results) {
    EXPECT_TRUE(result.text == "abc" || result.text == "cab" || result.text == "zz top")
        << result.text;
    EXPECT_EQ(result.finish, FinishReason::kStop);
    ASSERT_FALSE(result.ids.empty());
    EXPECT_EQ(result.ids.back(), kEos);
  }
}

TEST(ConstrainedEngineTest, LogprobsAreUnderTheMask) {
  structured::Constraint choice{.kind = structured::Constraint::Kind::kChoice, .choices = {"ab"}};
  EngineRequest request = Request(Compile(choice), std::nullopt);
  request.sampling.return_logprobs = true;
  const std::vector<Finished> results = RunAll({std::move(request)});
  ASSERT_EQ(results.size(), 1u);
  // "ab" as one token (34) or as "a" "b": each sampled token has a logprob under the mask
  // (finite, <= 0), and the final EOS is the only token allowed, so its logprob is 0.
  ASSERT_FALSE(results[0].logprobs.empty());
  for (float logprob : results[0].logprobs) {
    EXPECT_LE(logprob, 0.0f);
    EXPECT_GT(logprob, -1e9f);
  }
  EXPECT_FLOAT_EQ(results[0].logprobs.back(), 0.0f);
  EXPECT_EQ(results[0].text, "ab");
}

TEST(ConstrainedEngineTest, ARegexAndAJsonSchemaEndWhereTheirLanguageEnds) {
  structured::Constraint regex{.kind = structured::Constraint::Kind::kRegex, .text = "[a-c]{2,3}"};
  structured::Constraint schema{.kind = structured::Constraint::Kind::kJsonSchema,
                                .text = R"({"type": "object", "properties": {"a": {"enum": [1, 2]}},
                                           "required": ["a"], "additionalProperties": false})"};
  std::vector<EngineRequest> requests;
  for (uint64_t seed = 1; seed <= 6; ++seed) requests.push_back(Request(Compile(regex), seed));
  for (uint64_t seed = 1; seed <= 6; ++seed) requests.push_back(Request(Compile(schema), seed));
  const std::vector<Finished> results = RunAll(std::move(requests));
  for (size_t i = 0; i < 6; ++i) {
    const std::string& text = results[i].text;
    EXPECT_TRUE(text.size() >= 2 && text.size() <= 3 &&
                text.find_first_not_of("abc") == std::string::npos)
        << text;
    EXPECT_EQ(results[i].finish, FinishReason::kStop);
  }
  for (size_t i = 6; i < 12; ++i) {
    const std::string& text = results[i].text;
    EXPECT_TRUE(text == R"({"a": 1})" || text == R"({"a": 2})" || text == R"({"a":1})" ||
                text == R"({"a":2})")
        << text;
    EXPECT_EQ(results[i].finish, FinishReason::kStop);
  }
}

TEST(ConstrainedEngineTest, AConstraintPastItsWorkBudgetEndsWithAnErrorWhileOthersGoOn) {
  // Cheap until its literal prefix is behind it, then every mask would cost more than the
  // matcher's per-token budget: the request ends with an error naming the limit, its forced EOS
  // is not sent, and the unconstrained request beside it runs to its end.
  std::shared_ptr<const structured::CompiledGrammar> grammar =
      Compile({.kind = structured::Constraint::Kind::kRegex, .text = "abc(.?){2000}"});
  ASSERT_NE(grammar, nullptr);
  auto engine = Engine::Create(std::make_unique<TemptingBackend>(), {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<std::string> texts = TokenTexts();
  struct Seen {
    std::string text;
    int tokens = 0;
    FinishReason finish = FinishReason::kNone;
    absl::Status error;
  };
  Seen constrained, plain;
  auto collect = [&texts](Seen* seen) {
    return [seen, &texts](const EngineOutput& output) {
      for (const GeneratedToken& token : output.tokens) {
        ++seen->tokens;
        if (token.token_id != kEos) seen->text += texts[token.token_id];
      }
      if (output.finish != FinishReason::kNone) {
        seen->finish = output.finish;
        seen->error = output.error;
      }
    };
  };
  EngineRequest heavy = Request(grammar, std::nullopt);
  heavy.on_output = collect(&constrained);
  ASSERT_TRUE((*engine)->AddRequest(std::move(heavy)).ok());
  EngineRequest other = Request(nullptr, std::nullopt);
  other.stopping.max_tokens = 12;
  other.stopping.ignore_eos = true;
  other.on_output = collect(&plain);
  ASSERT_TRUE((*engine)->AddRequest(std::move(other)).ok());
  while ((*engine)->StepOnce()) {
  }
  EXPECT_EQ(constrained.finish, FinishReason::kError);
  EXPECT_TRUE(absl::IsInvalidArgument(constrained.error)) << constrained.error;
  EXPECT_THAT(std::string(constrained.error.message()),
              ::testing::HasSubstr("structured_output: the constraint needs more than"));
  EXPECT_EQ(constrained.text, "abc");
  EXPECT_EQ(plain.finish, FinishReason::kLength);
  EXPECT_EQ(plain.tokens, 12);
}

TEST(ConstrainedEngineTest, IgnoreEosAndMinTokensAreRefusedWithAConstraint) {
  auto engine = Engine::Create(std::make_unique<TemptingBackend>(), {});
  ASSERT_TRUE(engine.ok());
  structured::Constraint choice{.kind = structured::Constraint::Kind::kChoice, .choices = {"a"}};
  EngineRequest ignore = Request(Compile(choice), std::nullopt);
  ignore.stopping.ignore_eos = true;
  ignore.on_output = [](const EngineOutput&) {};
  EXPECT_EQ((*engine)->AddRequest(std::move(ignore)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EngineRequest min_tokens = Request(Compile(choice), std::nullopt);
  min_tokens.stopping.min_tokens = 2;
  min_tokens.on_output = [](const EngineOutput&) {};
  EXPECT_EQ((*engine)->AddRequest(std::move(min_tokens)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmserve::worker
