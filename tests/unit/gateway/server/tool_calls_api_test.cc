// Tool calls through both frontends of a whole gateway, in front of the in-memory
// FakeWorkerClient whose "model" writes a Hermes-style call: the gRPC API returns them in
// `tool_calls` (unary, and the last stream message), the OpenAI API as `message.tool_calls` with
// null content, and streamed as `delta.tool_calls` chunks, with finish reason tool_calls.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gateway/server/gateway_server.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfoWithTemplate;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::testing::HttpExchange;

constexpr char kCall[] =
    R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)";
constexpr char kTools[] = R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

class GatewayToolCallsTest : public ::testing::Test {
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
    stub_ = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", gateway_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  // Answers the next worker call (number `index`) with `text` in pieces, then `finish`.
  void Answer(size_t index, const std::string& text,
              ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_STOP) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(index);
    ASSERT_NE(call, nullptr);
    ASSERT_TRUE(call->SendInPieces(*model_->tokenizer()->Encode(text, false), 4, finish));
  }

  ::llmserve::v1::GenerateRequest GrpcRequest() {
    ::llmserve::v1::GenerateRequest request;
    ::llmserve::v1::ChatMessage* message = request.mutable_chat()->add_messages();
    message->set_role("user");
    message->set_content("Weather in Paris?");
    ::llmserve::v1::Tool* tool = request.mutable_chat()->add_tools();
    tool->set_name("get_weather");
    tool->set_parameters(R"({"type": "object"})");
    request.mutable_stopping()->set_max_tokens(16);
    return request;
  }

  // max_tokens 0: unset (as much as the context leaves).
  std::string PostChat(bool stream, int max_tokens = 16) {
    const std::string body = absl::StrCat(
        R"({"model": "tiny", )",
        max_tokens > 0 ? absl::StrCat(R"("max_tokens": )", max_tokens, ", ") : "", R"("stream": )",
        stream ? "true" : "false",
        R"(, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": )", kTools,
        "}");
    return HttpExchange(gateway_->http_port(),
                        absl::StrCat("POST /v1/chat/completions HTTP/1.0\r\nHost: localhost\r\n"
                                     "Content-Type: application/json\r\nContent-Length: ",
                                     body.size(), "\r\n\r\n", body),
                        30);
  }

  FakeWorkerClient fake_;
  std::shared_ptr<const ServedModel> model_ =
      *ServedModel::Create(FakeModelInfoWithTemplate("tiny"));
  std::unique_ptr<GatewayServer> gateway_;
  std::unique_ptr<::llmserve::v1::Inference::Stub> stub_;
};

TEST_F(GatewayToolCallsTest, GrpcUnaryAndStream) {
  {
    ::llmserve::v1::GenerateResponse response;
    grpc::Status status;
    std::thread client([&] {
      grpc::ClientContext context;
      status = stub_->Generate(&context, GrpcRequest(), &response);
    });
    Answer(0, absl::StrCat("Checking. ", kCall));
    client.join();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.finish_reason(), ::llmserve::v1::FINISH_REASON_TOOL_CALLS);
    ASSERT_EQ(response.tool_calls_size(), 1);
    EXPECT_EQ(response.tool_calls(0).name(), "get_weather");
    EXPECT_EQ(nlohmann::json::parse(response.tool_calls(0).arguments()),
              nlohmann::json({{"city", "Paris"}}));
    EXPECT_EQ(response.text(), "Checking. ");
  }
  std::vector<::llmserve::v1::GenerateStreamResponse> messages;
  grpc::Status status;
  std::thread client([&] {
    grpc::ClientContext context;
    auto reader = stub_->GenerateStream(&context, GrpcRequest());
    ::llmserve::v1::GenerateStreamResponse message;
    while (reader->Read(&message)) messages.push_back(message);
    status = reader->Finish();
  });
  Answer(1, kCall);
  client.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(messages.empty());
  for (size_t i = 0; i + 1 < messages.size(); ++i) EXPECT_EQ(messages[i].tool_calls_size(), 0);
  ASSERT_EQ(messages.back().tool_calls_size(), 1);
  EXPECT_EQ(messages.back().tool_calls(0).name(), "get_weather");
  EXPECT_EQ(messages.back().finish_reason(), ::llmserve::v1::FINISH_REASON_TOOL_CALLS);
}

TEST_F(GatewayToolCallsTest, OpenAiWholeAndStreamed) {
  std::string whole;
  std::thread client([&] { whole = PostChat(false); });
  Answer(0, kCall);
  client.join();
  const size_t body_start = whole.find("\r\n\r\n");
  ASSERT_NE(body_start, std::string::npos) << whole;
  const nlohmann::json response = nlohmann::json::parse(whole.substr(body_start + 4));
  const nlohmann::json& choice = response["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
  const nlohmann::json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(nlohmann::json::parse(call["function"]["arguments"].get<std::string>()),
            nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);

  std::string streamed;
  std::thread stream_client([&] { streamed = PostChat(true); });
  Answer(1, kCall);
  stream_client.join();
  std::string name, id, arguments, finish;
  for (absl::string_view line : absl::StrSplit(streamed, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    const nlohmann::json chunk = nlohmann::json::parse(line);
    for (const nlohmann::json& c : chunk["choices"]) {
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      if (!c["delta"].contains("tool_calls")) continue;
      for (const nlohmann::json& delta : c["delta"]["tool_calls"]) {
        EXPECT_EQ(delta["index"], 0);
        if (delta.contains("id")) {
          EXPECT_TRUE(id.empty()) << "the id comes once";
          id = delta["id"];
          EXPECT_EQ(delta["type"], "function");
        }
        if (delta["function"].contains("name")) name = delta["function"]["name"];
        arguments += delta["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(name, "get_weather") << streamed;
  EXPECT_EQ(id.rfind("call_", 0), 0u) << streamed;
  EXPECT_EQ(nlohmann::json::parse(arguments), nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(finish, "tool_calls");
}

// What a streamed OpenAI response adds up to.
struct StreamedChat {
  std::string content;
  int tool_call_deltas = 0;
  std::string finish;
};

StreamedChat ParseStreamedChat(const std::string& response) {
  StreamedChat out;
  for (absl::string_view line : absl::StrSplit(response, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    const nlohmann::json chunk = nlohmann::json::parse(line);
    for (const nlohmann::json& c : chunk["choices"]) {
      if (!c["finish_reason"].is_null()) out.finish = c["finish_reason"];
      if (c["delta"].contains("tool_calls"))
        out.tool_call_deltas += c["delta"]["tool_calls"].size();
      if (c["delta"].contains("content") && c["delta"]["content"].is_string()) {
        out.content += c["delta"]["content"].get<std::string>();
      }
    }
  }
  return out;
}

// A call the model wrote wrong, or that max_tokens cut, is never returned as a call: its text
// stays content and the finish reason is the model's (stop, or length for a cut call), whole and
// streamed alike.
TEST_F(GatewayToolCallsTest, MalformedOrCutCallsStayContent) {
  struct Case {
    std::string output;
    ::llmserve::v1::FinishReason finish;
    std::string finish_name;
  };
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<Case> cases = {
      {R"(<tool_call>{"name": "get_weather", "arguments": {"a": tru}}</tool_call>)",
       ::llmserve::v1::FINISH_REASON_STOP, "stop"},
      {R"(<tool_call>{"name": "get_weather", "arguments": {"city": "\ud800"}}</tool_call>)",
       ::llmserve::v1::FINISH_REASON_STOP, "stop"},
      {R"(<tool_call>{"name": "get_weather", "arguments": {"n": 1e99999}}</tool_call>)",
       ::llmserve::v1::FINISH_REASON_STOP, "stop"},
      {R"(<tool_call>{"name": "get_weather", "arguments": {"a": )" + deep + "}}</tool_call>",
       ::llmserve::v1::FINISH_REASON_STOP, "stop"},
      {R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Par)",
       ::llmserve::v1::FINISH_REASON_LENGTH, "length"},
  };
  size_t call_index = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.output);
    std::string whole;
    std::thread client([&] { whole = PostChat(false, 0); });
    Answer(call_index++, c.output, c.finish);
    client.join();
    const size_t body_start = whole.find("\r\n\r\n");
    ASSERT_NE(body_start, std::string::npos) << whole;
    const nlohmann::json choice = nlohmann::json::parse(whole.substr(body_start + 4))["choices"][0];
    EXPECT_EQ(choice["finish_reason"], c.finish_name);
    EXPECT_EQ(choice["message"]["content"], c.output) << choice;
    EXPECT_FALSE(choice["message"].contains("tool_calls")) << choice;

    std::string streamed;
    std::thread stream_client([&] { streamed = PostChat(true, 0); });
    Answer(call_index++, c.output, c.finish);
    stream_client.join();
    const StreamedChat chat = ParseStreamedChat(streamed);
    EXPECT_EQ(chat.content, c.output) << streamed;
    EXPECT_EQ(chat.tool_call_deltas, 0) << streamed;
    EXPECT_EQ(chat.finish, c.finish_name);
  }
}

}  // namespace
}  // namespace llmserve::gateway
