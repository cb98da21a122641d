#include "gateway/tool_calls/parse_tool_calls.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/tool_calls/test_tools.h"

namespace llmserve::gateway::tool_calls {
namespace {

using ::llmserve::gateway::tool_calls::testing::TestTools;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;

// (name, arguments) of each call, for comparisons that ignore the random ids.
std::vector<std::pair<std::string, std::string>> Calls(const ParsedOutput& out) {
  std::vector<std::pair<std::string, std::string>> calls;
  for (const auto& call : out.calls) calls.emplace_back(call.name(), call.arguments());
  return calls;
}

using Call = std::pair<std::string, std::string>;

ParsedOutput Parse(ToolCallFormat format, const std::string& output) {
  return ParseToolCalls(format, output, TestTools());
}

TEST(HermesTest, SingleCall) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kHermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n"
            "</tool_call>");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(Calls(out), ElementsAre(Call("get_weather", R"({"location":"Paris"})")));
  EXPECT_THAT(out.calls[0].id(), MatchesRegex("call_[A-Za-z0-9]{24}"));
}

TEST(HermesTest, SeveralCallsGetDistinctIds) {
  const ParsedOutput out = Parse(ToolCallFormat::kHermes,
                                 "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n"
                                 "</tool_call>\n<tool_call>\n{\"name\": \"get-time_2\", "
                                 "\"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", "{}"), Call("get-time_2", R"({"tz":"UTC"})")));
  EXPECT_NE(out.calls[0].id(), out.calls[1].id());
}

TEST(HermesTest, ContentBeforeTheCallIsKept) {
  const ParsedOutput out = Parse(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": 1}}</tool_call>");
  EXPECT_EQ(out.content, "Let me check.\n");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", R"({"q":1})")));
}

TEST(HermesTest, TextAfterTheCallIsContent) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kHermes,
            "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>\n\nDone.");
  EXPECT_EQ(out.content, "\n\nDone.");
  EXPECT_EQ(out.calls.size(), 1u);
}

TEST(HermesTest, UnclosedCallAtTheEndCounts) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", "{}")));
  EXPECT_EQ(out.content, "");
}

TEST(HermesTest, MalformedJsonStaysContent) {
  const std::string text =
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": }}\n</tool_call>";
  const ParsedOutput out = Parse(ToolCallFormat::kHermes, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(HermesTest, CutOffCallStaysContent) {
  const std::string text = "Sure.<tool_call>\n{\"name\": \"search\", \"argum";
  const ParsedOutput out = Parse(ToolCallFormat::kHermes, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(HermesTest, UnknownOrMissingNameStaysContentAndOtherCallsSurvive) {
  const std::string bad =
      "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>"
      "<tool_call>{\"arguments\": {}}</tool_call>";
  const ParsedOutput out =
      Parse(ToolCallFormat::kHermes,
            bad + "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(out.content, bad);
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", "{}")));
}

TEST(HermesTest, NestedUnicodeAndEscapedArguments) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kHermes,
            "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"say \\\"h\\u00e9\\\" "
            "\xe2\x9c\x93\", \"opts\": {\"deep\": [1, {\"x\": null}], \"tag\": \"</tool_call>\"}}}"
            "</tool_call>");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search",
                                           "{\"q\":\"say \\\"h\xc3\xa9\\\" \xe2\x9c\x93\","
                                           "\"opts\":{\"deep\":[1,{\"x\":null}],"
                                           "\"tag\":\"</tool_call>\"}}")));
}

TEST(HermesTest, ArgumentsGivenAsAJsonString) {
  const ParsedOutput out = Parse(
      ToolCallFormat::kHermes,
      "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"x\\\"}\"}</tool_call>");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", R"({"q":"x"})")));
}

TEST(HermesTest, NoMarkerIsAllContent) {
  const ParsedOutput out = Parse(ToolCallFormat::kHermes, "Hello <tool not a call");
  EXPECT_EQ(out.content, "Hello <tool not a call");
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(HermesTest, TooDeepJsonStaysContent) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  const std::string text =
      "<tool_call>{\"name\": \"search\", \"arguments\": {\"a\": " + deep + "}}</tool_call>";
  const ParsedOutput out = Parse(ToolCallFormat::kHermes, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(Llama3JsonTest, ParametersAndArgumentsKeys) {
  EXPECT_THAT(Calls(Parse(ToolCallFormat::kLlama3Json,
                          R"({"name": "get_weather", "parameters": {"location": "Oslo"}})")),
              ElementsAre(Call("get_weather", R"({"location":"Oslo"})")));
  EXPECT_THAT(Calls(Parse(ToolCallFormat::kLlama3Json,
                          R"({"name": "get_weather", "arguments": {"location": "Oslo"}})")),
              ElementsAre(Call("get_weather", R"({"location":"Oslo"})")));
}

TEST(Llama3JsonTest, BothKeysIsNotACall) {
  const std::string text = R"({"name": "search", "parameters": {}, "arguments": {}})";
  const ParsedOutput out = Parse(ToolCallFormat::kLlama3Json, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(Llama3JsonTest, PythonTagAndSemicolonSeparatedCalls) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kLlama3Json,
            "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a\"}}; "
            "{\"name\": \"get-time_2\", \"parameters\": {}}");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", R"({"q":"a"})"), Call("get-time_2", "{}")));
}

TEST(Llama3JsonTest, ContentBeforePythonTag) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kLlama3Json,
            "I will search.<|python_tag|>{\"name\": \"search\", \"parameters\": {}}");
  EXPECT_EQ(out.content, "I will search.");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", "{}")));
}

