// Reasoning output through both frontends of a whole gateway, in front of the in-memory
// FakeWorkerClient whose "models" write <think> blocks: `reasoning_content` apart from `content`
// (whole, and streamed as deltas before the content), `reasoning_tokens` in usage, tool calls
// parsed from the content alone, constraints that start after the reasoning, and nothing
// changed for a model without a parser or for /v1/completions.

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gateway/server/gateway_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/fake_worker_client.h"
#include "tests/testing/http_get.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfo;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::testing::HttpExchange;

constexpr char kCall[] =
    R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)";
constexpr char kTools[] = R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

// A ChatML template whose generation prompt ends with `suffix`.
::llmserve::worker::v1::ModelInfo Model(const std::string& name, const std::string& suffix) {
  ::llmserve::worker::v1::ModelInfo info = FakeModelInfo(name);
  info.set_chat_template(absl::StrCat(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n",
      suffix, "{% endif %}"));
  return info;
}

// The same with <think> and </think> as tokens of their own (as DeepSeek-R1's and Qwen3's
// vocabularies have them: added, not special, so they are in the text).
::llmserve::worker::v1::ModelInfo WithThinkTokens(::llmserve::worker::v1::ModelInfo info) {
  nlohmann::json tokenizer = nlohmann::json::parse(info.tokenizer_json());
  uint32_t next_id = info.vocab_size();
  for (const char* tag : {"<think>", "</think>"}) {
    tokenizer["added_tokens"].push_back({{"id", next_id++},
                                         {"content", tag},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", false}});
  }
  info.set_tokenizer_json(tokenizer.dump());
  info.set_vocab_size(next_id);
  return info;
}

struct Reply {
  int status = 0;
  nlohmann::json body;
};

class GatewayReasoningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // DeepSeek-R1's template opens the block in the prompt; Qwen3's leaves it to the model, or
    // closes it when thinking is off.
    fake_.AddWorker("w:1", Model("r1", "<think>\n"));
    fake_.AddWorker("w:2", Model("qwen", ""));
    fake_.AddWorker("w:3", Model("qwen-no-think", "<think>\n\n</think>\n\n"));
    fake_.AddWorker("w:4", Model("plain", "<think>\n"));
    fake_.AddWorker("w:5", WithThinkTokens(Model("r1-tokens", "<think>\n")));
    // Qwen3's switch: chat_template_kwargs {"enable_thinking": false} closes the block.
    fake_.AddWorker("w:6", Model("switch",
                                 "{% if enable_thinking is defined and enable_thinking "
                                 "is false %}<think>\n\n</think>\n\n{% endif %}"));
    GatewayServerOptions options;
    options.host = "127.0.0.1";
    options.grpc_port = 0;
    options.http_port = 0;
    options.worker_client = &fake_;
    options.tool_call_format = tool_calls::ToolCallFormat::kHermes;
    absl::StatusOr<reasoning::ReasoningParsers> parsers = reasoning::ParseReasoningParsers(
        "r1=deepseek_r1,r1-tokens=deepseek_r1,qwen=qwen3,qwen-no-think=qwen3,"
        "switch=deepseek_r1");
    ASSERT_TRUE(parsers.ok()) << parsers.status();
    options.reasoning_parsers = *std::move(parsers);
    absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = *std::move(gateway);
    stub_ = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", gateway_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  std::vector<int32_t> Encode(const std::string& text) {
    return *model_->tokenizer()->Encode(text, false);
  }

  // The worker's next call (number `index`) answers `text` one token a message, then `finish`.
  void Answer(size_t index, const std::string& text,
              ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_STOP) {
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(index);
    ASSERT_NE(call, nullptr);
    ASSERT_TRUE(call->SendInPieces(Encode(text), 1, finish));
  }

  // The tokens of `text` up to the one whose text completes </think>: the reasoning's count.
  int64_t TokensThroughClose(const std::string& text) {
    const std::vector<int32_t> ids = Encode(text);
    for (size_t k = 1; k <= ids.size(); ++k) {
      const std::vector<int32_t> prefix(ids.begin(), ids.begin() + k);
      if (absl::StrContains(*model_->tokenizer()->Decode(prefix, false), "</think>")) return k;
    }
    return static_cast<int64_t>(ids.size());
  }

  std::string Exchange(const std::string& path, const std::string& body) {
    return HttpExchange(gateway_->http_port(),
                        absl::StrCat("POST ", path,
                                     " HTTP/1.0\r\nHost: localhost\r\n"
                                     "Content-Type: application/json\r\nContent-Length: ",
                                     body.size(), "\r\n\r\n", body),
                        30);
  }

  static std::string ChatBody(const std::string& model, bool stream, const std::string& extra) {
    return absl::StrCat(
        R"({"model": ")", model, R"(", "max_tokens": 64, "stream": )", stream ? "true" : "false",
        R"(, "messages": [{"role": "user", "content": "What is 1+1?"}])", extra, "}");
  }

  // A non-streamed request answered by the worker's call `index` with `output`.
  Reply Chat(size_t index, const std::string& model, const std::string& output,
             ::llmserve::v1::FinishReason finish = ::llmserve::v1::FINISH_REASON_STOP,
             const std::string& extra = "") {
    std::string raw;
    std::thread client(
        [&] { raw = Exchange("/v1/chat/completions", ChatBody(model, false, extra)); });
    Answer(index, output, finish);
    client.join();
    return ParseReply(raw);
  }

  static Reply ParseReply(const std::string& raw) {
    Reply reply;
    const size_t body_start = raw.find("\r\n\r\n");
    EXPECT_NE(body_start, std::string::npos) << raw;
    if (body_start == std::string::npos) return reply;
    std::vector<std::string> status_line = absl::StrSplit(raw.substr(0, raw.find("\r\n")), ' ');
    if (status_line.size() >= 2) reply.status = std::stoi(status_line[1]);
    reply.body = nlohmann::json::parse(raw.substr(body_start + 4), nullptr, false);
    return reply;
  }

  FakeWorkerClient fake_;
  std::shared_ptr<const ServedModel> model_ = *ServedModel::Create(FakeModelInfo("tiny"));
  std::unique_ptr<GatewayServer> gateway_;
  std::unique_ptr<::llmserve::v1::Inference::Stub> stub_;
};

