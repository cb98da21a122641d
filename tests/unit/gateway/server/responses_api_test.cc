// POST /v1/responses through a whole gateway in front of the in-memory FakeWorkerClient: the
// response object (text, function calls, a length cut), its event stream in OpenAI's order, a
// function-call round trip whose result reaches the prompt, and refusals that name the field.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"
#include "tests/testing/http_response_json.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfoWithTemplate;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::testing::HttpExchange;
using ::llmserve::testing::HttpPostRequest;
using ::llmserve::testing::HttpResponseJson;
using ::llmserve::testing::HttpStatus;

constexpr char kCall[] =
    R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)";
constexpr char kTools[] = R"([{"type": "function", "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])";

struct Event {
  std::string name;  // the SSE `event:` line
  nlohmann::json data;
};

std::vector<Event> ParseEvents(const std::string& response) {
  std::vector<Event> events;
  std::string name;
  for (absl::string_view line : absl::StrSplit(response, '\n')) {
    if (absl::ConsumePrefix(&line, "event: ")) name = std::string(line);
    if (absl::ConsumePrefix(&line, "data: ")) events.push_back({name, nlohmann::json::parse(line)});
  }
  return events;
}

class ResponsesApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.AddWorker("w:1", FakeModelInfoWithTemplate("tiny"));
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
  }

  // Answers worker call `index` with `text` in pieces of 3 tokens, then `finish`.
  void Answer(size_t index, const std::string& text,
              ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_STOP) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(index);
    ASSERT_NE(call, nullptr);
    ASSERT_TRUE(call->SendInPieces(*model_->tokenizer()->Encode(text, false), 3, finish));
  }

  std::string Post(const std::string& body) {
    return HttpExchange(gateway_->http_port(), HttpPostRequest("/v1/responses", body), 30);
  }

  // Posts `body` while the worker answers call `index` with `text`.
  std::string Exchange(const std::string& body, size_t index, const std::string& text,
                       ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_STOP) {
    std::string response;
    std::thread client([&] { response = Post(body); });
    Answer(index, text, finish);
    client.join();
    return response;
  }

  FakeWorkerClient fake_;
  std::shared_ptr<const ServedModel> model_ =
      *ServedModel::Create(FakeModelInfoWithTemplate("tiny"));
  std::unique_ptr<GatewayServer> gateway_;
};

TEST_F(ResponsesApiTest, ATextAnswerIsOneMessageItemWithUsage) {
  const std::string response = Exchange(
      R"({"model": "tiny", "input": "Say hello.", "instructions": "Be brief.",
          "max_output_tokens": 32, "metadata": {"run": "7"}})",
      0, "Hello there, friend.");
  ASSERT_EQ(HttpStatus(response), 200) << response;
  const nlohmann::json body = HttpResponseJson(response);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(body["status"], "completed");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["instructions"], "Be brief.");
  EXPECT_EQ(body["max_output_tokens"], 32);
  EXPECT_EQ(body["metadata"], nlohmann::json({{"run", "7"}}));
  EXPECT_EQ(body["store"], false);
  ASSERT_EQ(body["output"].size(), 1u) << body;
  const nlohmann::json& message = body["output"][0];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "completed");
  ASSERT_EQ(message["content"].size(), 1u);
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_EQ(message["content"][0]["text"], "Hello there, friend.");
  const int64_t generated =
      static_cast<int64_t>(model_->tokenizer()->Encode("Hello there, friend.", false)->size());
  EXPECT_EQ(body["usage"]["output_tokens"], generated);
  const int64_t prompt = fake_.WaitForCall(0)->request().prompt_token_ids_size();
  EXPECT_EQ(body["usage"]["input_tokens"], prompt);
  EXPECT_EQ(body["usage"]["total_tokens"], prompt + generated);
  EXPECT_EQ(body["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
  // The instructions come first, as a system message, in the prompt the template rendered.
  const auto& prompt_ids = fake_.WaitForCall(0)->request().prompt_token_ids();
  const std::string rendered = *model_->tokenizer()->Decode(
      std::vector<int32_t>(prompt_ids.begin(), prompt_ids.end()), false);
  EXPECT_LT(rendered.find("Be brief."), rendered.find("Say hello.")) << rendered;
}

TEST_F(ResponsesApiTest, TheStreamSendsOpenAisEventsInOrder) {
  const std::string response = Exchange(
      R"({"model": "tiny", "input": "Say hello.", "stream": true})", 0, "Hello there, friend.");
  ASSERT_EQ(HttpStatus(response), 200) << response;
  const std::vector<Event> events = ParseEvents(response);
  std::vector<std::string> types;
  std::string deltas;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].name, events[i].data["type"]) << "the event line names the data's type";
    EXPECT_EQ(events[i].data["sequence_number"], static_cast<int64_t>(i));
    const std::string type = events[i].data["type"];
    if (type == "response.output_text.delta") {
      deltas += events[i].data["delta"].get<std::string>();
      if (types.back() == type) continue;  // one entry for the run of deltas
    }
    types.push_back(type);
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  EXPECT_EQ(deltas, "Hello there, friend.");
  ASSERT_FALSE(events.empty());
  const nlohmann::json& completed = events.back().data["response"];
  EXPECT_EQ(completed["status"], "completed");
  EXPECT_EQ(completed["output"][0]["content"][0]["text"], "Hello there, friend.");
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
}

TEST_F(ResponsesApiTest, AFunctionCallRoundTrip) {
  const std::string first = Exchange(
      absl::StrCat(R"({"model": "tiny", "input": "Weather in Paris?", "tools": )", kTools, "}"), 0,
      kCall);
  ASSERT_EQ(HttpStatus(first), 200) << first;
  const nlohmann::json body = HttpResponseJson(first);
  ASSERT_EQ(body["output"].size(), 1u) << body;
  const nlohmann::json call = body["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(nlohmann::json::parse(call["arguments"].get<std::string>()),
            nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(body["tools"][0]["name"], "get_weather") << "the tools are echoed as sent";

  // The client sends the call back with its result: both reach the prompt.
  const nlohmann::json input = {
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      call,
      {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "22 C, sunny"}}};
  const std::string second = Exchange(
      absl::StrCat(R"({"model": "tiny", "tools": )", kTools, R"(, "input": )", input.dump(), "}"),
      1, "It is sunny.");
  ASSERT_EQ(HttpStatus(second), 200) << second;
  EXPECT_EQ(HttpResponseJson(second)["output"][0]["content"][0]["text"], "It is sunny.");
  const auto& ids = fake_.WaitForCall(1)->request().prompt_token_ids();
  const std::string rendered =
      *model_->tokenizer()->Decode(std::vector<int32_t>(ids.begin(), ids.end()), false);
  EXPECT_TRUE(absl::StrContains(rendered, "22 C, sunny")) << rendered;
  EXPECT_TRUE(absl::StrContains(rendered, "get_weather")) << rendered;

  // Streamed, the call is an item whose arguments come as the tool-call parser releases them.
  const std::string streamed =
      Exchange(absl::StrCat(R"({"model": "tiny", "stream": true, "input": "Weather?", "tools": )",
                            kTools, "}"),
               2, kCall);
  std::vector<std::string> types;
  std::string deltas, arguments;
  int delta_events = 0;
  for (const Event& event : ParseEvents(streamed)) {
    if (event.name == "response.function_call_arguments.delta") {
      deltas += event.data["delta"].get<std::string>();
      ++delta_events;
      if (types.back() == event.name) continue;
    }
    if (event.name == "response.function_call_arguments.done") arguments = event.data["arguments"];
    if (event.name == "response.output_item.added") {
      EXPECT_EQ(event.data["item"]["type"], "function_call");
      EXPECT_EQ(event.data["item"]["name"], "get_weather");
      EXPECT_EQ(event.data["item"]["call_id"].get<std::string>().rfind("call_", 0), 0u);
    }
    types.push_back(event.name);
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added",
                "response.function_call_arguments.delta", "response.function_call_arguments.done",
                "response.output_item.done", "response.completed"}))
      << streamed;
  EXPECT_GE(delta_events, 1);
  EXPECT_EQ(deltas, arguments);
  EXPECT_EQ(nlohmann::json::parse(arguments), nlohmann::json({{"city", "Paris"}}));
}

TEST_F(ResponsesApiTest, ALengthCutIsIncomplete) {
  const std::string response =
      Exchange(R"({"model": "tiny", "input": "Count.", "max_output_tokens": 4})", 0, "one two",
               ::llmserve::v1::FINISH_REASON_LENGTH);
  const nlohmann::json body = HttpResponseJson(response);
  EXPECT_EQ(body["status"], "incomplete") << body;
  EXPECT_EQ(body["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(body["output"][0]["status"], "incomplete");
}

TEST_F(ResponsesApiTest, WhatIsNotSupportedIsRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": "tiny", "input": "x", "store": true})", "'store'"},
      {R"({"model": "tiny", "input": "x", "previous_response_id": "resp_1"})",
       "'previous_response_id'"},
      {R"({"model": "tiny", "input": "x", "frequency": 1})", "'frequency'"},
      {R"({"model": "tiny"})", "'input'"},
      {R"({"model": "tiny", "input": [{"role": "user", "content": [{"type": "input_image"}]}]})",
       "'input[0].content[0].type'"},
      {R"({"model": "tiny", "input": "x", "tools": [{"type": "web_search"}]})", "'tools[0].type'"},
      {R"({"model": "tiny", "input": "x", "max_output_tokens": -1})", "'max_output_tokens'"},
      {R"({"model": "tiny", "input": "x", "text": {"format": {"type": "json_schema",
          "name": "x"}}})",
       "text.format"},
      {R"({"model": "tiny", "input": "x", "text": {"format": {"type": "xml"}}})",
       "'text.format.type'"},
      {R"({"model": "tiny", "input": "x", "reasoning": {"effort": "high"}})", "'reasoning.effort'"},
  };
  for (const auto& [body, field] : cases) {
    const std::string response = Post(body);
    EXPECT_EQ(HttpStatus(response), 400) << body << "\n" << response;
    const std::string message = HttpResponseJson(response)["error"]["message"];
    EXPECT_TRUE(absl::StrContains(message, field)) << body << ": " << message;
  }
  EXPECT_EQ(fake_.calls_started(), 0u) << "no refused request reached a worker";
}

}  // namespace
}  // namespace llmserve::gateway
