// Where a reply starts, read from prompts that real reasoning models' chat templates render (the
// chat-template corpus, tests/unit/common/chat_template/corpus/SOURCES.md), rendered as
// transformers renders them without chat_template_kwargs.

#include <fstream>
#include <sstream>
#include <string>

#include "common/chat_template/chat_template.h"
#include "gateway/reasoning/reasoning_parser.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"

namespace llmserve::gateway::reasoning {
namespace {

std::string RenderCorpusTemplate(const std::string& name) {
  std::ifstream file(std::string(::llmserve::testing::ChatTemplateCorpusDir()) + "/" + name +
                     ".jinja");
  std::stringstream source;
  source << file.rdbuf();
  absl::StatusOr<common::ChatTemplate> parsed = common::ChatTemplate::Parse(source.str());
  EXPECT_TRUE(parsed.ok()) << name << ": " << parsed.status();
  if (!parsed.ok()) return "";
  common::ChatTemplateInput input;
  input.messages.push_back({.role = "user", .content = "What is 1+1?"});
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  absl::StatusOr<std::string> prompt = parsed->Render(input);
  EXPECT_TRUE(prompt.ok()) << name << ": " << prompt.status();
  return prompt.ok() ? *prompt : "";
}

TEST(RealTemplatesTest, WhereTheReplyStarts) {
  const struct {
    const char* name;
    ReasoningFormat format;
    ReasoningStart start;
  } cases[] = {
      // The template opens the block: the reply holds only </think>.
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", ReasoningFormat::kDeepSeekR1,
       ReasoningStart::kReasoning},
      // llama.cpp's copy adds `{% if not enable_thinking %}</think>{% endif %}` after it, so
      // without the kwarg the prompt closes the block and the reply is all answer.
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ReasoningFormat::kDeepSeekR1,
       ReasoningStart::kContent},
      // Without `thinking`, V3.1 renders its non-thinking prompt, which closes the block.
      {"deepseek-ai-DeepSeek-V3.1", ReasoningFormat::kDeepSeekR1, ReasoningStart::kContent},
      // Qwen3 leaves the block to the model; Qwen3.5 opens it unless enable_thinking is false.
      {"Qwen-Qwen3-0.6B", ReasoningFormat::kQwen3, ReasoningStart::kUndecided},
      {"Qwen3.5-4B", ReasoningFormat::kQwen3, ReasoningStart::kReasoning},
      // This copy of QwQ's template closes the block unless enable_thinking is set, as
      // transformers renders it without the kwarg.
      {"Qwen-QwQ-32B", ReasoningFormat::kDeepSeekR1, ReasoningStart::kContent},
  };
  for (const auto& c : cases) {
    const std::string prompt = RenderCorpusTemplate(c.name);
    ASSERT_FALSE(prompt.empty()) << c.name;
    EXPECT_EQ(StartFor(c.format, prompt), c.start) << c.name << ":\n" << prompt;
  }
}

}  // namespace
}  // namespace llmserve::gateway::reasoning
