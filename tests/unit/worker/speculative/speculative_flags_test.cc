#include "worker/speculative/speculative_flags.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, speculative_method);
ABSL_DECLARE_FLAG(std::string, speculative_model);
ABSL_DECLARE_FLAG(std::string, speculative_model_quantization);
ABSL_DECLARE_FLAG(int, num_speculative_tokens);

namespace llmserve::worker {
namespace {

class SpeculativeFlagsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;
};

TEST_F(SpeculativeFlagsTest, DefaultsAreOff) {
  const auto config = SpeculativeConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->enabled());
  EXPECT_TRUE(config->model.empty());
  EXPECT_FALSE(config->model_int8);
}

TEST_F(SpeculativeFlagsTest, ADraftModelWithInt8) {
  absl::SetFlag(&FLAGS_speculative_method, "draft");
  absl::SetFlag(&FLAGS_speculative_model, "/models/draft");
  absl::SetFlag(&FLAGS_speculative_model_quantization, "int8");
  absl::SetFlag(&FLAGS_num_speculative_tokens, 5);
  const auto config = SpeculativeConfigFromFlags();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->method, SpeculativeMethod::kDraft);
  EXPECT_EQ(config->model, "/models/draft");
  EXPECT_TRUE(config->model_int8);
  EXPECT_EQ(config->num_speculative_tokens, 5);
}

TEST_F(SpeculativeFlagsTest, ErrorsNameTheFlag) {
  absl::SetFlag(&FLAGS_speculative_method, "draft");
  EXPECT_EQ(SpeculativeConfigFromFlags().status().message(),
            "--speculative_model must name the draft model's directory for "
            "speculative_method=draft");
  absl::SetFlag(&FLAGS_speculative_model, "/models/draft");
  absl::SetFlag(&FLAGS_speculative_model_quantization, "fp4");
  EXPECT_EQ(SpeculativeConfigFromFlags().status().message(),
            "--speculative_model_quantization: 'fp4' is not none or int8");
  absl::SetFlag(&FLAGS_speculative_model_quantization, "int8");
  absl::SetFlag(&FLAGS_speculative_method, "ngram");
  EXPECT_EQ(SpeculativeConfigFromFlags().status().message(),
            "--speculative_model is set, so speculative_method must be draft, not ngram");
  absl::SetFlag(&FLAGS_speculative_method, "medusa");
  EXPECT_EQ(SpeculativeConfigFromFlags().status().message(),
            "--speculative_method: unknown speculative method 'medusa' (expected none, ngram or "
            "draft)");
}

}  // namespace
}  // namespace llmserve::worker
