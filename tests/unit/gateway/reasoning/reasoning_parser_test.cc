#include "gateway/reasoning/reasoning_parser.h"

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/utf8/utf8.h"
#include "gtest/gtest.h"

namespace llmserve::gateway::reasoning {
namespace {

struct Case {
  const char* name;
  ReasoningStart start;
  std::string output;
  std::string reasoning;
  std::string content;
  bool reasoned;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// "é" is 2 bytes, "思" 3, "🤔" 4: cuts fall inside each.
const Case kCases[] = {
    // DeepSeek-R1's template opened the block: only </think> appears.
    {"open_in_prompt", ReasoningStart::kReasoning, "Add them: 2.\n</think>\n\nIt is 2.",
     "Add them: 2.\n", "\n\nIt is 2.", true},
    // Older R1 checkpoints write <think> themselves.
    {"model_opens", ReasoningStart::kReasoning, "<think>\nhmm</think>Yes.", "\nhmm", "Yes.", true},
    {"model_opens_after_space", ReasoningStart::kUndecided, "\n <think>a</think>b", "a", "b", true},
    // Cut by max_tokens: all reasoning, a partial tag included.
    {"unterminated", ReasoningStart::kReasoning, "still thinking </thi", "still thinking </thi", "",
     true},
    {"unterminated_opened", ReasoningStart::kUndecided, "<think>so far", "so far", "", true},
    {"ends_at_close", ReasoningStart::kReasoning, "done</think>", "done", "", true},
    {"empty_block", ReasoningStart::kUndecided, "<think>\n\n</think>\n\nHi.", "\n\n", "\n\nHi.",
     true},
    // Qwen3 answering without a think block: all content, tags later on are text.
    {"no_block", ReasoningStart::kUndecided, "Hi <think> there</think>.", "",
     "Hi <think> there</think>.", false},
    {"whitespace_then_text", ReasoningStart::kUndecided, "\n\nHi", "", "\n\nHi", false},
    {"partial_open_then_text", ReasoningStart::kUndecided, "<thin k>", "", "<thin k>", false},
    {"only_partial_open", ReasoningStart::kUndecided, "<thi", "", "<thi", false},
    // The prompt closed the block (thinking off): tags in the output are text.
    {"closed_in_prompt", ReasoningStart::kContent, "<think>x</think>y", "", "<think>x</think>y",
     false},
    // A tool call inside the reasoning is reasoning text; only the content is parsed for calls.
    {"tool_call_in_reasoning", ReasoningStart::kReasoning,
     "maybe <tool_call>{\"name\": \"f\"}</tool_call>?</think><tool_call>{}</tool_call>",
     "maybe <tool_call>{\"name\": \"f\"}</tool_call>?", "<tool_call>{}</tool_call>", true},
    {"near_misses", ReasoningStart::kReasoning, "</thinking> <</think>>", "</thinking> <", ">",
     true},
    {"second_close_is_content", ReasoningStart::kReasoning, "a</think>b</think>c", "a",
     "b</think>c", true},
    {"utf8", ReasoningStart::kReasoning, "é思🤔</think>🤔é思", "é思🤔", "🤔é思",
     true},
    {"utf8_before_tag", ReasoningStart::kUndecided, "🤔<think>思</think>é", "",
     "🤔<think>思</think>é", false},
    {"empty", ReasoningStart::kUndecided, "", "", "", false},
};

class ReasoningParserTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReasoningParserTest, WholeOutput) {
  const Case& c = GetParam();
  const ReasoningDelta all = SplitReasoning(c.start, c.output);
  EXPECT_EQ(all.reasoning, c.reasoning);
  EXPECT_EQ(all.content, c.content);
  StreamingReasoningParser parser(c.start);
  parser.Feed(c.output);
  parser.Finish();
  EXPECT_EQ(parser.reasoned(), c.reasoned);
}

// Every piece is whole characters and reasoning never follows content, for every way of cutting
// the output in two and in three (a tag split across deltas, a character split inside its bytes),
// and one byte at a time.
void CheckStream(const Case& c, const std::vector<size_t>& cuts) {
  StreamingReasoningParser parser(c.start);
  std::string reasoning;
  std::string content;
  const auto take = [&](const ReasoningDelta& delta) {
    EXPECT_TRUE(common::utf8::IsValid(delta.reasoning)) << delta.reasoning;
    EXPECT_TRUE(common::utf8::IsValid(delta.content)) << delta.content;
    if (!delta.reasoning.empty()) {
      EXPECT_TRUE(content.empty()) << "reasoning after content";
    }
    reasoning += delta.reasoning;
    content += delta.content;
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    take(parser.Feed(absl::string_view(c.output).substr(from, cut - from)));
    from = cut;
  }
  take(parser.Feed(absl::string_view(c.output).substr(from)));
  take(parser.Finish());
  std::string where;
  for (size_t cut : cuts) where += std::to_string(cut) + " ";
  EXPECT_EQ(reasoning, c.reasoning) << "cuts " << where;
  EXPECT_EQ(content, c.content) << "cuts " << where;
  EXPECT_EQ(parser.reasoned(), c.reasoned) << "cuts " << where;
}

TEST_P(ReasoningParserTest, StreamedAtEveryCut) {
  const Case& c = GetParam();
  const size_t n = c.output.size();
  for (size_t i = 0; i <= n; ++i) {
    CheckStream(c, {i});
    for (size_t j = i; j <= n; ++j) CheckStream(c, {i, j});
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < n; ++i) bytes.push_back(i);
  CheckStream(c, bytes);
}

INSTANTIATE_TEST_SUITE_P(Outputs, ReasoningParserTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

TEST(ReasoningParserStateTest, InReasoningUntilTheBlockCloses) {
  StreamingReasoningParser parser(ReasoningStart::kReasoning);
  EXPECT_TRUE(parser.in_reasoning());
  EXPECT_EQ(parser.Feed("a</thi").reasoning, "a");
  EXPECT_TRUE(parser.in_reasoning());
  const ReasoningDelta delta = parser.Feed("nk>b");
  EXPECT_EQ(delta.reasoning, "");
  EXPECT_EQ(delta.content, "b");
  EXPECT_FALSE(parser.in_reasoning());
}

TEST(ReasoningParserStateTest, UndecidedHoldsOnlyWhatMayOpenTheBlock) {
  StreamingReasoningParser parser(ReasoningStart::kUndecided);
  EXPECT_EQ(parser.Feed("\n<th").content, "");
  const ReasoningDelta delta = parser.Feed("e");
  EXPECT_EQ(delta.content, "\n<the");
  EXPECT_FALSE(parser.in_reasoning());
  EXPECT_FALSE(parser.reasoned());
}

struct StartCase {
  ReasoningFormat format;
  const char* prompt_tail;
  ReasoningStart start;
};

TEST(StartForTest, ReadsTheEndOfThePrompt) {
  const StartCase cases[] = {
      // DeepSeek-R1-Distill's generation prompt.
      {ReasoningFormat::kDeepSeekR1, "<｜Assistant｜><think>\n", ReasoningStart::kReasoning},
      // Older R1 templates: the model opens the block, and always reasons.
      {ReasoningFormat::kDeepSeekR1, "<｜Assistant｜>", ReasoningStart::kReasoning},
      {ReasoningFormat::kDeepSeekR1, "<｜Assistant｜></think>", ReasoningStart::kContent},
      // Qwen3: the model opens the block itself, or not.
      {ReasoningFormat::kQwen3, "<|im_start|>assistant\n", ReasoningStart::kUndecided},
      // Qwen3 with enable_thinking false.
      {ReasoningFormat::kQwen3, "<|im_start|>assistant\n<think>\n\n</think>\n\n",
       ReasoningStart::kContent},
      // Qwen3-Thinking-2507 opens it in the prompt.
      {ReasoningFormat::kQwen3, "<|im_start|>assistant\n<think>\n", ReasoningStart::kReasoning},
      // A history's closed block, then a new turn: decided by the end only.
      {ReasoningFormat::kQwen3, "</think>\n\nIt is 2.<|im_end|>\n<|im_start|>assistant\n",
       ReasoningStart::kUndecided},
  };
  for (const StartCase& c : cases) {
    EXPECT_EQ(StartFor(c.format, c.prompt_tail), c.start)
        << ReasoningFormatName(c.format) << " " << c.prompt_tail;
  }
}

}  // namespace
}  // namespace llmserve::gateway::reasoning
