#include "gateway/tool_calls/streaming_tool_call_parser.h"

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gateway/tool_calls/parse_tool_calls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/tool_calls/test_tools.h"

namespace llmserve::gateway::tool_calls {
namespace {

using ::llmserve::gateway::tool_calls::testing::TestTools;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

using Call = std::pair<std::string, std::string>;

struct Streamed {
  std::string content;
  std::vector<Call> calls;
  bool saw_tool_calls = false;
};

// Streams `output` cut at `cuts` (increasing offsets) and checks the delta protocol on the way:
// content only grows towards `expected_content` (so no marker prefix ever goes out and is taken
// back), a call's id and name come in its first delta only, indices count up from 0, the
// fragments of a call concatenate to its final arguments, which are valid JSON.
Streamed Stream(ToolCallFormat format, const std::string& output, const std::vector<size_t>& cuts,
                const std::string& expected_content) {
  StreamingToolCallParser parser(format, TestTools());
  Streamed out;
  std::vector<std::string> ids;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
  const auto take = [&](const StreamDelta& delta) {
    out.content += delta.content;
    EXPECT_EQ(expected_content.substr(0, out.content.size()), out.content)
        << "content went out that the whole output does not have";
    for (const ToolCallDelta& call : delta.tool_calls) {
      if (call.index == static_cast<int>(ids.size())) {
        EXPECT_FALSE(call.id.empty());
        EXPECT_FALSE(call.name.empty());
        ids.push_back(call.id);
        names.push_back(call.name);
        arguments.push_back(call.arguments);
      } else {
        ASSERT_LT(call.index, static_cast<int>(ids.size()));
        EXPECT_TRUE(call.id.empty());
        EXPECT_TRUE(call.name.empty());
        arguments[call.index] += call.arguments;
      }
    }
  };
  size_t start = 0;
  for (size_t cut : cuts) {
    take(parser.Feed(output.substr(start, cut - start)));
    start = cut;
  }
  take(parser.Feed(output.substr(start)));
  take(parser.Finish());
  EXPECT_TRUE(parser.Feed("more").empty());
  const auto& calls = parser.calls();
  EXPECT_EQ(calls.size(), ids.size());
  for (size_t i = 0; i < calls.size() && i < ids.size(); ++i) {
    EXPECT_EQ(calls[i].id(), ids[i]);
    EXPECT_EQ(calls[i].name(), names[i]);
    EXPECT_EQ(calls[i].arguments(), arguments[i]);
    EXPECT_TRUE(nlohmann::json::accept(arguments[i])) << arguments[i];
    out.calls.emplace_back(calls[i].name(), calls[i].arguments());
  }
  out.saw_tool_calls = parser.saw_tool_calls();
  return out;
}

std::vector<Call> WholeCalls(const ParsedOutput& parsed) {
  std::vector<Call> calls;
  for (const auto& call : parsed.calls) calls.emplace_back(call.name(), call.arguments());
  return calls;
}

struct Case {
  ToolCallFormat format;
  std::string output;
};

// Outputs where streaming must agree with the non-streamed parse exactly.
std::vector<Case> AgreeingCases() {
  return {
      {ToolCallFormat::kHermes, "Plain answer, no calls at all."},
      {ToolCallFormat::kHermes, "  \n"},
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n"
       "</tool_call>"},
      {ToolCallFormat::kHermes,
       "Let me look.\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a "
       "\\\"b\\\" \xc3\xa9\", \"n\": {\"x\": [1, 2.5, true, null]}}}\n</tool_call>\n"
       "<tool_call>\n{\"arguments\": {}, \"name\": \"get-time_2\"}\n</tool_call>\nAfter."},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"nam\": 1}</tool_call> and <tool_ca"},
      {ToolCallFormat::kHermes, "<tool_call> not json </tool_call><tool_call>"},
      {ToolCallFormat::kHermes, "<<tool_call>{\"name\": \"search\", \"arguments\": {}}"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_cal>"},
      {ToolCallFormat::kLlama3Json,
       "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}; "
       "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}"},
      {ToolCallFormat::kLlama3Json, " {\"name\": \"search\", \"parameters\": {}}\n"},
      {ToolCallFormat::kLlama3Json, "Text first {\"name\": \"search\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3Json, "{\"result\": [1, 2, {\"a\": \"}\"}]} trailing"},
      {ToolCallFormat::kLlama3Json,
       "I'll call it.<|python_tag|>{\"name\": \"x\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3Json, "<|python"},
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\"}}, "
       "{\"name\": \"search\", \"arguments\": {\"q\": \"[TOOL_CALLS]\"}}]"},
      {ToolCallFormat::kMistral,
       "Sure.[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Lima\"}"
       "[TOOL_CALLS]search[CALL_ID]abc123xyz[ARGS]{}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search{\"q\": \"}\"}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}] tail"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]nope[ARGS]{\"a\": 1}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]sear"},
      {ToolCallFormat::kMistral, "[TOOL_"},
      {ToolCallFormat::kNone, "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>"},
  };
}

void ExpectAgrees(const Case& c, const std::vector<size_t>& cuts) {
  const ParsedOutput whole = ParseToolCalls(c.format, c.output, TestTools());
  const Streamed streamed = Stream(c.format, c.output, cuts, whole.content);
  EXPECT_EQ(streamed.content, whole.content);
  EXPECT_EQ(streamed.calls, WholeCalls(whole));
  EXPECT_EQ(streamed.saw_tool_calls, !whole.calls.empty());
}

TEST(StreamingToolCallParserTest, EverySplitPointAgreesWithTheWholeParse) {
  for (const Case& c : AgreeingCases()) {
    SCOPED_TRACE(c.output);
    for (size_t cut = 0; cut <= c.output.size(); ++cut) ExpectAgrees(c, {cut});
  }
}

TEST(StreamingToolCallParserTest, ByteAtATimeAgreesWithTheWholeParse) {
  for (const Case& c : AgreeingCases()) {
    SCOPED_TRACE(c.output);
    std::vector<size_t> cuts;
    for (size_t i = 1; i < c.output.size(); ++i) cuts.push_back(i);
    ExpectAgrees(c, cuts);
  }
}

TEST(StreamingToolCallParserTest, RandomChunkingsAgreeWithTheWholeParse) {
  std::mt19937 rng(17);
  for (const Case& c : AgreeingCases()) {
    SCOPED_TRACE(c.output);
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<size_t> cuts;
      size_t at = 0;
      while (true) {
        at += std::uniform_int_distribution<size_t>(1, 8)(rng);
        if (at >= c.output.size()) break;
        cuts.push_back(at);
      }
      ExpectAgrees(c, cuts);
    }
  }
}

// Random mixes of markers, partial markers, JSON pieces, text and whitespace: whatever the model
// writes, every chunking gives the same result as one chunk, and the delta protocol holds.
TEST(StreamingToolCallParserTest, RandomOutputsAreChunkingInvariant) {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "<tool",
                                           "<|python_tag|>",
                                           "<|py",
                                           "[TOOL_CALLS]",
                                           "[TOOL",
                                           "[ARGS]",
                                           "[CALL_ID]",
                                           "search",
                                           "get_weather",
                                           "nope",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "{\"name\": ",
                                           "\"search\"",
                                           ", \"arguments\": ",
                                           ", \"parameters\": ",
                                           "{\"q\": \"x\"}",
                                           "\"",
                                           "\\",
                                           ";",
                                           ",",
                                           " ",
                                           "\n",
                                           "text",
                                           "\xc3\xa9",
                                           ":",
                                           "1",
                                           "null"};
  std::mt19937 rng(1717);
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string output;
      const int count = std::uniform_int_distribution<int>(1, 24)(rng);
      for (int i = 0; i < count; ++i) {
        output += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
      }
      SCOPED_TRACE(output);
      StreamingToolCallParser whole(format, TestTools());
      std::string content = whole.Feed(output).content;
      content += whole.Finish().content;
      std::vector<Call> calls;
      for (const auto& call : whole.calls()) calls.emplace_back(call.name(), call.arguments());
      std::vector<size_t> cuts;
      for (size_t i = 1; i < output.size(); ++i) cuts.push_back(i);
      const Streamed bytes = Stream(format, output, cuts, content);
      EXPECT_EQ(bytes.content, content);
      EXPECT_EQ(bytes.calls, calls);
      // Nothing of a call goes out early, so streaming is exactly the non-streamed parse.
      const ParsedOutput parsed = ParseToolCalls(format, output, TestTools());
      EXPECT_EQ(parsed.content, content);
      EXPECT_EQ(WholeCalls(parsed), calls);
    }
  }
}

