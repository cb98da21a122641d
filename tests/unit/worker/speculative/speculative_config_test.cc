#include "worker/speculative/speculative_config.h"

#include "gtest/gtest.h"

namespace llmserve::worker {
namespace {

TEST(SpeculativeConfigTest, ParsesMethods) {
  EXPECT_EQ(*ParseSpeculativeMethod("none"), SpeculativeMethod::kNone);
  EXPECT_EQ(*ParseSpeculativeMethod("ngram"), SpeculativeMethod::kNgram);
  EXPECT_EQ(*ParseSpeculativeMethod("draft"), SpeculativeMethod::kDraft);
  for (const char* bad : {"", "NGRAM", "Draft", "eagle", "ngram "}) {
    const auto parsed = ParseSpeculativeMethod(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("expected none, ngram or draft"),
              absl::string_view::npos);
  }
  EXPECT_EQ(SpeculativeMethodName(SpeculativeMethod::kNgram), "ngram");
  EXPECT_EQ(SpeculativeMethodName(SpeculativeMethod::kNone), "none");
  EXPECT_EQ(SpeculativeMethodName(SpeculativeMethod::kDraft), "draft");
}

TEST(SpeculativeConfigTest, ValidationNamesTheField) {
  const SpeculativeConfig good{.method = SpeculativeMethod::kNgram};
  EXPECT_TRUE(ValidateSpeculativeConfig(good).ok());
  EXPECT_TRUE(
      ValidateSpeculativeConfig({.method = SpeculativeMethod::kDraft, .model = "/models/d"}).ok());
  struct Case {
    SpeculativeConfig config;
    const char* names;
  };
  const Case cases[] = {
      {{.method = SpeculativeMethod::kNgram, .num_speculative_tokens = 0},
       "num_speculative_tokens must be in [1, 16], got 0"},
      {{.method = SpeculativeMethod::kNgram, .num_speculative_tokens = 17},
       "num_speculative_tokens"},
      {{.method = SpeculativeMethod::kNgram, .prompt_lookup_min = 0}, "prompt_lookup_min"},
      {{.method = SpeculativeMethod::kNgram, .prompt_lookup_min = 5, .prompt_lookup_max = 4},
       "prompt_lookup_max must be in [prompt_lookup_min (5), 32], got 4"},
      {{.method = SpeculativeMethod::kNgram, .prompt_lookup_max = 33}, "prompt_lookup_max"},
      {{.method = SpeculativeMethod::kNgram, .disable_batch_size = -2},
       "speculative_disable_batch_size must be >= 0 (or -1 for the method's default), got -2"},
      {{.method = SpeculativeMethod::kDraft},
       "speculative_model must name the draft model's directory"},
      {{.method = SpeculativeMethod::kNgram, .model = "/models/draft"},
       "speculative_model is set, so speculative_method must be draft, not ngram"},
      {{.model = "/models/draft"}, "speculative_method must be draft, not none"},
      {{.method = SpeculativeMethod::kNgram, .model_int8 = true},
       "speculative_model_quantization is for speculative_method=draft only"},
      {{.method = SpeculativeMethod::kDraft, .num_speculative_tokens = 0, .model = "/m"},
       "num_speculative_tokens"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ValidateSpeculativeConfig(c.config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.names;
    EXPECT_NE(status.message().find(c.names), absl::string_view::npos) << status;
  }
  // The batch limit's default depends on the method.
  EXPECT_EQ(good.EffectiveDisableBatchSize(), 16);
  EXPECT_EQ((SpeculativeConfig{.method = SpeculativeMethod::kDraft, .model = "/m"})
                .EffectiveDisableBatchSize(),
            1);
  EXPECT_EQ((SpeculativeConfig{.method = SpeculativeMethod::kDraft, .disable_batch_size = 0})
                .EffectiveDisableBatchSize(),
            0);
  // Off: nothing else is read.
  EXPECT_TRUE(ValidateSpeculativeConfig({.num_speculative_tokens = 0}).ok());
}

}  // namespace
}  // namespace llmserve::worker
