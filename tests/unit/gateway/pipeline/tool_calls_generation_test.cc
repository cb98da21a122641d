// Tool calling and structured outputs through the gateway's pipeline, against the in-memory
// FakeWorkerClient: what PrepareRequest sends the worker (constraint, tools in the prompt), and
// how a model's output becomes tool calls on the way back (both the model's own Hermes-style
// format and the constrained JSON of tool_choice "required" / a named function).

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gateway/pipeline/generation.h"
#include "gateway/pipeline/prompt_builder.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_worker_client.h"

namespace llmserve::gateway {
namespace {

using ::llmserve::testing::FakeCall;
using ::llmserve::testing::FakeModelInfoWithTemplate;
using ::llmserve::testing::FakeWorkerClient;
using ::llmserve::v1::FINISH_REASON_LENGTH;
using ::llmserve::v1::FINISH_REASON_STOP;
using ::llmserve::v1::FINISH_REASON_TOOL_CALLS;

constexpr absl::Duration kPatience = absl::Seconds(10);

class RecordingObserver final : public GenerationObserver {
 public:
  void OnDelta(GenerationDelta delta) override {
    absl::MutexLock lock(&mutex_);
    text_ += delta.text;
    for (tool_calls::ToolCallDelta& call : delta.tool_calls) deltas_.push_back(std::move(call));
  }
  void OnFinish(const GenerationResult& result) override {
    absl::MutexLock lock(&mutex_);
    result_ = result;
    done_.Notify();
  }
  void OnError(const absl::Status& status) override {
    absl::MutexLock lock(&mutex_);
    error_ = status;
    done_.Notify();
  }
  bool WaitDone() { return done_.WaitForNotificationWithTimeout(kPatience); }
  std::string text() {
    absl::MutexLock lock(&mutex_);
    return text_;
  }
  std::vector<tool_calls::ToolCallDelta> deltas() {
    absl::MutexLock lock(&mutex_);
    return deltas_;
  }
  std::optional<GenerationResult> result() {
    absl::MutexLock lock(&mutex_);
    return result_;
  }