// Nothing of a call goes out before its JSON closed and validated; then all of it at once.
TEST(StreamingToolCallParserTest, CallGoesOutWholeOnceItsJsonIsComplete) {
  StreamingToolCallParser parser(ToolCallFormat::kHermes, TestTools());
  StreamDelta delta = parser.Feed("Hi <tool");
  EXPECT_EQ(delta.content, "Hi ");
  EXPECT_TRUE(parser.Feed("_call>\n{\"name\": \"get_weather\", \"arguments\": {\"loc").empty());
  EXPECT_FALSE(parser.saw_tool_calls());
  delta = parser.Feed("ation\": \"Paris\"}}\n</tool_call>");
  ASSERT_EQ(delta.tool_calls.size(), 1u);
  EXPECT_EQ(delta.tool_calls[0].index, 0);
  EXPECT_FALSE(delta.tool_calls[0].id.empty());
  EXPECT_EQ(delta.tool_calls[0].name, "get_weather");
  EXPECT_EQ(delta.tool_calls[0].arguments, R"({"location":"Paris"})");
  EXPECT_TRUE(parser.saw_tool_calls());
  EXPECT_TRUE(parser.Finish().empty());
}

TEST(StreamingToolCallParserTest, MistralArrayCallsGoOutWhenTheArrayCloses) {
  StreamingToolCallParser parser(ToolCallFormat::kMistral, TestTools());
  EXPECT_TRUE(parser.Feed("[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}").empty());
  EXPECT_TRUE(parser.Feed("}, {\"name\": \"get-time_2\"").empty());
  const StreamDelta delta = parser.Feed(", \"arguments\": {\"a\": [1]}}]");
  ASSERT_EQ(delta.tool_calls.size(), 2u);
  EXPECT_EQ(delta.tool_calls[0].index, 0);
  EXPECT_EQ(delta.tool_calls[0].name, "search");
  EXPECT_EQ(delta.tool_calls[0].arguments, "{}");
  EXPECT_EQ(delta.tool_calls[1].index, 1);
  EXPECT_EQ(delta.tool_calls[1].name, "get-time_2");
  EXPECT_EQ(delta.tool_calls[1].arguments, R"({"a":[1]})");
  EXPECT_TRUE(parser.Finish().empty());
}

// A call that is malformed, invalid or cut off (max_tokens) is never a call, streamed or not: its
// text is content, byte for byte, for any split; other calls of the output still count.
TEST(StreamingToolCallParserTest, MalformedOrCutCallsAreContentForEverySplit) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<Case> cases = {
      // A literal that is not JSON.
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"search\", \"arguments\": {\"a\": tru}}"},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": }}</tool_call>Later."},
      // A lone surrogate escape is not a character: the arguments would not be UTF-8.
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"\\ud800\"}}</tool_call>"},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"a\\udc00b\"}}</tool_call>"},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"\\ud800\\u0041\"}}"},
      // Raw bytes that are not UTF-8.
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"\xff\"}}</tool_call>"},
      // Numbers beyond double's range.
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"n\": 1e99999}}</tool_call>"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"search\", \"parameters\": {\"n\": -1E400}}"},
      // Deeper than kMaxJsonDepth.
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": {\"a\": " + deep + "}}</tool_call>"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"a\": " + deep + "}"},
      // Cut off by max_tokens.
      {ToolCallFormat::kHermes,
       "Ok.<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"ab"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": 1"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"search\", \"parameters\": {\"q\""},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"q\": tru"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[AR"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}, {\"na"},
      // A Mistral array with one element that is not a call is content as a whole.
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}, {\"name\": \"nope\", "
       "\"arguments\": {}}, {\"name\": \"search\", \"arguments\": {}}] Done."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.output);
    const ParsedOutput whole = ParseToolCalls(c.format, c.output, TestTools());
    EXPECT_EQ(whole.content, c.output);
    EXPECT_THAT(whole.calls, IsEmpty());
    for (size_t cut = 0; cut <= c.output.size(); ++cut) {
      const Streamed streamed = Stream(c.format, c.output, {cut}, c.output);
      EXPECT_EQ(streamed.content, c.output);
      EXPECT_THAT(streamed.calls, IsEmpty());
      EXPECT_FALSE(streamed.saw_tool_calls);
    }
  }
}

