#include "gateway/tool_calls/tools.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/gateway/tool_calls/test_tools.h"

namespace llmserve::gateway::tool_calls {
namespace {

using ::llmserve::gateway::tool_calls::testing::MakeTool;
using ::testing::HasSubstr;

nlohmann::ordered_json Tools(const std::string& text) {
  return nlohmann::ordered_json::parse(text);
}

TEST(ParseOpenAiToolsTest, ReadsFunctions) {
  const auto tools = ParseOpenAiTools(Tools(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
      "strict": true}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}}])"));
  ASSERT_TRUE(tools.ok()) << tools.status();
  ASSERT_EQ(tools->size(), 2u);
  EXPECT_EQ((*tools)[0].name(), "get_weather");
  EXPECT_EQ((*tools)[0].description(), "Weather.");
  EXPECT_TRUE((*tools)[0].strict());
  EXPECT_EQ(nlohmann::ordered_json::parse((*tools)[0].parameters()),
            Tools(R"({"type": "object", "properties": {"city": {"type": "string"}}})"));
  EXPECT_EQ((*tools)[1].parameters(), "");  // empty: any object
  EXPECT_TRUE(ParseOpenAiTools(nlohmann::ordered_json()).ok());
}

TEST(ParseOpenAiToolsTest, ErrorsNameTheField) {
  const struct {
    const char* tools;
    const char* field;
  } cases[] = {
      {R"({"type": "function"})", "tools: must be an array"},
      {R"([3])", "tools[0]: must be an object"},
      {R"([{"type": "retrieval", "function": {"name": "a"}}])", "tools[0].type:"},
      {R"([{"type": "function"}])", "tools[0].function:"},
      {R"([{"type": "function", "function": {"name": "a"}},
           {"type": "function", "function": {"name": "b c"}}])",
       "tools[1].function.name: must match"},
      {R"([{"type": "function", "function": {"name": "a"}},
           {"type": "function", "function": {"name": "a"}}])",
       "tools[1].function.name: duplicate"},
      {R"([{"type": "function", "function": {}}])", "tools[0].function.name:"},
      {R"([{"type": "function", "function": {"name": "a", "parameters": [1]}}])",
       "tools[0].function.parameters:"},
      {R"([{"type": "function", "function": {"name": "a", "description": 5}}])",
       "tools[0].function.description:"},
      {R"([{"type": "function", "function": {"name": "a", "strict": "yes"}}])",
       "tools[0].function.strict:"},
  };
  for (const auto& c : cases) {
    const auto tools = ParseOpenAiTools(Tools(c.tools));
    ASSERT_FALSE(tools.ok()) << c.tools;
    EXPECT_EQ(tools.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tools.status().message(), HasSubstr(c.field));
  }
  const std::string long_name(65, 'a');
  EXPECT_FALSE(ParseOpenAiTools(
                   Tools(R"([{"type": "function", "function": {"name": ")" + long_name + R"("}}])"))
                   .ok());
}

TEST(ParseOpenAiToolsTest, AtMost128Tools) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (int i = 0; i <= kMaxTools; ++i) {
    tools.push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  }
  EXPECT_THAT(ParseOpenAiTools(tools).status().message(), HasSubstr("at most 128"));
  tools.erase(tools.begin());
  EXPECT_TRUE(ParseOpenAiTools(tools).ok());
}

TEST(ValidateToolsTest, ErrorsNameTheGrpcField) {
  EXPECT_TRUE(ValidateTools({MakeTool("a", R"({"type":"object"})"), MakeTool("b")}).ok());
  EXPECT_THAT(ValidateTools({MakeTool("a"), MakeTool("")}).message(),
              HasSubstr("chat.tools[1].name"));
  EXPECT_THAT(ValidateTools({MakeTool("a"), MakeTool("a")}).message(),
              HasSubstr("chat.tools[1].name: duplicate"));
  EXPECT_THAT(ValidateTools({MakeTool("a", "[1]")}).message(),
              HasSubstr("chat.tools[0].parameters"));
  EXPECT_THAT(ValidateTools({MakeTool("a", "{not json")}).message(),
              HasSubstr("chat.tools[0].parameters"));
  EXPECT_THAT(
      ValidateTools({MakeTool("a", std::string(100, '[') + std::string(100, ']'))}).message(),
      HasSubstr("chat.tools[0].parameters"));
}

TEST(ToolsToTemplateJsonTest, RendersWhatTransformersPasses) {
  const nlohmann::json rendered = nlohmann::json::parse(ToolsToTemplateJson(
      {MakeTool("a", R"({"type":"object","properties":{"x":{"type":"integer"}}})"),
       MakeTool("b")}));
  EXPECT_EQ(rendered, nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "a", "description": "does a",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "b", "description": "does b",
      "parameters": {"type": "object", "properties": {}}}}])"));
  EXPECT_EQ(ToolsToTemplateJson({}), "[]");
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls

namespace llmserve::gateway::tool_calls {
namespace {

TEST(ParseOpenAiToolsTest, ParametersKeepTheClientsKeyOrder) {
  const auto tools = ParseOpenAiTools(Tools(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"zeta": {}, "alpha": {}}}}}])"));
  ASSERT_TRUE(tools.ok()) << tools.status();
  const std::string& parameters = (*tools)[0].parameters();
  EXPECT_LT(parameters.find("zeta"), parameters.find("alpha")) << parameters;
}

}  // namespace
}  // namespace llmserve::gateway::tool_calls