 private:
  absl::Notification done_;
  absl::Mutex mutex_;
  std::string text_ ABSL_GUARDED_BY(mutex_);
  std::vector<tool_calls::ToolCallDelta> deltas_ ABSL_GUARDED_BY(mutex_);
  std::optional<GenerationResult> result_ ABSL_GUARDED_BY(mutex_);
  absl::Status error_ ABSL_GUARDED_BY(mutex_);
};

::llmserve::v1::GenerateRequest ChatWithTools(const std::string& tool_choice) {
  ::llmserve::v1::GenerateRequest request;
  request.set_model("tiny");
  ::llmserve::v1::ChatPrompt& chat = *request.mutable_chat();
  ::llmserve::v1::ChatMessage* message = chat.add_messages();
  message->set_role("user");
  message->set_content("What is the weather in Paris?");
  ::llmserve::v1::Tool* tool = chat.add_tools();
  tool->set_name("get_weather");
  tool->set_description("The weather in a city");
  tool->set_parameters(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  ::llmserve::v1::Tool* other = chat.add_tools();
  other->set_name("add");
  other->set_parameters(R"({"type": "object"})");
  chat.set_tool_choice(tool_choice);
  request.mutable_stopping()->set_max_tokens(16);
  return request;
}

class ToolCallingTest : public ::testing::Test {
 protected:
  ToolCallingTest() {
    fake_.AddWorker("a:1", FakeModelInfoWithTemplate("tiny"));
    model_ = *ServedModel::Create(FakeModelInfoWithTemplate("tiny"));
  }

  absl::StatusOr<PreparedRequest> Prepare(const ::llmserve::v1::GenerateRequest& request) {
    return PrepareRequest(request, model_, PromptLimits{}, RenderChatPrompt);
  }

  std::string PromptText(const PreparedRequest& prepared) {
    const auto& ids = prepared.worker_request.prompt_token_ids();
    return *model_->tokenizer()->Decode(std::vector<int32_t>(ids.begin(), ids.end()),
                                        /*skip_special_tokens=*/false);
  }

  std::vector<int32_t> Ids(const std::string& text) {
    return *model_->tokenizer()->Encode(text, /*add_special_tokens=*/false);
  }

  // Runs `request` with the worker answering `output` (in pieces of a few tokens) then `finish`.
  void Run(PreparedRequest request, const std::string& output,
           ::llmserve::v1::FinishReason finish = FINISH_REASON_STOP) {
    generation_ = Generation::Start(&fake_, std::move(request), {}, observer_);
    std::shared_ptr<FakeCall> call = fake_.WaitForCall(0);
    ASSERT_NE(call, nullptr);
    const std::vector<int32_t> ids = Ids(output);
    for (size_t i = 0; i < ids.size(); i += 3) {
      std::vector<int32_t> piece(ids.begin() + i, ids.begin() + std::min(ids.size(), i + 3));
      ASSERT_TRUE(call->Send(
          piece, i + 3 >= ids.size() ? finish : ::llmserve::v1::FINISH_REASON_UNSPECIFIED));
    }
    ASSERT_TRUE(observer_->WaitDone());
  }

  FakeWorkerClient fake_;
  std::shared_ptr<const ServedModel> model_;
  std::shared_ptr<RecordingObserver> observer_ = std::make_shared<RecordingObserver>();
  std::shared_ptr<Generation> generation_;
};

TEST_F(ToolCallingTest, TheTemplateFormatIsDetectedAndToolsReachThePrompt) {
  EXPECT_EQ(model_->tool_call_format(), tool_calls::ToolCallFormat::kHermes);
  absl::StatusOr<PreparedRequest> with_tools = Prepare(ChatWithTools("auto"));
  ASSERT_TRUE(with_tools.ok()) << with_tools.status();
  ::llmserve::v1::GenerateRequest plain = ChatWithTools("");
  plain.mutable_chat()->clear_tools();
  absl::StatusOr<PreparedRequest> without = Prepare(plain);
  ASSERT_TRUE(without.ok()) << without.status();
  // The tool signatures are rendered into the system turn.
  EXPECT_GT(with_tools->worker_request.prompt_token_ids_size(),
            without->worker_request.prompt_token_ids_size() + 20);
  const std::string prompt = PromptText(*with_tools);
  EXPECT_NE(prompt.find(R"("name": "get_weather")"), std::string::npos) << prompt;
  // "auto" leaves the output free and parses it; no tools: nothing to parse.
  EXPECT_FALSE(with_tools->worker_request.has_structured_output());
  ASSERT_TRUE(with_tools->tool_calling.has_value());
  EXPECT_FALSE(without->tool_calling.has_value());
}

TEST_F(ToolCallingTest, TheHistoryCarriesCallsAndResults) {
  ::llmserve::v1::GenerateRequest request = ChatWithTools("none");
  ::llmserve::v1::ChatMessage* assistant = request.mutable_chat()->add_messages();
  assistant->set_role("assistant");
  ::llmserve::v1::ToolCall* call = assistant->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Paris"})");
  ::llmserve::v1::ChatMessage* result = request.mutable_chat()->add_messages();
  result->set_role("tool");
  result->set_tool_call_id("call_1");
  result->set_content("sunny");
  absl::StatusOr<PreparedRequest> prepared = Prepare(request);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const std::string prompt = PromptText(*prepared);
  EXPECT_NE(prompt.find(R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}})"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<|im_start|>tool\nsunny<|im_end|>"), std::string::npos) << prompt;
  // tool_choice "none": the model answers in text.
  EXPECT_FALSE(prepared->tool_calling.has_value());
}