TEST(StreamingToolCallParserTest, ABadCallLeavesTheGoodOnesStanding) {
  const std::string bad = "<tool_call>{\"name\": \"search\", \"arguments\": {\"n\": 1e99999}}";
  const std::string output = absl::StrCat(
      "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"\\ud83d\\ude00\", \"n\": 1e300}}"
      "</tool_call>",
      bad);
  const ParsedOutput whole = ParseToolCalls(ToolCallFormat::kHermes, output, TestTools());
  EXPECT_EQ(whole.content, bad);
  EXPECT_THAT(WholeCalls(whole),
              ElementsAre(Call("search", "{\"q\":\"\xf0\x9f\x98\x80\",\"n\":1e+300}")));
  for (size_t cut = 0; cut <= output.size(); ++cut)
    ExpectAgrees({ToolCallFormat::kHermes, output}, {cut});
}

// The deepest arguments accepted: the call object and kMaxJsonDepth - 1 levels inside it.
TEST(StreamingToolCallParserTest, DepthBoundIsTheDocumentedOne) {
  const auto output = [](int levels) {
    return absl::StrCat("<tool_call>{\"name\": \"search\", \"arguments\": {\"a\": ",
                        std::string(levels, '['), std::string(levels, ']'), "}}</tool_call>");
  };
  // The call object and the arguments object are two levels.
  EXPECT_EQ(
      ParseToolCalls(ToolCallFormat::kHermes, output(kMaxJsonDepth - 2), TestTools()).calls.size(),
      1u);
  EXPECT_THAT(ParseToolCalls(ToolCallFormat::kHermes, output(kMaxJsonDepth - 1), TestTools()).calls,
              IsEmpty());
}

TEST(StreamingToolCallParserTest, HeldBackMarkerPrefixIsFlushedAtTheEnd) {
  StreamingToolCallParser parser(ToolCallFormat::kHermes, TestTools());
  EXPECT_EQ(parser.Feed("a <tool_ca").content, "a ");
  EXPECT_EQ(parser.Finish().content, "<tool_ca");
  EXPECT_FALSE(parser.saw_tool_calls());
}

TEST(StreamingToolCallParserTest, ManyCallsAreBounded) {
  std::string output;
  for (int i = 0; i < kMaxToolCalls + 5; ++i) {
    output += "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>";
  }
  const ParsedOutput whole = ParseToolCalls(ToolCallFormat::kHermes, output, TestTools());
  EXPECT_EQ(whole.calls.size(), static_cast<size_t>(kMaxToolCalls));
  EXPECT_FALSE(whole.content.empty());
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls
