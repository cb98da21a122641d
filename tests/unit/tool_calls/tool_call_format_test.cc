#include "gateway/tool_calls/tool_call_format.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/tool_calls/template_sources.h"

namespace llmserve::gateway::tool_calls {
namespace {

using ::testing::HasSubstr;

TEST(DetectToolCallFormatTest, RealTemplates) {
  EXPECT_EQ(DetectToolCallFormat(testing::kQwen25Template), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(testing::kQwen3Template), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(testing::kLlama31Template), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat(testing::kMistralSmall31ToolCallsTemplate),
            ToolCallFormat::kMistral);
}

TEST(DetectToolCallFormatTest, Llama32StyleWithoutPythonTag) {
  EXPECT_EQ(DetectToolCallFormat(
                R"({{- "Environment: ipython\n" }}{{- '{"name": "' + tool_call.name + '", ' }})"
                R"({{- '"parameters": ' }}{{- tool_call.arguments | tojson }})"),
            ToolCallFormat::kLlama3Json);
}

TEST(DetectToolCallFormatTest, TemplatesWithoutToolsAreNone) {
  EXPECT_EQ(DetectToolCallFormat(""), ToolCallFormat::kNone);
  EXPECT_EQ(DetectToolCallFormat("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"),
            ToolCallFormat::kNone);
  // "parameters" alone (no ipython role) is not Llama's convention.
  EXPECT_EQ(DetectToolCallFormat(R"({{ '"parameters": ' }})"), ToolCallFormat::kNone);
}

TEST(ToolCallFormatNameTest, RoundTripsAndRejectsUnknown) {
  for (ToolCallFormat format : {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                                ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    const auto parsed = ParseToolCallFormatName(ToolCallFormatName(format));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, format);
  }
  const auto bad = ParseToolCallFormatName("pythonic");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("hermes, llama3_json, mistral, none"));
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls
