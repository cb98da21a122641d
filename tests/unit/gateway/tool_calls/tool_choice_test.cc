#include "gateway/tool_calls/tool_choice.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gateway/tool_calls/streaming_constrained_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/tool_calls/test_tools.h"

namespace llmserve::gateway::tool_calls {
namespace {

using ::llmserve::gateway::tool_calls::testing::TestTools;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using Mode = ToolChoice::Mode;

TEST(ParseToolChoiceTest, OpenAiForms) {
  const auto tools = TestTools();
  EXPECT_EQ(ParseToolChoice("none", tools)->mode, Mode::kNone);
  EXPECT_EQ(ParseToolChoice("auto", tools)->mode, Mode::kAuto);
  EXPECT_EQ(ParseToolChoice("required", tools)->mode, Mode::kRequired);
  EXPECT_EQ(ParseToolChoice(nlohmann::json(), tools)->mode, Mode::kAuto);
  EXPECT_EQ(ParseToolChoice(nlohmann::json(), {})->mode, Mode::kNone);
  const auto named = ParseToolChoice(
      nlohmann::json::parse(R"({"type": "function", "function": {"name": "search"}})"), tools);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->mode, Mode::kFunction);
  EXPECT_EQ(named->function, "search");
}

TEST(ParseToolChoiceTest, ErrorsNameToolChoice) {
  const auto tools = TestTools();
  const struct {
    nlohmann::json value;
    bool with_tools;
    const char* message;
  } cases[] = {
      {"sometimes", true, "tool_choice: unknown value"},
      {"search", true, "tool_choice: unknown value"},  // OpenAI's string form has no names
      {3, true, "tool_choice: must be"},
      {nlohmann::json::parse(R"({"type": "function"})"), true, "tool_choice.function:"},
      {nlohmann::json::parse(R"({"type": "function", "function": {}})"), true,
       "tool_choice.function.name:"},
      {nlohmann::json::parse(R"({"type": "tool", "function": {"name": "search"}})"), true,
       "tool_choice.type:"},
      {nlohmann::json::parse(R"({"type": "function", "function": {"name": "nope"}})"), true,
       "tool_choice.function.name: function \"nope\" is not among `tools`"},
      {"required", false, "tool_choice: \"required\" needs"},
      {nlohmann::json::parse(R"({"type": "function", "function": {"name": "search"}})"), false,
       "tool_choice.function.name: a named function needs"},
  };
  for (const auto& c : cases) {
    const auto choice = ParseToolChoice(c.value, c.with_tools ? tools : decltype(tools){});
    ASSERT_FALSE(choice.ok()) << c.value;
    EXPECT_EQ(choice.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(choice.status().message(), HasSubstr(c.message));
  }
}

TEST(ParseToolChoiceNameTest, GrpcForms) {
  const auto tools = TestTools();
  EXPECT_EQ(ParseToolChoiceName("", tools)->mode, Mode::kAuto);
  EXPECT_EQ(ParseToolChoiceName("", {})->mode, Mode::kNone);
  EXPECT_EQ(ParseToolChoiceName("required", tools)->mode, Mode::kRequired);
  EXPECT_EQ(ParseToolChoiceName("get_weather", tools)->function, "get_weather");
  EXPECT_THAT(ParseToolChoiceName("nope", tools).status().message(), HasSubstr("chat.tool_choice"));
  EXPECT_FALSE(ParseToolChoiceName("required", {}).ok());
  EXPECT_FALSE(ParseToolChoiceName("search", {}).ok());
}

// Over gRPC, chat.tool_choice_function reaches a tool whatever its name.
TEST(ParseToolChoiceNameTest, ChatToolChoiceFunctionReachesAToolNamedLikeAMode) {
  const std::vector<llmserve::v1::Tool> tools = {
      ::llmserve::gateway::tool_calls::testing::MakeTool("none"),
      ::llmserve::gateway::tool_calls::testing::MakeTool("auto"),
      ::llmserve::gateway::tool_calls::testing::MakeTool("required")};
  for (const char* name : {"none", "auto", "required"}) {
    llmserve::v1::ChatPrompt chat;
    chat.set_tool_choice_function(name);
    absl::StatusOr<ToolChoice> choice = ParseChatToolChoice(chat, tools);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->mode, Mode::kFunction);
    EXPECT_EQ(choice->function, name);
  }
  llmserve::v1::ChatPrompt chat;
  chat.set_tool_choice("none");
  EXPECT_EQ(ParseChatToolChoice(chat, tools)->mode, Mode::kNone);
  chat.set_tool_choice_function("auto");
  EXPECT_THAT(ParseChatToolChoice(chat, tools).status().message(),
              HasSubstr("chat.tool_choice_function: cannot be combined with chat.tool_choice"));
  chat.clear_tool_choice();
  chat.set_tool_choice_function("nope");
  EXPECT_THAT(ParseChatToolChoice(chat, tools).status().message(),
              HasSubstr("chat.tool_choice_function: function \"nope\" is not among `tools`"));
  EXPECT_THAT(ParseChatToolChoice(chat, {}).status().message(),
              HasSubstr("chat.tool_choice_function: a named function needs"));
}

TEST(ToolChoiceSchemaTest, NamedFunctionIsItsParameters) {
  const auto tools = TestTools();
  EXPECT_EQ(nlohmann::json::parse(ToolChoiceSchema({Mode::kFunction, "get_weather"}, tools, true)),
            nlohmann::json::parse(tools[0].parameters()));
  EXPECT_EQ(ToolChoiceSchema({Mode::kFunction, "search"}, tools, true), R"({"type":"object"})");
  EXPECT_EQ(ToolChoiceSchema({Mode::kAuto, ""}, tools, true), "");
}

TEST(ToolChoiceSchemaTest, RequiredIsAnArrayOfCalls) {
  const auto tools = TestTools();
  const nlohmann::json schema =
      nlohmann::json::parse(ToolChoiceSchema({Mode::kRequired, ""}, tools, false));
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  ASSERT_EQ(schema["items"]["anyOf"].size(), 3u);
  EXPECT_EQ(schema["items"]["anyOf"][0], nlohmann::json::parse(R"({"type": "object",
    "properties": {"name": {"const": "get_weather"}, "parameters": )" +
                                                               tools[0].parameters() +
                                                               R"(},
    "required": ["name", "parameters"]})"));
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"],
            nlohmann::json::parse(R"({"type": "object"})"));
  EXPECT_FALSE(nlohmann::json::parse(ToolChoiceSchema({Mode::kRequired, ""}, tools, true))
                   .contains("maxItems"));
}

TEST(ParseConstrainedToolCallsTest, RoundTrips) {
  const auto named =
      ParseConstrainedToolCalls({Mode::kFunction, "get_weather"}, R"( {"location": "Oslo"} )");
  ASSERT_TRUE(named.ok()) << named.status();
  ASSERT_EQ(named->size(), 1u);
  EXPECT_EQ((*named)[0].name(), "get_weather");
  EXPECT_EQ((*named)[0].arguments(), R"({"location":"Oslo"})");
  EXPECT_THAT((*named)[0].id(), MatchesRegex("call_[A-Za-z0-9]{24}"));

  const auto required = ParseConstrainedToolCalls(
      {Mode::kRequired, ""},
      R"([{"name": "search", "parameters": {"q": "x"}}, {"name": "get-time_2", "parameters": {}}])");
  ASSERT_TRUE(required.ok()) << required.status();
  ASSERT_EQ(required->size(), 2u);
  EXPECT_EQ((*required)[0].name(), "search");
  EXPECT_EQ((*required)[0].arguments(), R"({"q":"x"})");
  EXPECT_EQ((*required)[1].name(), "get-time_2");
  EXPECT_NE((*required)[0].id(), (*required)[1].id());
}

TEST(ParseConstrainedToolCallsTest, CutOrWrongShapeIsAnError) {
  for (const char* output : {R"({"location": "Os)", "[1]", ""}) {
    EXPECT_EQ(ParseConstrainedToolCalls({Mode::kFunction, "get_weather"}, output).status().code(),
              absl::StatusCode::kInvalidArgument)
        << output;
  }
  for (const char* output : {R"([{"name": "search", "parameters": {}})", "[]",
                             R"([{"parameters": {}}])", R"({"name": "search"})"}) {
    EXPECT_EQ(ParseConstrainedToolCalls({Mode::kRequired, ""}, output).status().code(),
              absl::StatusCode::kInvalidArgument)
        << output;
  }
  EXPECT_FALSE(ParseConstrainedToolCalls({Mode::kAuto, ""}, "{}").ok());
}

struct StreamedChoice {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
};

StreamedChoice StreamConstrained(const ToolChoice& choice, const std::string& output, size_t cut) {
  StreamingConstrainedParser parser(choice);
  StreamedChoice out;
  const auto take = [&](const StreamDelta& delta) {
    out.content += delta.content;
    for (const ToolCallDelta& call : delta.tool_calls) {
      EXPECT_EQ(call.index, static_cast<int>(out.names.size()));
      EXPECT_FALSE(call.id.empty());
      out.names.push_back(call.name);
      out.arguments.push_back(call.arguments);
    }
  };
  take(parser.Feed(output.substr(0, cut)));
  take(parser.Feed(output.substr(cut)));
  take(parser.Finish());
  EXPECT_EQ(parser.calls().size(), out.names.size());
  EXPECT_EQ(parser.saw_tool_calls(), !out.names.empty());
  return out;
}

TEST(StreamingConstrainedParserTest, AgreesWithTheWholeParseAtEverySplit) {
  const struct {
    ToolChoice choice;
    std::string output;
  } cases[] = {
      {{Mode::kFunction, "get_weather"}, "{\"location\": \"Oslo \\\"}\\\" \xc3\xa9\"}"},
      {{Mode::kRequired, ""},
       R"([{"name": "search", "parameters": {"q": "]}"}}, {"name": "get-time_2", "parameters": {}}])"},
  };
  for (const auto& c : cases) {
    const auto whole = ParseConstrainedToolCalls(c.choice, c.output);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (size_t cut = 0; cut <= c.output.size(); ++cut) {
      const StreamedChoice streamed = StreamConstrained(c.choice, c.output, cut);
      EXPECT_EQ(streamed.content, "");
      ASSERT_EQ(streamed.names.size(), whole->size());
      for (size_t i = 0; i < whole->size(); ++i) {
        EXPECT_EQ(streamed.names[i], (*whole)[i].name());
        EXPECT_EQ(streamed.arguments[i], (*whole)[i].arguments());
      }
    }
  }
}

TEST(StreamingConstrainedParserTest, RequiredCallsGoOutAsEachCompletes) {
  StreamingConstrainedParser parser({Mode::kRequired, ""});
  EXPECT_TRUE(parser.Feed(R"([{"name": "search", "parameters": {})").tool_calls.empty());
  const StreamDelta first = parser.Feed(R"(}, {"name": "get-time_2", )");
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(first.tool_calls[0].name, "search");
  // Cut by max_tokens: the call that went out stands, the rest is dropped.
  EXPECT_TRUE(parser.Finish().empty());
  EXPECT_EQ(parser.calls().size(), 1u);
}

TEST(StreamingConstrainedParserTest, OutputThatNeverFormsACallIsContent) {
  for (const std::string& output :
       {std::string(R"({"location": "Os)"), std::string("[]"), std::string("not json at all")}) {
    for (size_t cut = 0; cut <= output.size(); ++cut) {
      const ToolChoice choice =
          output == "[]" ? ToolChoice{Mode::kRequired, ""} : ToolChoice{Mode::kFunction, "search"};
      const StreamedChoice streamed = StreamConstrained(choice, output, cut);
      EXPECT_EQ(streamed.content, output);
      EXPECT_THAT(streamed.names, IsEmpty());
    }
  }
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls
