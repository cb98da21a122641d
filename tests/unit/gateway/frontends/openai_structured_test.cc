// The structured-output and tool fields of OpenAI bodies (openai_structured.h), through
// ParseOpenAiRequest as the HTTP frontend calls it.

#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "gateway/frontends/openai/openai_request.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

absl::StatusOr<OpenAiRequest> Chat(const std::string& extra) {
  return ParseOpenAiRequest(
      OpenAiEndpoint::kChatCompletions,
      R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}])" + extra + "}");
}

// The field the error names, or "" when it parsed.
std::string Refused(const std::string& extra) {
  absl::StatusOr<OpenAiRequest> parsed = Chat(extra);
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(OpenAiStructuredTest, ResponseFormatJsonSchema) {
  absl::StatusOr<OpenAiRequest> parsed = Chat(
      R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "p",
          "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& output = parsed->request.structured_output();
  ASSERT_TRUE(output.has_json_schema());
  EXPECT_EQ(
      nlohmann::json::parse(output.json_schema()),
      nlohmann::json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
}

TEST(OpenAiStructuredTest, JsonObjectTextAndVllmParameters) {
  absl::StatusOr<OpenAiRequest> parsed = Chat(R"(, "response_format": {"type": "json_object"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->request.structured_output().json_object());

  parsed = Chat(R"(, "response_format": {"type": "text"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->request.has_structured_output());

  parsed = Chat(R"(, "guided_regex": "[0-9]+")");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->request.structured_output().regex(), "[0-9]+");

  parsed = Chat(R"(, "guided_choice": ["yes", "no"])");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->request.structured_output().choice().choices_size(), 2);

  parsed = Chat(R"(, "guided_grammar": "root ::= \"a\"")");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->request.structured_output().grammar(), R"(root ::= "a")");

  // guided_json as an object or as its JSON text.
  parsed = Chat(R"(, "guided_json": "{\"type\": \"string\"}")");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(nlohmann::json::parse(parsed->request.structured_output().json_schema()),
            nlohmann::json({{"type", "string"}}));

  parsed = Chat(R"(, "structured_outputs": {"choice": ["a"]})");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->request.structured_output().choice().choices(0), "a");

  // The completions endpoint takes the same constraints.
  parsed = ParseOpenAiRequest(OpenAiEndpoint::kCompletions,
                              R"({"prompt": "x", "guided_json": {"type": "object"}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->request.structured_output().has_json_schema());
}

TEST(OpenAiStructuredTest, MalformedConstraintsNameTheField) {
  EXPECT_NE(Refused(R"(, "response_format": "json")").find("response_format"), std::string::npos);
  EXPECT_NE(Refused(R"(, "response_format": {"type": "yaml"})").find("response_format.type"),
            std::string::npos);
  EXPECT_NE(Refused(R"(, "response_format": {"type": "json_schema"})")
                .find("response_format.json_schema"),
            std::string::npos);
  EXPECT_NE(Refused(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}})")
                .find("response_format.json_schema.schema"),
            std::string::npos);
  EXPECT_NE(Refused(R"(, "guided_json": 3)").find("guided_json"), std::string::npos);
  EXPECT_NE(Refused(R"(, "guided_json": "{broken")").find("guided_json"), std::string::npos);
  EXPECT_NE(Refused(R"(, "guided_regex": "")").find("guided_regex"), std::string::npos);
  EXPECT_NE(Refused(R"(, "guided_choice": [])").find("guided_choice"), std::string::npos);
  EXPECT_NE(Refused(R"(, "guided_choice": [1])").find("guided_choice"), std::string::npos);
  EXPECT_NE(Refused(R"(, "structured_outputs": [])").find("structured_outputs"), std::string::npos);
  const std::string both = Refused(R"(, "guided_regex": "a", "guided_choice": ["a"])");
  EXPECT_NE(both.find("cannot be combined"), std::string::npos) << both;
  EXPECT_NE(Refused(R"(, "response_format": {"type": "json_object"}, "guided_regex": "a")")
                .find("guided_regex"),
            std::string::npos);
}

TEST(OpenAiStructuredTest, ToolsToolChoiceAndHistory) {
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                                                            R"({"messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
             "type": "function", "function": {"name": "get_weather",
             "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
          "tools": [{"type": "function", "function": {"name": "get_weather",
                     "description": "d", "parameters": {"type": "object"}}}],
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
          "parallel_tool_calls": false})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ::llmserve::v1::ChatPrompt& chat = parsed->request.chat();
  ASSERT_EQ(chat.tools_size(), 1);
  EXPECT_EQ(chat.tools(0).name(), "get_weather");
  EXPECT_EQ(chat.tool_choice(), "");
  EXPECT_EQ(chat.tool_choice_function(), "get_weather");
  EXPECT_FALSE(chat.parallel_tool_calls());
  ASSERT_EQ(chat.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(chat.messages(1).tool_calls(0).id(), "call_1");
  EXPECT_EQ(chat.messages(1).tool_calls(0).arguments(), R"({"city": "Paris"})");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "call_1");

  parsed = Chat(R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                  "tool_choice": "required")");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request.chat().tool_choice(), "required");
}

// A tool may be called "none", "auto" or "required": the object form names it, not a mode.
TEST(OpenAiStructuredTest, ToolNamedLikeAModeCanBeChosen) {
  for (const char* name : {"none", "auto", "required"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<OpenAiRequest> parsed = Chat(
        absl::StrCat(R"(, "tools": [{"type": "function", "function": {"name": ")", name, R"("}}],
            "tool_choice": {"type": "function", "function": {"name": ")",
                     name, R"("}})"));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->request.chat().tool_choice(), "");
    EXPECT_EQ(parsed->request.chat().tool_choice_function(), name);
  }
}

// A constraint with a tool_choice that forces a call names the fields the client wrote.
TEST(OpenAiStructuredTest, ConstraintWithAForcedCallNamesTheRightFields) {
  const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_EQ(Refused(tools + R"(, "tool_choice": "required", "guided_regex": "a+")"),
            "'guided_regex' cannot be combined with 'tool_choice' \"required\" or a named "
            "function, which constrains the output to the call itself");
  EXPECT_EQ(Refused(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}},
                               "structured_outputs": {"choice": ["a"]})"),
            "'structured_outputs.choice' cannot be combined with 'tool_choice' \"required\" or a "
            "named function, which constrains the output to the call itself");
  EXPECT_NE(Refused(tools + R"(, "tool_choice": "required",
                               "response_format": {"type": "json_object"})")
                .find("'response_format' cannot be combined with 'tool_choice'"),
            std::string::npos);
  EXPECT_TRUE(Chat(tools + R"(, "tool_choice": "auto", "guided_regex": "a+")").ok());
}

TEST(OpenAiStructuredTest, MalformedToolFieldsNameTheField) {
  EXPECT_NE(Refused(R"(, "tools": {})").find("tools"), std::string::npos);
  EXPECT_NE(Refused(R"(, "tools": [{"type": "function", "function": {"name": "a b"}}])")
                .find("tools[0].function.name"),
            std::string::npos);
  EXPECT_NE(Refused(R"(, "tools": [{"type": "retrieval"}])").find("tools[0]"), std::string::npos);
  EXPECT_NE(Refused(R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                       "tool_choice": "sometimes")")
                .find("tool_choice"),
            std::string::npos);
  EXPECT_NE(Refused(R"(, "tools": [{"type": "function", "function": {"name": "f"}}],
                       "tool_choice": {"type": "function", "function": {"name": "g"}})")
                .find("tool_choice"),
            std::string::npos);
  EXPECT_NE(Refused(R"(, "parallel_tool_calls": "yes")").find("parallel_tool_calls"),
            std::string::npos);
  const std::string history = Refused(
      R"(, "messages": [{"role": "assistant", "tool_calls": [{"type": "function",
           "function": {"arguments": "{}"}}]}])");
  EXPECT_NE(history.find("messages[0].tool_calls[0].function.name"), std::string::npos) << history;
}

}  // namespace
}  // namespace llmserve::gateway

namespace llmserve::gateway {
namespace {

TEST(OpenAiStructuredTest, ASchemaKeepsTheClientsKeyOrder) {
  absl::StatusOr<OpenAiRequest> parsed = Chat(
      R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema":
          {"type": "object", "properties": {"reasoning": {"type": "string"},
           "answer": {"type": "integer"}, "confidence": {"type": "number"}},
           "required": ["reasoning", "answer"]}}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string& schema = parsed->request.structured_output().json_schema();
  const size_t reasoning = schema.find("reasoning");
  const size_t answer = schema.find("answer");
  const size_t confidence = schema.find("confidence");
  EXPECT_LT(reasoning, answer) << schema;
  EXPECT_LT(answer, confidence) << schema;
}

TEST(OpenAiStructuredTest, AnObjectWithVeryManyKeysParsesInLinearTime) {
  // 200k distinct keys, then a repeated one: ordered objects must not look keys up linearly.
  std::string schema = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 200000; ++i) schema += "\"k" + std::to_string(i) + "\": {},";
  schema += R"("k7": {"type": "integer"}}})";
  absl::StatusOr<OpenAiRequest> parsed = Chat(R"(, "guided_json": )" + schema);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // (Checked with the sorted nlohmann::json: ordered_json's own parser is quadratic here.)
  const std::string& text = parsed->request.structured_output().json_schema();
  const nlohmann::json kept = nlohmann::json::parse(text);
  EXPECT_EQ(kept["properties"].size(), 200000u);
  // The repeated key replaced the value in place (as nlohmann does), keeping its position.
  EXPECT_EQ(kept["properties"]["k7"], nlohmann::json({{"type", "integer"}}));
  EXPECT_LT(text.find(R"("k7":{"type":"integer"})"), text.find(R"("k8":)"));
  EXPECT_LT(text.find(R"("k0":)"), text.find(R"("k1":)"));
}

}  // namespace
}  // namespace llmserve::gateway
