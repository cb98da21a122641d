#include "worker/service/request_conversion.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

constexpr RequestLimits kLimits{.vocab_size = 100, .max_model_len = 64};

v1::GenerateRequest Valid() {
  v1::GenerateRequest request;
  request.set_request_id("r1");
  request.add_prompt_token_ids(1);
  request.add_prompt_token_ids(2);
  return request;
}

void ExpectInvalid(const v1::GenerateRequest& request, const std::string& fragment) {
  const absl::StatusOr<EngineRequest> converted = ToEngineRequest(request, kLimits);
  ASSERT_FALSE(converted.ok()) << fragment;
  EXPECT_EQ(converted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(converted.status().message().find(fragment), absl::string_view::npos)
      << converted.status().message();
}

TEST(RequestConversionTest, ConvertsEveryField) {
  v1::GenerateRequest request = Valid();
  request.mutable_sampling()->set_temperature(0.5f);
  request.mutable_sampling()->set_top_k(5);
  request.mutable_sampling()->set_seed(42);
  request.mutable_sampling()->set_top_logprobs(3);
  request.set_max_tokens(10);
  request.add_stop_token_ids(7);
  request.set_ignore_eos(true);
  request.set_min_tokens(2);
  request.set_priority(-5);
  request.set_cache_salt("tenant");
  const absl::StatusOr<EngineRequest> converted = ToEngineRequest(request, kLimits);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(converted->sampling.temperature, 0.5f);
  EXPECT_EQ(converted->sampling.top_k, 5);
  EXPECT_EQ(converted->sampling.seed, 42u);
  EXPECT_EQ(converted->sampling.top_logprobs, 3);
  EXPECT_FLOAT_EQ(converted->sampling.top_p, 1.0f);  // unset keeps the default
  EXPECT_EQ(converted->stopping.max_tokens, 10);
  EXPECT_EQ(converted->stopping.stop_token_ids, (std::vector<int32_t>{7}));
  EXPECT_TRUE(converted->stopping.ignore_eos);
  EXPECT_EQ(converted->stopping.min_tokens, 2);
  EXPECT_EQ(converted->priority, -5);
  EXPECT_EQ(converted->cache_salt, "tenant");
}

// A worker checks logit_bias itself for clients that reach it directly.
TEST(RequestConversionTest, LogitBiasIsCarriedAndChecked) {
  v1::GenerateRequest request = Valid();
  ::llmserve::v1::LogitBias* entry = request.mutable_sampling()->add_logit_bias();
  entry->set_token_id(99);
  entry->set_bias(-100.0f);
  const absl::StatusOr<EngineRequest> converted = ToEngineRequest(request, kLimits);
  ASSERT_TRUE(converted.ok()) << converted.status();
  ASSERT_EQ(converted->sampling.logit_bias.size(), 1u);
  EXPECT_EQ(converted->sampling.logit_bias[0].first, 99);
  EXPECT_FLOAT_EQ(converted->sampling.logit_bias[0].second, -100.0f);
  entry->set_token_id(100);
  ExpectInvalid(request, "logit_bias[100]: token id 100 is outside the vocabulary [0, 100)");
  entry->set_token_id(5);
  entry->set_bias(101.0f);
  ExpectInvalid(request, "logit_bias[5] is 101, outside [-100, 100]");
}

TEST(RequestConversionTest, MaxTokensZeroMeansUpToTheContextEnd) {
  const absl::StatusOr<EngineRequest> converted = ToEngineRequest(Valid(), kLimits);
  ASSERT_TRUE(converted.ok());
  EXPECT_EQ(converted->stopping.max_tokens, 62);
}

TEST(RequestConversionTest, NamesTheBadField) {
  ExpectInvalid(v1::GenerateRequest(), "prompt_token_ids: must not be empty");
  v1::GenerateRequest request = Valid();
  request.set_prompt_token_ids(1, 100);
  ExpectInvalid(request, "prompt_token_ids[1]: 100 is outside the vocabulary [0, 100)");
  request = Valid();
  request.set_prompt_token_ids(0, -1);
  ExpectInvalid(request, "prompt_token_ids[0]");
  request = Valid();
  for (int i = 0; i < 70; ++i) request.add_prompt_token_ids(1);
  ExpectInvalid(request, "prompt_token_ids: 72 tokens");
  request = Valid();
  request.mutable_sampling()->set_temperature(-1);
  ExpectInvalid(request, "sampling.temperature");
  request = Valid();
  request.mutable_sampling()->set_top_p(0);
  ExpectInvalid(request, "sampling.top_p");
  request = Valid();
  request.mutable_sampling()->set_top_k(101);
  ExpectInvalid(request, "sampling.top_k");
  request = Valid();
  request.set_max_tokens(63);
  ExpectInvalid(request, "max_tokens: 63 with a prompt of 2 tokens exceeds the context");
  request = Valid();
  request.set_max_tokens(3);
  request.set_min_tokens(4);
  ExpectInvalid(request, "min_tokens: 4 exceeds max_tokens 3");
  request = Valid();
  request.add_stop_token_ids(100);
  ExpectInvalid(request, "stop_token_ids[0]");
  request = Valid();
  for (int i = 0; i < 65; ++i) request.add_stop_token_ids(1);
  ExpectInvalid(request, "stop_token_ids: 65 ids; at most 64");
  request = Valid();
  request.set_priority(1001);
  ExpectInvalid(request, "priority: 1001 is outside [-1000, 1000]");
  request = Valid();
  request.set_cache_salt(std::string(257, 'x'));
  ExpectInvalid(request, "cache_salt: 257 bytes");
}

TEST(RequestConversionTest, RequestIds) {
  EXPECT_TRUE(ValidateRequestId("req-1_A.b:c").ok());
  EXPECT_TRUE(ValidateRequestId(std::string(128, 'a')).ok());
  EXPECT_FALSE(ValidateRequestId("").ok());
  EXPECT_FALSE(ValidateRequestId(std::string(129, 'a')).ok());
  EXPECT_FALSE(ValidateRequestId("has space").ok());
  EXPECT_FALSE(ValidateRequestId("tab\t").ok());
  EXPECT_FALSE(ValidateRequestId("\xc3\xa9").ok());
}

TEST(RequestConversionTest, OutputsBecomeResponses) {
  EngineOutput output{
      .tokens = {{.token_id = 5, .logprob = -0.5f, .top_logprobs = {{5, -0.5f}}}, {.token_id = 6}},
      .finish = FinishReason::kStop,
      .prompt_tokens = 3,
      .cached_prompt_tokens = 1,
      .output_tokens = 2,
      .preemptions = 1,
      .queue_s = 0.1,
      .ttft_s = 0.2,
      .total_s = 0.3};
  v1::GenerateResponse response;
  AppendTokens(output, &response);
  SetFinal(output, &response);
  ASSERT_EQ(response.tokens_size(), 2);
  EXPECT_EQ(response.tokens(0).token_id(), 5);
  EXPECT_FLOAT_EQ(response.tokens(0).logprob(), -0.5f);
  EXPECT_EQ(response.tokens(0).top_logprobs_size(), 1);
  EXPECT_FALSE(response.tokens(1).has_logprob());
  EXPECT_EQ(response.finish_reason(), ::llmserve::v1::FINISH_REASON_STOP);
  EXPECT_EQ(response.usage().prompt_tokens(), 3u);
  EXPECT_EQ(response.usage().cached_prompt_tokens(), 1u);
  EXPECT_EQ(response.usage().completion_tokens(), 2u);
  EXPECT_EQ(response.timing().preemptions(), 1u);
  EXPECT_DOUBLE_EQ(response.timing().time_to_first_token_s(), 0.2);
}

RequestLimits EmbeddingLimits(bool matryoshka, std::vector<int64_t> dimensions = {}) {
  RequestLimits limits = kLimits;
  limits.embedding = EmbeddingTask{.method = PoolingMethod::kMean,
                                   .normalize = false,
                                   .size = 32,
                                   .matryoshka = matryoshka,
                                   .matryoshka_dimensions = std::move(dimensions)};
  return limits;
}

TEST(RequestConversionTest, AnEmbeddingRequestCarriesTheWorkersPoolingAndMayFillTheContext) {
  v1::GenerateRequest request = Valid();
  request.mutable_prompt_token_ids()->Clear();
  for (int i = 0; i < 64; ++i) request.add_prompt_token_ids(i);
  request.mutable_embedding();
  const absl::StatusOr<EngineRequest> converted = ToEngineRequest(request, EmbeddingLimits(false));
  ASSERT_TRUE(converted.ok()) << converted.status();
  ASSERT_TRUE(converted->pooling.has_value());
  EXPECT_EQ(converted->pooling->method, PoolingMethod::kMean);
  EXPECT_FALSE(converted->pooling->normalize);
  EXPECT_EQ(converted->pooling->dimensions, 0);
  EXPECT_EQ(converted->stopping.max_tokens, 0);
  EXPECT_EQ(converted->prompt.size(), 64u);
  request.add_prompt_token_ids(1);
  EXPECT_TRUE(absl::IsInvalidArgument(ToEngineRequest(request, EmbeddingLimits(false)).status()));
}

TEST(RequestConversionTest, TheTaskMustMatchTheWorkers) {
  v1::GenerateRequest embedding = Valid();
  embedding.mutable_embedding();
  EXPECT_TRUE(absl::IsFailedPrecondition(ToEngineRequest(embedding, kLimits).status()));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(ToEngineRequest(Valid(), EmbeddingLimits(false)).status()));
}

TEST(RequestConversionTest, AnEmbeddingRequestNamesGenerationFieldsAndBadDimensions) {
  const auto expect = [](const v1::GenerateRequest& request, const RequestLimits& limits,
                         const std::string& fragment) {
    const absl::StatusOr<EngineRequest> converted = ToEngineRequest(request, limits);
    ASSERT_TRUE(absl::IsInvalidArgument(converted.status())) << fragment;
    EXPECT_NE(converted.status().message().find(fragment), absl::string_view::npos)
        << converted.status().message();
  };
  v1::GenerateRequest base = Valid();
  base.mutable_embedding();
  v1::GenerateRequest r = base;
  r.set_max_tokens(3);
  expect(r, EmbeddingLimits(false), "max_tokens");
  r = base;
  r.mutable_sampling()->set_temperature(0);
  expect(r, EmbeddingLimits(false), "sampling");
  r = base;
  r.add_stop_token_ids(2);
  expect(r, EmbeddingLimits(false), "stop_token_ids");
  r = base;
  r.mutable_embedding()->set_dimensions(8);
  expect(r, EmbeddingLimits(false), "not trained to be truncated");
  expect(r, EmbeddingLimits(true, {16, 24}), "16, 24");
  r.mutable_embedding()->set_dimensions(33);
  expect(r, EmbeddingLimits(true), "outside [1, 32]");
  r.mutable_embedding()->set_dimensions(16);
  const absl::StatusOr<EngineRequest> cut = ToEngineRequest(r, EmbeddingLimits(true, {16, 24}));
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->pooling->dimensions, 16);
  r.mutable_embedding()->set_dimensions(32);  // the whole length is always allowed
  EXPECT_TRUE(ToEngineRequest(r, EmbeddingLimits(false)).ok());
}

TEST(RequestConversionTest, TheLastMessageCarriesTheEmbedding) {
  EngineOutput output{.finish = FinishReason::kStop, .embedding = {0.5f, -0.25f}};
  v1::GenerateResponse response;
  SetFinal(output, &response);
  ASSERT_EQ(response.embedding_size(), 2);
  EXPECT_EQ(response.embedding(1), -0.25f);
  EXPECT_EQ(response.finish_reason(), ::llmserve::v1::FINISH_REASON_STOP);
}

}  // namespace
}  // namespace llmserve::worker