TEST_F(ToolCallingTest, AutoParsesTheModelsOwnCalls) {
  absl::StatusOr<PreparedRequest> prepared = Prepare(ChatWithTools("auto"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  Run(*std::move(prepared),
      R"(Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)");
  ASSERT_TRUE(observer_->result().has_value());
  EXPECT_EQ(observer_->result()->finish_reason, FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(observer_->result()->tool_calls.size(), 1u);
  const ::llmserve::v1::ToolCall call = observer_->result()->tool_calls[0];
  EXPECT_EQ(call.name(), "get_weather");
  EXPECT_EQ(nlohmann::json::parse(call.arguments()), nlohmann::json({{"city", "Paris"}}));
  EXPECT_EQ(call.id().rfind("call_", 0), 0u);
  EXPECT_EQ(observer_->text().find("<tool_call>"), std::string::npos) << observer_->text();
  EXPECT_EQ(observer_->text().rfind("Let me check.", 0), 0u) << observer_->text();
  // The streamed pieces add up to the same call, the id and name once.
  std::string arguments;
  int named = 0;
  for (const tool_calls::ToolCallDelta& delta : observer_->deltas()) {
    EXPECT_EQ(delta.index, 0);
    if (!delta.name.empty()) {
      ++named;
      EXPECT_EQ(delta.id, call.id());
    }
    arguments += delta.arguments;
  }
  EXPECT_EQ(named, 1);
  EXPECT_EQ(arguments, call.arguments());
}

TEST_F(ToolCallingTest, TextWithoutCallsStaysText) {
  absl::StatusOr<PreparedRequest> prepared = Prepare(ChatWithTools("auto"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  Run(*std::move(prepared), "It is sunny <b>today</b>.", FINISH_REASON_LENGTH);
  EXPECT_EQ(observer_->text(), "It is sunny <b>today</b>.");
  EXPECT_EQ(observer_->result()->finish_reason, FINISH_REASON_LENGTH);
  EXPECT_TRUE(observer_->result()->tool_calls.empty());
}

TEST_F(ToolCallingTest, ANamedFunctionConstrainsTheOutputToItsArguments) {
  absl::StatusOr<PreparedRequest> prepared = Prepare(ChatWithTools("get_weather"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  // The worker is told the function's parameter schema.
  ASSERT_TRUE(prepared->worker_request.structured_output().has_json_schema());
  EXPECT_EQ(nlohmann::json::parse(prepared->worker_request.structured_output().json_schema()),
            nlohmann::json::parse(
                R"({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]})"));
  Run(*std::move(prepared), R"({"city": "Oslo"})");
  ASSERT_EQ(observer_->result()->tool_calls.size(), 1u);
  EXPECT_EQ(observer_->result()->tool_calls[0].name(), "get_weather");
  EXPECT_EQ(nlohmann::json::parse(observer_->result()->tool_calls[0].arguments()),
            nlohmann::json({{"city", "Oslo"}}));
  EXPECT_EQ(observer_->text(), "");
}

TEST_F(ToolCallingTest, RequiredConstrainsTheOutputToAListOfCalls) {
  ::llmserve::v1::GenerateRequest request = ChatWithTools("required");
  request.mutable_chat()->set_parallel_tool_calls(false);
  absl::StatusOr<PreparedRequest> prepared = Prepare(request);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const nlohmann::json schema =
      nlohmann::json::parse(prepared->worker_request.structured_output().json_schema());
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  Run(*std::move(prepared), R"([{"name": "add", "parameters": {"a": 1, "b": 2}}])");
  ASSERT_EQ(observer_->result()->tool_calls.size(), 1u);
  EXPECT_EQ(observer_->result()->tool_calls[0].name(), "add");
  EXPECT_EQ(nlohmann::json::parse(observer_->result()->tool_calls[0].arguments()),
            nlohmann::json({{"a", 1}, {"b", 2}}));
  EXPECT_EQ(observer_->result()->finish_reason, FINISH_REASON_TOOL_CALLS);
}

TEST_F(ToolCallingTest, BadToolFieldsAreRefusedNamingThem) {
  ::llmserve::v1::GenerateRequest unknown = ChatWithTools("nope");
  absl::StatusOr<PreparedRequest> prepared = Prepare(unknown);
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(prepared.status().message().find("tool_choice"), std::string::npos)
      << prepared.status();

  ::llmserve::v1::GenerateRequest both = ChatWithTools("required");
  both.mutable_structured_output()->set_json_object(true);
  prepared = Prepare(both);
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(prepared.status().message().find("tool_choice"), std::string::npos)
      << prepared.status();

  ::llmserve::v1::GenerateRequest bad_name = ChatWithTools("auto");
  bad_name.mutable_chat()->mutable_tools(1)->set_name("has space");
  prepared = Prepare(bad_name);
  EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(prepared.status().message().find("tools[1]"), std::string::npos) << prepared.status();
}

TEST_F(ToolCallingTest, StructuredOutputsAreCheckedAndPassedToTheWorker) {
  ::llmserve::v1::GenerateRequest request;
  request.set_text("hello");
  request.mutable_structured_output()->set_regex("[a-z]+");
  absl::StatusOr<PreparedRequest> prepared = Prepare(request);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->worker_request.structured_output().regex(), "[a-z]+");

  const auto refused = [&](const ::llmserve::v1::StructuredOutput& output,
                           absl::string_view field) {
    ::llmserve::v1::GenerateRequest bad;
    bad.set_text("hello");
    *bad.mutable_structured_output() = output;
    absl::StatusOr<PreparedRequest> result = Prepare(bad);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(result.status().message().find(field), std::string::npos) << result.status();
  };
  ::llmserve::v1::StructuredOutput output;
  output.set_json_schema("{not json");
  refused(output, "structured_output.json_schema");
  output.set_json_schema("[1, 2]");
  refused(output, "structured_output.json_schema");
  output.set_json_object(false);
  refused(output, "structured_output.json_object");
  output.set_regex("");
  refused(output, "structured_output.regex");
  output.mutable_choice()->add_choices("");
  refused(output, "structured_output.choice[0]");
  output.set_grammar(std::string(kMaxConstraintBytes + 1, 'a'));
  refused(output, "structured_output.grammar");
}

}  // namespace
}  // namespace llmserve::gateway
