#include "gateway/reasoning/reasoning_format.h"

#include "gtest/gtest.h"

namespace llmserve::gateway::reasoning {
namespace {

TEST(ReasoningFormatTest, NamesRoundTrip) {
  for (ReasoningFormat format :
       {ReasoningFormat::kNone, ReasoningFormat::kDeepSeekR1, ReasoningFormat::kQwen3}) {
    absl::StatusOr<ReasoningFormat> parsed = ParseReasoningFormatName(ReasoningFormatName(format));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, format);
  }
  absl::StatusOr<ReasoningFormat> unknown = ParseReasoningFormatName("deepseek-r1");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "unknown reasoning parser 'deepseek-r1': expected one of deepseek_r1, qwen3, none");
}

TEST(ReasoningParsersTest, EmptyIsNoneForEveryModel) {
  absl::StatusOr<ReasoningParsers> parsers = ParseReasoningParsers("");
  ASSERT_TRUE(parsers.ok()) << parsers.status();
  EXPECT_EQ(parsers->For("any"), ReasoningFormat::kNone);
}

TEST(ReasoningParsersTest, ADefaultAndModels) {
  absl::StatusOr<ReasoningParsers> parsers =
      ParseReasoningParsers("qwen3, r1=deepseek_r1,plain = none");
  ASSERT_TRUE(parsers.ok()) << parsers.status();
  EXPECT_EQ(parsers->For("other"), ReasoningFormat::kQwen3);
  EXPECT_EQ(parsers->For("r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(parsers->For("plain"), ReasoningFormat::kNone);
}

TEST(ReasoningParsersTest, OnlyModels) {
  absl::StatusOr<ReasoningParsers> parsers = ParseReasoningParsers("r1=deepseek_r1");
  ASSERT_TRUE(parsers.ok()) << parsers.status();
  EXPECT_EQ(parsers->For("r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(parsers->For("other"), ReasoningFormat::kNone);
}

TEST(ReasoningParsersTest, RefusesWhatItCannotRead) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen",
       "entry 'qwen': unknown reasoning parser 'qwen': expected one of deepseek_r1, "
       "qwen3, none"},
      {"qwen3,deepseek_r1",
       "entry 'deepseek_r1': a second default parser (give at most one bare name; MODEL=PARSER "
       "for a model)"},
      {"a=qwen3,a=none", "entry 'a=none': model 'a' is given twice"},
      {"=qwen3", "entry '=qwen3': the model name is empty (MODEL=PARSER)"},
      {"qwen3,", "entry '': unknown reasoning parser '': expected one of deepseek_r1, qwen3, none"},
  };
  for (const auto& [flag, message] : cases) {
    absl::StatusOr<ReasoningParsers> parsers = ParseReasoningParsers(flag);
    ASSERT_FALSE(parsers.ok()) << flag;
    EXPECT_EQ(parsers.status().message(), message) << flag;
  }
}

}  // namespace
}  // namespace llmserve::gateway::reasoning