// What a streamed chat adds up to, checking on the way that no reasoning follows content.
struct StreamedChat {
  std::string reasoning;
  std::string content;
  bool saw_reasoning = false;
  std::string finish;
  nlohmann::json usage;
  int tool_call_deltas = 0;
  bool reasoning_after_content = false;
};

StreamedChat ParseStreamedChat(const std::string& response) {
  StreamedChat out;
  for (absl::string_view line : absl::StrSplit(response, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    const nlohmann::json chunk = nlohmann::json::parse(line);
    if (chunk.contains("usage")) out.usage = chunk["usage"];
    for (const nlohmann::json& c : chunk["choices"]) {
      if (!c["finish_reason"].is_null()) out.finish = c["finish_reason"];
      const nlohmann::json& delta = c["delta"];
      if (delta.contains("tool_calls")) out.tool_call_deltas += delta["tool_calls"].size();
      if (delta.contains("reasoning_content")) {
        out.saw_reasoning = true;
        if (!out.content.empty() || out.tool_call_deltas > 0) out.reasoning_after_content = true;
        out.reasoning += delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("content") && delta["content"].is_string()) {
        out.content += delta["content"].get<std::string>();
      }
    }
  }
  return out;
}

TEST_F(GatewayReasoningTest, DeepSeekR1WholeAndStreamed) {
  const std::string output = "Add one and one: 2.\n</think>\n\nIt is 2.";
  const Reply whole = Chat(0, "r1", output);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const nlohmann::json& choice = whole.body["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "Add one and one: 2.\n") << choice;
  // What follows </think> is the content as written, newlines included (as vLLM).
  EXPECT_EQ(choice["message"]["content"], "\n\nIt is 2.") << choice;
  EXPECT_EQ(choice["finish_reason"], "stop");
  const nlohmann::json& usage = whole.body["usage"];
  EXPECT_EQ(usage["completion_tokens"], Encode(output).size());
  EXPECT_EQ(usage["completion_tokens_details"]["reasoning_tokens"], TokensThroughClose(output))
      << usage;
  EXPECT_LT(TokensThroughClose(output), static_cast<int64_t>(Encode(output).size()));

  std::string raw;
  std::thread client([&] {
    raw = Exchange("/v1/chat/completions",
                   ChatBody("r1", true, R"(, "stream_options": {"include_usage": true})"));
  });
  Answer(1, output);
  client.join();
  const StreamedChat streamed = ParseStreamedChat(raw);
  EXPECT_EQ(streamed.reasoning, "Add one and one: 2.\n") << raw;
  EXPECT_EQ(streamed.content, "\n\nIt is 2.") << raw;
  EXPECT_FALSE(streamed.reasoning_after_content) << raw;
  EXPECT_EQ(streamed.finish, "stop");
  EXPECT_EQ(streamed.usage, usage) << raw;
}

// Cut by max_tokens inside the block: all of it is reasoning, there is no answer, and every
// token was reasoning.
TEST_F(GatewayReasoningTest, UnterminatedThinkingAtMaxTokens) {
  const std::string output = "Let me think about 1+1 </thi";
  const Reply whole = Chat(0, "r1", output, ::llmserve::v1::FINISH_REASON_LENGTH);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const nlohmann::json& choice = whole.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(choice["message"]["reasoning_content"], output);
  EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
  EXPECT_EQ(whole.body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            Encode(output).size());

  std::string raw;
  std::thread client([&] { raw = Exchange("/v1/chat/completions", ChatBody("r1", true, "")); });
  Answer(1, output, ::llmserve::v1::FINISH_REASON_LENGTH);
  client.join();
  const StreamedChat streamed = ParseStreamedChat(raw);
  EXPECT_EQ(streamed.reasoning, output) << raw;
  EXPECT_EQ(streamed.content, "");
  EXPECT_EQ(streamed.finish, "length");
}

// Qwen3: a reply that opens its block has reasoning; one that answers straight away is content
// only, with no reasoning and 0 reasoning tokens.
TEST_F(GatewayReasoningTest, Qwen3OpensTheBlockOrNot) {
  const Reply thinking = Chat(0, "qwen", "<think>\nJust add.\n</think>\n\nIt is 2.");
  ASSERT_EQ(thinking.status, 200) << thinking.body;
  EXPECT_EQ(thinking.body["choices"][0]["message"]["reasoning_content"], "\nJust add.\n");
  EXPECT_EQ(thinking.body["choices"][0]["message"]["content"], "\n\nIt is 2.");

  const Reply direct = Chat(1, "qwen", "It is 2, not <think>.");
  ASSERT_EQ(direct.status, 200) << direct.body;
  const nlohmann::json& message = direct.body["choices"][0]["message"];
  EXPECT_EQ(message["content"], "It is 2, not <think>.");
  EXPECT_FALSE(message.contains("reasoning_content")) << message;
  EXPECT_EQ(direct.body["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

  // The template closed the block (thinking off): tags the model writes are content.
  const Reply off = Chat(2, "qwen-no-think", "<think>x</think>y");
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_EQ(off.body["choices"][0]["message"]["content"], "<think>x</think>y");
  EXPECT_FALSE(off.body["choices"][0]["message"].contains("reasoning_content"));
}

// chat_template_kwargs reach the template: with thinking switched off the prompt closes the
// block, and the reply is all answer; without them the same model's reply is reasoning. Keys the
// template gets from the request itself are refused, naming the field.
TEST_F(GatewayReasoningTest, ChatTemplateKwargsSwitchThinkingOff) {
  const Reply thinking = Chat(0, "switch", "It is 2.");
  ASSERT_EQ(thinking.status, 200) << thinking.body;
  EXPECT_EQ(thinking.body["choices"][0]["message"]["reasoning_content"], "It is 2.");
  EXPECT_TRUE(thinking.body["choices"][0]["message"]["content"].is_null()) << thinking.body;

  const Reply off = Chat(1, "switch", "It is 2.", ::llmserve::v1::FINISH_REASON_STOP,
                         R"(, "chat_template_kwargs": {"enable_thinking": false})");
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_EQ(off.body["choices"][0]["message"]["content"], "It is 2.");
  EXPECT_FALSE(off.body["choices"][0]["message"].contains("reasoning_content")) << off.body;
  const std::shared_ptr<FakeCall> call = fake_.WaitForCall(1);
  ASSERT_NE(call, nullptr);
  const std::vector<int32_t> prompt(call->request().prompt_token_ids().begin(),
                                    call->request().prompt_token_ids().end());
  EXPECT_TRUE(absl::EndsWith(*model_->tokenizer()->Decode(prompt, false), "</think>\n\n"));

  const Reply reserved = ParseReply(
      Exchange("/v1/chat/completions",
               ChatBody("switch", false, R"(, "chat_template_kwargs": {"messages": []})")));
  EXPECT_EQ(reserved.status, 400) << reserved.body;
  EXPECT_THAT(reserved.body["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("chat_template_kwargs"));
  const Reply not_object = ParseReply(Exchange(
      "/v1/chat/completions", ChatBody("switch", false, R"(, "chat_template_kwargs": [1])")));
  EXPECT_EQ(not_object.status, 400) << not_object.body;
  EXPECT_EQ(fake_.calls_started(), 2u);  // neither refusal reached a worker
}

// Without a parser the reply is the text as the model wrote it, and the usage as before.
TEST_F(GatewayReasoningTest, ModelWithoutParserIsUnchanged) {
  const std::string output = "hmm</think>\n\nIt is 2.";
  const Reply whole = Chat(0, "plain", output);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const nlohmann::json& message = whole.body["choices"][0]["message"];
  EXPECT_EQ(message["content"], output);
  EXPECT_FALSE(message.contains("reasoning_content")) << message;
  EXPECT_FALSE(whole.body["usage"].contains("completion_tokens_details")) << whole.body;

  std::string raw;
  std::thread client([&] { raw = Exchange("/v1/chat/completions", ChatBody("plain", true, "")); });
  Answer(1, output);
  client.join();
  const StreamedChat streamed = ParseStreamedChat(raw);
  EXPECT_EQ(streamed.content, output);
  EXPECT_FALSE(streamed.saw_reasoning) << raw;
}

// /v1/completions is raw text, reasoning model or not.
TEST_F(GatewayReasoningTest, CompletionsAreRawText) {
  const std::string output = "hmm</think>\n\nIt is 2.";
  std::string raw;
  std::thread client([&] {
    raw = Exchange("/v1/completions", R"({"model": "r1", "prompt": "1+1=", "max_tokens": 32})");
  });
  Answer(0, output);
  client.join();
  const Reply reply = ParseReply(raw);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.body["choices"][0]["text"], output);
  EXPECT_FALSE(reply.body["usage"].contains("completion_tokens_details"));
}

// A <tool_call> written while reasoning is reasoning; the call after </think> is a call.
TEST_F(GatewayReasoningTest, ToolCallsComeFromTheContentOnly) {
  const std::string thought = R"(I could write <tool_call>{"name": "x"}</tool_call> here.)";
  const std::string output = absl::StrCat(thought, "</think>\n\n", kCall);
  const Reply whole = Chat(0, "r1", output, ::llmserve::v1::FINISH_REASON_STOP,
                           absl::StrCat(R"(, "tools": )", kTools));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const nlohmann::json& choice = whole.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["reasoning_content"], thought);
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  // The tool-call parser leaves no whitespace-only content around calls.
  EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;

  std::string raw;
  std::thread client([&] {
    raw = Exchange("/v1/chat/completions",
                   ChatBody("r1", true, absl::StrCat(R"(, "tools": )", kTools)));
  });
  Answer(1, output);
  client.join();
  const StreamedChat streamed = ParseStreamedChat(raw);
  EXPECT_EQ(streamed.reasoning, thought) << raw;
  EXPECT_EQ(streamed.tool_call_deltas, 1) << raw;
  EXPECT_FALSE(streamed.reasoning_after_content) << raw;
  EXPECT_EQ(streamed.finish, "tool_calls");
}

// A constraint starts after the reasoning: the worker's request says where (the block the prompt
// opened, one the reply may open, or none where the prompt closed it), the reply's reasoning
// stays reasoning and its content is the constrained output; a required tool call likewise.
TEST_F(GatewayReasoningTest, ConstraintsStartAfterTheReasoning) {
  const std::string schema = R"(, "response_format": {"type": "json_object"})";
  using Block = ::llmserve::v1::StructuredOutput;
  size_t call = 0;
  for (const auto& [model, block] : std::vector<std::pair<std::string, Block::ReasoningBlock>>{
           {"r1", Block::REASONING_BLOCK_OPEN},
           {"qwen", Block::REASONING_BLOCK_OPTIONAL},
           {"qwen-no-think", Block::REASONING_BLOCK_NONE}}) {
    SCOPED_TRACE(model);
    const std::string output = model == "r1"     ? "Braces.</think>\n\n{\"a\": 1}"
                               : model == "qwen" ? "<think>Braces.</think>\n\n{\"a\": 1}"
                                                 : "{\"a\": 1}";
    const Reply reply = Chat(call, model, output, ::llmserve::v1::FINISH_REASON_STOP, schema);
    ASSERT_EQ(reply.status, 200) << reply.body;
    const ::llmserve::worker::v1::GenerateRequest& sent = fake_.WaitForCall(call++)->request();
    ASSERT_TRUE(sent.has_structured_output());
    EXPECT_TRUE(sent.structured_output().json_object());
    EXPECT_EQ(sent.structured_output().reasoning_block(), block);
    const nlohmann::json& message = reply.body["choices"][0]["message"];
    EXPECT_EQ(nlohmann::json::parse(message["content"].get<std::string>()),
              nlohmann::json::parse(R"({"a": 1})"));
    if (block != Block::REASONING_BLOCK_NONE) {
      EXPECT_EQ(message["reasoning_content"], "Braces.");
    }
  }

  const Reply required =
      Chat(call, "r1",
           absl::StrCat("Weather.</think>\n\n[", R"({"name": "get_weather", "arguments": )",
                        R"({"city": "Paris"}}])"),
           ::llmserve::v1::FINISH_REASON_STOP,
           absl::StrCat(R"(, "tools": )", kTools, R"(, "tool_choice": "required")"));
  ASSERT_EQ(required.status, 200) << required.body;
  EXPECT_EQ(fake_.WaitForCall(call)->request().structured_output().reasoning_block(),
            Block::REASONING_BLOCK_OPEN);
  const nlohmann::json& message = required.body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Weather.");
  ASSERT_EQ(message["tool_calls"].size(), 1u) << required.body;
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(required.body["choices"][0]["finish_reason"], "tool_calls");
}

// With </think> one token, the count ends exactly at it, even when the worker sends the whole
// reply in one message (as speculative decoding may).
TEST_F(GatewayReasoningTest, ReasoningTokensEndAtTheCloseToken) {
  std::shared_ptr<const ServedModel> model =
      *ServedModel::Create(WithThinkTokens(Model("r1-tokens", "<think>\n")));
  const std::vector<int32_t> ids = *model->tokenizer()->Encode("Add one and one.</think>2", false);
  const std::optional<int32_t> close = model->tokenizer()->TokenToId("</think>");
  ASSERT_TRUE(close.has_value());
  const auto at = std::find(ids.begin(), ids.end(), *close);
  ASSERT_NE(at, ids.end());
  ASSERT_LT(at + 1, ids.end());
  std::string raw;
  std::thread client(
      [&] { raw = Exchange("/v1/chat/completions", ChatBody("r1-tokens", false, "")); });
  std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
  ASSERT_NE(call, nullptr);
  ASSERT_TRUE(call->Send(ids, ::llmserve::v1::FINISH_REASON_STOP));
  client.join();
  const Reply reply = ParseReply(raw);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.body["choices"][0]["message"]["reasoning_content"], "Add one and one.");
  EXPECT_EQ(reply.body["choices"][0]["message"]["content"], "2");
  EXPECT_EQ(reply.body["usage"]["completion_tokens"], ids.size());
  EXPECT_EQ(reply.body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            at - ids.begin() + 1);
}

TEST_F(GatewayReasoningTest, GrpcUnaryAndStream) {
  ::llmserve::v1::GenerateRequest request;
  request.set_model("r1");
  ::llmserve::v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("What is 1+1?");
  request.mutable_stopping()->set_max_tokens(64);
  const std::string output = "Add.</think>It is 2.";
  {
    ::llmserve::v1::GenerateResponse response;
    grpc::Status status;
    std::thread client([&] {
      grpc::ClientContext context;
      status = stub_->Generate(&context, request, &response);
    });
    Answer(0, output);
    client.join();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.reasoning_text(), "Add.");
    EXPECT_EQ(response.text(), "It is 2.");
    EXPECT_EQ(response.usage().reasoning_tokens(), TokensThroughClose(output));
  }
  std::vector<::llmserve::v1::GenerateStreamResponse> messages;
  grpc::Status status;
  std::thread client([&] {
    grpc::ClientContext context;
    auto reader = stub_->GenerateStream(&context, request);
    ::llmserve::v1::GenerateStreamResponse streamed;
    while (reader->Read(&streamed)) messages.push_back(streamed);
    status = reader->Finish();
  });
  Answer(1, output);
  client.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::string reasoning;
  std::string text;
  for (const auto& streamed : messages) {
    if (!streamed.reasoning_text().empty()) {
      EXPECT_TRUE(text.empty()) << "reasoning after text";
    }
    reasoning += streamed.reasoning_text();
    text += streamed.text();
  }
  EXPECT_EQ(reasoning, "Add.");
  EXPECT_EQ(text, "It is 2.");
  ASSERT_FALSE(messages.empty());
  EXPECT_EQ(messages.back().usage().reasoning_tokens(), TokensThroughClose(output));
}

}  // namespace
}  // namespace llmserve::gateway
