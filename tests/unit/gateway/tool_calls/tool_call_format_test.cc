#include "gateway/tool_calls/tool_call_format.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"

namespace llmserve::gateway::tool_calls {
namespace {

using ::testing::HasSubstr;

// A real template of the chat-template corpus (tests/unit/common/chat_template/corpus/SOURCES.md).
std::string CorpusTemplate(const std::string& name) {
  std::ifstream file(std::string(::llmserve::testing::ChatTemplateCorpusDir()) + "/" + name +
                     ".jinja");
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

TEST(DetectToolCallFormatTest, RealTemplates) {
  const struct {
    const char* name;
    ToolCallFormat format;
  } cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::kLlama3Json},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolCallFormat::kMistral},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral},
      {"unsloth-mistral-Devstral-Small-2507", ToolCallFormat::kMistral},
      {"google-gemma-2-2b-it", ToolCallFormat::kNone},
      {"microsoft-Phi-3.5-mini-instruct", ToolCallFormat::kNone},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(DetectToolCallFormat(CorpusTemplate(c.name)), c.format) << c.name;
  }
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