TEST(Llama3JsonTest, LeadingWhitespaceBeforeBareCall) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kLlama3Json, "\n  {\"name\": \"search\", \"parameters\": {}}");
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(out.calls.size(), 1u);
}

TEST(Llama3JsonTest, JsonThatIsNotACallIsContent) {
  const std::string text = R"({"answer": 42, "name": "search"})";
  const ParsedOutput out = Parse(ToolCallFormat::kLlama3Json, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(Llama3JsonTest, BraceAfterTextIsNotACall) {
  const std::string text = R"(Here: {"name": "search", "parameters": {}})";
  const ParsedOutput out = Parse(ToolCallFormat::kLlama3Json, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(Llama3JsonTest, MalformedJsonStaysContent) {
  const std::string text = R"({"name": "search", "parameters": {"q": 'x'}})";
  const ParsedOutput out = Parse(ToolCallFormat::kLlama3Json, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(Llama3JsonTest, UnknownFunctionStaysContent) {
  const std::string text = R"(<|python_tag|>{"name": "brave_search", "parameters": {}})";
  const ParsedOutput out = Parse(ToolCallFormat::kLlama3Json, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(MistralTest, ArrayForm) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kMistral,
            "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\", "
            "\"unit\": \"c\"}}, {\"name\": \"search\", \"arguments\": {\"q\": \"\\u00fcber\"}}]");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(Calls(out), ElementsAre(Call("get_weather", R"({"location":"Rome","unit":"c"})"),
                                      Call("search",
                                           "{\"q\":\"\xc3\xbc"
                                           "ber\"}")));
}

TEST(MistralTest, ContentBeforeTheCalls) {
  const ParsedOutput out = Parse(
      ToolCallFormat::kMistral, "Checking.[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}]");
  EXPECT_EQ(out.content, "Checking.");
  EXPECT_THAT(Calls(out), ElementsAre(Call("search", "{}")));
}

TEST(MistralTest, NameArgsForm) {
  const ParsedOutput out =
      Parse(ToolCallFormat::kMistral,
            "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Lima\"}[TOOL_CALLS]search[ARGS]{}");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(Calls(out),
              ElementsAre(Call("get_weather", R"({"location":"Lima"})"), Call("search", "{}")));
}

TEST(MistralTest, NameFormWithoutArgsTokenAndWithCallId) {
  EXPECT_THAT(Calls(Parse(ToolCallFormat::kMistral, "[TOOL_CALLS]search{\"q\": 2}")),
              ElementsAre(Call("search", R"({"q":2})")));
  EXPECT_THAT(
      Calls(Parse(ToolCallFormat::kMistral, "[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]{}")),
      ElementsAre(Call("search", "{}")));
}

TEST(MistralTest, OneInvalidElementMakesTheArrayContent) {
  const std::string text =
      "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}, {\"name\": \"nope\", "
      "\"arguments\": {}}]";
  const ParsedOutput out = Parse(ToolCallFormat::kMistral, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(MistralTest, MalformedAndUnknownNameFormsStayContent) {
  for (const std::string text :
       {"[TOOL_CALLS]search[ARGS]{\"q\": }", "[TOOL_CALLS]nope[ARGS]{}", "[TOOL_CALLS] hello"}) {
    const ParsedOutput out = Parse(ToolCallFormat::kMistral, text);
    EXPECT_EQ(out.content, text) << text;
    EXPECT_THAT(out.calls, IsEmpty()) << text;
  }
}

TEST(NoFormatTest, EverythingIsContent) {
  const std::string text = "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
  const ParsedOutput out = Parse(ToolCallFormat::kNone, text);
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

TEST(NoToolsTest, NoCallIsKnown) {
  const std::string text = "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
  const ParsedOutput out = ParseToolCalls(ToolCallFormat::kHermes, text, {});
  EXPECT_EQ(out.content, text);
  EXPECT_THAT(out.calls, IsEmpty());
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls
