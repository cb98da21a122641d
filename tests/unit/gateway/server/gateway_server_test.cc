// The gateway in process in front of two real workers (in process too), called through the
// public gRPC and HTTP APIs.

#include "gateway/server/gateway_server.h"

#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gateway/admission/api_key_store.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/testing/raw_grpc_call.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/test_model.h"
#include "tests/unit/gateway/http/test_http_client.h"
#include "tests/unit/gateway/server/gateway_test_fixture.h"
#include "worker/service/worker_server.h"

namespace llmserve::gateway {
namespace {

TEST_F(GatewayServerTest, StreamsAndCollectsTheSameCompletion) {
  StartGateway();
  const ::llmserve::v1::GenerateRequest request = TextRequest("Once upon a time", 12);
  const Streamed streamed = Stream(request);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  const ::llmserve::v1::GenerateStreamResponse& last = streamed.messages.back();
  EXPECT_EQ(last.finish_reason(), ::llmserve::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().completion_tokens(), 12u);
  EXPECT_GT(last.usage().prompt_tokens(), 0u);
  EXPECT_EQ(streamed.messages.front().model(), "tiny");
  EXPECT_FALSE(streamed.messages.front().request_id().empty());
  int tokens = 0;
  for (const auto& message : streamed.messages) tokens += message.tokens_size();
  EXPECT_EQ(tokens, 12);

  grpc::ClientContext context;
  ::llmserve::v1::GenerateResponse whole;
  ASSERT_TRUE(stub_->Generate(&context, request, &whole).ok());
  EXPECT_EQ(whole.text(), streamed.text);  // greedy: the same text
  EXPECT_EQ(whole.tokens_size(), 12);
  EXPECT_EQ(whole.finish_reason(), ::llmserve::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(whole.model(), "tiny");
}

TEST_F(GatewayServerTest, StopStringsCutTheTextAndEndTheRequest) {
  StartGateway();
  const Streamed free_run = Stream(TextRequest("The cat sat on", 40));
  ASSERT_TRUE(free_run.status.ok());
  ASSERT_GE(free_run.text.size(), 6u);
  // Stop on a piece of what greedy decoding produces anyway.
  const std::string stop = free_run.text.substr(3, 3);
  ::llmserve::v1::GenerateRequest request = TextRequest("The cat sat on", 40);
  request.mutable_stopping()->add_stop(stop);
  const Streamed stopped = Stream(request);
  ASSERT_TRUE(stopped.status.ok()) << stopped.status.error_message();
  EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(stop)));
  EXPECT_EQ(stopped.messages.back().finish_reason(), ::llmserve::v1::FINISH_REASON_STOP);
  EXPECT_EQ(stopped.messages.back().matched_stop(), stop);
  EXPECT_LT(stopped.messages.back().usage().completion_tokens(), 40u);
}

TEST_F(GatewayServerTest, ChatTokenizeAndListModels) {
  StartGateway();
  ::llmserve::v1::GenerateRequest chat;
  auto* message = chat.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("Hello!");
  chat.mutable_stopping()->set_max_tokens(5);
  chat.mutable_stopping()->set_ignore_eos(true);
  const Streamed reply = Stream(chat);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(reply.messages.back().usage().completion_tokens(), 5u);

  grpc::ClientContext tokenize_context;
  ::llmserve::v1::TokenizeRequest tokenize;
  *tokenize.mutable_chat() = chat.chat();
  ::llmserve::v1::TokenizeResponse tokens;
  ASSERT_TRUE(stub_->Tokenize(&tokenize_context, tokenize, &tokens).ok());
  EXPECT_EQ(static_cast<uint32_t>(tokens.token_ids_size()),
            reply.messages.back().usage().prompt_tokens());
  EXPECT_EQ(tokens.tokens_size(), tokens.token_ids_size());

  grpc::ClientContext list_context;
  ::llmserve::v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&list_context, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "tiny");
  EXPECT_EQ(models.models(0).ready_workers(), 2u);
}

TEST_F(GatewayServerTest, BadRequestsNameTheProblem) {
  StartGateway();
  ::llmserve::v1::GenerateRequest unknown = TextRequest("hi", 4);
  unknown.set_model("gpt-9");
  Streamed result = Stream(unknown);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(result.status.error_message().find("served: tiny"), std::string::npos);

  ::llmserve::v1::GenerateRequest no_prompt;
  result = Stream(no_prompt);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(result.status.error_message().find("prompt"), std::string::npos);

  ::llmserve::v1::GenerateRequest too_long = TextRequest("hi", 100000);
  result = Stream(too_long);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(result.status.error_message().find("stopping.max_tokens"), std::string::npos);

  ::llmserve::v1::GenerateRequest bad_sampling = TextRequest("hi", 4);
  bad_sampling.mutable_sampling()->set_temperature(-3);
  result = Stream(bad_sampling);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(result.status.error_message().find("sampling.temperature"), std::string::npos);

  ::llmserve::v1::GenerateRequest bad_ids;
  bad_ids.mutable_token_ids()->add_ids(-5);
  result = Stream(bad_ids);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(result.status.error_message().find("token_ids.ids[0]"), std::string::npos);
}

TEST_F(GatewayServerTest, ApiKeysAndRateLimits) {
  const std::string keys = dir_.File("keys");
  // sha256("abc")
  std::ofstream(keys) << "ci ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";
  StartGateway({.api_keys_file = keys, .rate_limit_rpm = 2});
  Streamed result = Stream(TextRequest("hi", 2));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  result = Stream(TextRequest("hi", 2), "wrong");
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Stream(TextRequest("hi", 2), "abc").status.ok());
  EXPECT_TRUE(Stream(TextRequest("hi", 2), "abc").status.ok());
  result = Stream(TextRequest("hi", 2), "abc");
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_FALSE(result.retry_after.empty());  // seconds until the minute's window has room
  // The unary call too.
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  context.AddMetadata("authorization", "Bearer abc");
  ::llmserve::v1::GenerateResponse response;
  EXPECT_EQ(stub_->Generate(&context, TextRequest("hi", 2), &response).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(context.GetServerTrailingMetadata().count("retry-after"), 1u);
}

// One of two workers stops while the gateway serves: every request still succeeds. Whether a
// request reached the stopped worker first and was retried, or the gateway saw the worker's load
// stream end and routed around it, depends on timing here; the retry itself, and that it goes to
// another worker, is GenerationTest.AFailureBeforeTheFirstTokenIsRetriedOnAnotherWorker's
// (tests/unit/gateway/pipeline/generation_test.cc), with a scripted worker failure.
TEST_F(GatewayServerTest, AStoppedWorkerLosesNoRequest) {
  StartGateway();
  workers_[0].reset();
  for (int i = 0; i < 6; ++i) {
    const Streamed result = Stream(TextRequest(absl::StrCat("attempt ", i), 3));
    EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  }
}

// Requests the workers ended with `finished_reason` (worker metrics, all workers).
int WorkerRequestsFinishedAs(const std::vector<std::unique_ptr<worker::WorkerServer>>& workers,
                             const std::string& finished_reason) {
  int total = 0;
  for (const auto& worker : workers) {
    const std::string body = Get(worker->metrics_port(), "/metrics").body;
    for (absl::string_view line : absl::StrSplit(body, '\n')) {
      if (absl::StartsWith(line, "llmserve_request_success_total{") &&
          absl::StrContains(line, absl::StrCat("finished_reason=\"", finished_reason, "\""))) {
        total += std::stoi(std::string(line.substr(line.rfind(' ') + 1)));
      }
    }
  }
  return total;
}

// On the slow model the 900 tokens take many seconds: the request is still running when the
// client cancels, and only the cancel reaching the worker ends it as an abort (run to its end it
// would finish as "length").
TEST_F(SlowGatewayServerTest, CancellingTheClientAbortsTheWorkerRequestAndFreesItsBlocks) {
  StartGateway();
  {
    grpc::ClientContext context;
    auto reader = stub_->GenerateStream(&context, TextRequest("a long story", 900));
    ::llmserve::v1::GenerateStreamResponse message;
    ASSERT_TRUE(reader->Read(&message));
    context.TryCancel();
    while (reader->Read(&message)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(WaitForIdleWorkers());
  EXPECT_EQ(WorkerRequestsFinishedAs(workers_, "abort"), 1);
  EXPECT_EQ(WorkerRequestsFinishedAs(workers_, "length"), 0);
}

TEST_F(GatewayServerTest, RefusesAnonymousAccessOffLoopback) {
  absl::StatusOr<std::unique_ptr<GatewayServer>> gateway =
      GatewayServer::Start({.host = "0.0.0.0", .grpc_port = 0, .pool = {.workers = {"x:1"}}});
  ASSERT_FALSE(gateway.ok());
  EXPECT_EQ(gateway.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gateway.status().message().find("--allow_unauthenticated"), absl::string_view::npos);
}

TEST_F(GatewayServerTest, ARevokedKeyStopsWorkingOnBothApis) {
  const std::string keys = dir_.File("keys");
  // sha256("abc") and sha256("sk-alice-example")
  std::ofstream(keys) << "ci ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n"
                      << "alice d48fce52832c460238fb82e9f6c57be593ad27ea6ddb5e15d74d1fb4245a76cd\n";
  StartGateway({.api_keys_file = keys});
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  const std::string abc = "authorization: Bearer abc\r\n";
  EXPECT_TRUE(Stream(TextRequest("hi", 2), "abc").status.ok());
  EXPECT_EQ(Post(gateway_->http_port(), "/v1/completions", body, abc).status, 200);
  // Revoke "ci" by rewriting the file; the gateway notices within its reload interval.
  std::ofstream(keys) << "alice d48fce52832c460238fb82e9f6c57be593ad27ea6ddb5e15d74d1fb4245a76cd\n";
  const absl::Time deadline = absl::Now() + kPatience;
  while (Stream(TextRequest("hi", 2), "abc").status.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(Stream(TextRequest("hi", 2), "abc").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Post(gateway_->http_port(), "/v1/completions", body, abc).status, 401);
  EXPECT_TRUE(Stream(TextRequest("hi", 2), "sk-alice-example").status.ok());
}

// Bytes that do not parse as the method's request get INVALID_ARGUMENT naming the message type
// (gRPC's typed handlers would answer UNIMPLEMENTED with no message).
TEST_F(GatewayServerTest, MalformedProtobufIsInvalidArgumentNamingTheMessage) {
  StartGateway();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", gateway_->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  const std::string garbage("\xff\xff\xff\xff", 4);
  const std::string bad_utf8("\x0a\x03\xff\xfe\xfd", 5);  // field 1, a string: not UTF-8
  const std::string deep_groups(2000, '\x0b');            // start-group tags, nested
  for (const auto& [method, type] : std::vector<std::pair<std::string, std::string>>{
           {"/llmserve.v1.Inference/Generate", "llmserve.v1.GenerateRequest"},
           {"/llmserve.v1.Inference/GenerateStream", "llmserve.v1.GenerateRequest"},
           {"/llmserve.v1.Inference/Tokenize", "llmserve.v1.TokenizeRequest"},
           {"/llmserve.v1.Inference/ListModels", "llmserve.v1.ListModelsRequest"}}) {
    for (const std::string& bytes : {garbage, bad_utf8, deep_groups}) {
      if (bytes == bad_utf8 && type == "llmserve.v1.ListModelsRequest") continue;  // no fields
      const grpc::Status status = ::llmserve::testing::RawGrpcCall(channel, method, bytes);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_NE(status.error_message().find("could not be parsed as " + type), std::string::npos)
          << method << ": " << status.error_message();
    }
  }
  // Well-formed requests still work on every method.
  EXPECT_TRUE(Stream(TextRequest("after", 3)).status.ok());
  grpc::ClientContext context;
  ::llmserve::v1::GenerateResponse response;
  EXPECT_TRUE(stub_->Generate(&context, TextRequest("after", 3), &response).ok());
  EXPECT_EQ(response.model(), "tiny");
  EXPECT_EQ(response.usage().completion_tokens(), 3);
}

TEST_F(GatewayServerTest, OpenAiChatCompletion) {
  StartGateway();
  const int port = gateway_->http_port();
  const auto response = Post(port, "/v1/chat/completions",
                             R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
                                 "max_tokens": 6, "ignore_eos": true, "logprobs": true,
                                 "top_logprobs": 2})");
  ASSERT_EQ(response.status, 200) << response.body;
  const nlohmann::json json = nlohmann::json::parse(response.body);
  EXPECT_EQ(json["object"], "chat.completion");
  EXPECT_EQ(json["model"], "tiny");
  EXPECT_EQ(json["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(json["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json["choices"][0]["logprobs"]["content"].size(), 6u);
  EXPECT_EQ(json["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(json["usage"]["completion_tokens"], 6);
  EXPECT_EQ(json["usage"]["total_tokens"].get<int>(),
            json["usage"]["prompt_tokens"].get<int>() + 6);
}

TEST_F(GatewayServerTest, OpenAiStreamingWithSeveralChoicesAndUsage) {
  StartGateway();
  const auto response =
      Post(gateway_->http_port(), "/v1/completions",
           R"({"prompt": "Once upon", "max_tokens": 5, "ignore_eos": true, "stream": true,
               "n": 2, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.Header("content-type"), "text/event-stream");
  const std::vector<std::string> events = SseEvents(response.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  int finished = 0;
  bool usage_seen = false;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const nlohmann::json chunk = nlohmann::json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    if (chunk.contains("usage")) {
      usage_seen = true;
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 10);
      EXPECT_TRUE(chunk["choices"].empty());
      continue;
    }
    if (!chunk["choices"][0]["finish_reason"].is_null()) ++finished;
  }
  EXPECT_EQ(finished, 2);
  EXPECT_TRUE(usage_seen);
}

TEST_F(GatewayServerTest, OpenAiErrorsAndEndpoints) {
  StartGateway();
  const int port = gateway_->http_port();
  auto response = Post(port, "/v1/completions", "{not json");
  EXPECT_EQ(response.status, 400);
  EXPECT_NE(response.body.find("\"invalid_request_error\""), std::string::npos) << response.body;
  response = Post(port, "/v1/completions", R"({"model": "gpt-9", "prompt": "x"})");
  EXPECT_EQ(response.status, 404);
  {
    // A body not declared JSON (what a cross-site form or text/plain fetch sends) is refused.
    auto client = http::testing::TestHttpClient::Connect(port);
    ASSERT_NE(client, nullptr);
    const std::string body = R"({"model": "tiny", "prompt": "x"})";
    client->Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nhost: x\r\n",
                              "content-type: text/plain\r\ncontent-length: ", body.size(),
                              "\r\n\r\n", body));
    const auto refused = client->ReadResponse();
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->status, 415);
    EXPECT_NE(refused->body.find("application/json"), std::string::npos) << refused->body;
  }
  EXPECT_NE(response.body.find("gpt-9"), std::string::npos);
  response = Post(port, "/v1/chat/completions", R"({"messages": [], "max_tokens": 3})");
  EXPECT_EQ(response.status, 400);
  EXPECT_NE(response.body.find("messages"), std::string::npos);
  response = Post(port, "/v1/completions", R"({"prompt": "x", "temperature": "hot"})");
  EXPECT_EQ(response.status, 400);
  EXPECT_NE(response.body.find("'temperature' must be a number"), std::string::npos);
  EXPECT_EQ(Get(port, "/v1/nothing").status, 404);
  const auto wrong_method = Get(port, "/v1/completions");
  EXPECT_EQ(wrong_method.status, 405);
  const nlohmann::json wrong_method_error = nlohmann::json::parse(wrong_method.body)["error"];
  EXPECT_EQ(wrong_method_error["code"], "method_not_allowed");
  EXPECT_EQ(wrong_method_error["type"], "invalid_request_error");
  EXPECT_EQ(wrong_method_error["message"], "GET is not allowed on /v1/completions");
  EXPECT_EQ(Get(port, "/healthz").status, 200);
  EXPECT_EQ(Get(port, "/readyz").status, 200);
  const auto models = Get(port, "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(nlohmann::json::parse(models.body)["data"][0]["id"], "tiny");
  const auto metrics = Get(port, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("llmserve_gateway_requests_total{api=\"http\",code=\"not_found\""),
            std::string::npos)
      << metrics.body;
  for (const std::string& worker_up :
       {absl::StrCat("llmserve_gateway_worker_up{worker=\"127.0.0.1:", workers_[0]->port(),
                     "\",model=\"tiny\"} 1"),
        std::string("llmserve_gateway_model_ready_workers{model=\"tiny\"} 2"),
        std::string("\nllmserve_gateway_draining 0")}) {
    EXPECT_NE(metrics.body.find(worker_up), std::string::npos) << worker_up << "\n" << metrics.body;
  }
}

// Tokens per minute count a request's prompt and completion: after one request of 3 + 20 tokens,
// a limit of 45 has 22 left, too few for a second (charging the completion alone, as the gateway
// once did, left 25).
TEST_F(GatewayServerTest, TokensPerMinuteCountPromptAndCompletion) {
  const std::string keys = dir_.File("keys");
  std::ofstream(keys) << "ci ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";
  StartGateway({.api_keys_file = keys, .rate_limit_tpm = 45});
  const int port = gateway_->http_port();
  const std::string body = R"({"prompt": [5, 6, 7], "max_tokens": 20, "ignore_eos": true})";
  const auto first = Post(port, "/v1/completions", body, "authorization: Bearer abc\r\n");
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_TRUE(absl::StrContains(first.body, R"("total_tokens":23)")) << first.body;
  EXPECT_EQ(Post(port, "/v1/completions", body, "authorization: Bearer abc\r\n").status, 429);
}

TEST_F(GatewayServerTest, OpenAiAuthAndRateLimit) {
  const std::string keys = dir_.File("keys");
  std::ofstream(keys) << "ci ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";
  StartGateway({.api_keys_file = keys, .rate_limit_rpm = 1});
  const int port = gateway_->http_port();
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  EXPECT_EQ(Post(port, "/v1/completions", body).status, 401);
  EXPECT_EQ(Post(port, "/v1/completions", body, "authorization: Bearer nope\r\n").status, 401);
  EXPECT_EQ(Post(port, "/v1/completions", body, "authorization: Bearer abc\r\n").status, 200);
  const auto limited = Post(port, "/v1/completions", body, "authorization: Bearer abc\r\n");
  EXPECT_EQ(limited.status, 429);
  EXPECT_FALSE(limited.Header("retry-after").empty());
}

TEST_F(GatewayServerTest, OpenAiClientDisconnectFreesTheWorkers) {
  StartGateway();
  {
    auto client = http::testing::TestHttpClient::Connect(gateway_->http_port());
    ASSERT_NE(client, nullptr);
    const std::string body =
        R"({"prompt": "a long story", "max_tokens": 900, "ignore_eos": true, "stream": true})";
    client->Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nhost: x\r\n",
                              "content-type: application/json\r\ncontent-length: ", body.size(),
                              "\r\n\r\n", body));
    ASSERT_TRUE(client->ReadHead().has_value());
    ASSERT_TRUE(client->ReadChunk().has_value());
    client->Close();
  }
  EXPECT_TRUE(WaitForIdleWorkers());
}

// A request that fails at once (no worker left to route to) still ends its lifecycle: the
// gateway counts no request as running, so a drain does not wait for it.
TEST_F(GatewayServerTest, RequestsThatFailAtOnceLeaveNothingRunning) {
  StartGateway();
  workers_.clear();
  const absl::Time deadline = absl::Now() + kPatience;
  while (gateway_->workers().AnyReady() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_FALSE(gateway_->workers().AnyReady());
  const int port = gateway_->http_port();
  for (const char* body : {R"({"model": "tiny", "prompt": "x", "max_tokens": 2})",
                           R"({"model": "tiny", "prompt": "x", "max_tokens": 2, "n": 3})",
                           R"({"model": "tiny", "prompt": "x", "stream": true})"}) {
    const auto response = Post(port, "/v1/completions", body);
    // Streamed too: nothing was sent before the failure, so it has its real status.
    EXPECT_EQ(response.status, 503) << body;
  }
  EXPECT_EQ(Stream(TextRequest("x", 2)).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  while (gateway_->active_requests() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(gateway_->active_requests(), 0);
  // The model stays listed, with no ready worker: what the no-ready-worker alert reads.
  const auto metrics = Get(port, "/metrics");
  EXPECT_NE(metrics.body.find("llmserve_gateway_model_ready_workers{model=\"tiny\"} 0"),
            std::string::npos)
      << metrics.body;
  const absl::Time drain_start = absl::Now();
  EXPECT_EQ(gateway_->Drain(), 0);
  EXPECT_LT(absl::Now() - drain_start, absl::Seconds(5));
}

TEST_F(SlowGatewayServerTest, ConcurrencyLimitQueuesThenRefuses) {
  StartGateway({.max_concurrency = 1, .max_queued_requests = 1});
  // One running, one queued: both complete. A third while both are held is refused.
  grpc::ClientContext first_context, second_context;
  first_context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  second_context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  auto first = stub_->GenerateStream(&first_context, TextRequest("first", 900));
  ::llmserve::v1::GenerateStreamResponse message;
  ASSERT_TRUE(first->Read(&message));  // running: it holds the only slot
  auto second = stub_->GenerateStream(&second_context, TextRequest("second", 3));
  // The second waits; give it time to be queued before the third arrives.
  absl::SleepFor(absl::Milliseconds(500));
  const Streamed third = Stream(TextRequest("third", 3));
  EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << third.status.error_message();
  EXPECT_NE(third.status.error_message().find("--max_concurrency"), std::string::npos);
  first_context.TryCancel();
  while (first->Read(&message)) {
  }
  int tokens = 0;
  while (second->Read(&message)) tokens += message.tokens_size();
  EXPECT_TRUE(second->Finish().ok());
  EXPECT_EQ(tokens, 3);
  // A queued call whose client leaves is withdrawn and never runs.
  grpc::ClientContext holder_context;
  auto holder = stub_->GenerateStream(&holder_context, TextRequest("holder", 900));
  ASSERT_TRUE(holder->Read(&message));
  {
    grpc::ClientContext queued_context;
    queued_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(100)));
    auto queued = stub_->GenerateStream(&queued_context, TextRequest("queued", 3));
    while (queued->Read(&message)) {
    }
    EXPECT_EQ(queued->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  holder_context.TryCancel();
  while (holder->Read(&message)) {
  }
  // The slot and the queue entry come back (asynchronously, as the server sees the cancels).
  const absl::Time deadline = absl::Now() + kPatience;
  grpc::Status after = Stream(TextRequest("after", 2)).status;
  while (!after.ok() && after.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    after = Stream(TextRequest("after", 2)).status;
  }
  EXPECT_TRUE(after.ok()) << after.error_message();
}

// An HS256 JWT (signed here with OpenSSL, independently of the gateway's verifier).
std::string SignHs256(const nlohmann::json& header, const nlohmann::json& claims,
                      const std::string& secret) {
  const std::string input = absl::StrCat(absl::WebSafeBase64Escape(header.dump()), ".",
                                         absl::WebSafeBase64Escape(claims.dump()));
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &length);
  return absl::StrCat(
      input, ".",
      absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<const char*>(mac), length)));
}

TEST_F(GatewayServerTest, JwtsOnBothApis) {
  const std::string secret = "0123456789abcdef0123456789abcdef-secret";
  std::ofstream(dir_.File("jwt.secret")) << secret << "\n";
  StartGateway({.jwt_hs256_secret_file = dir_.File("jwt.secret"), .jwt_audience = "llmserve"});
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  const nlohmann::json hs256 = {{"alg", "HS256"}, {"typ", "JWT"}};
  const std::string valid =
      SignHs256(hs256, {{"sub", "alice"}, {"aud", "llmserve"}, {"exp", now + 600}}, secret);
  const std::string expired =
      SignHs256(hs256, {{"sub", "alice"}, {"aud", "llmserve"}, {"exp", now - 600}}, secret);
  const std::string wrong_audience =
      SignHs256(hs256, {{"sub", "alice"}, {"aud", "other"}, {"exp", now + 600}}, secret);
  const std::string unsigned_token =
      absl::StrCat(absl::WebSafeBase64Escape(R"({"alg":"none"})"), ".",
                   absl::WebSafeBase64Escape(R"({"sub":"mallory","aud":"llmserve"})"), ".");
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  const int port = gateway_->http_port();
  auto bearer = [](const std::string& token) {
    return absl::StrCat("authorization: Bearer ", token, "\r\n");
  };
  EXPECT_EQ(Post(port, "/v1/completions", body, bearer(valid)).status, 200);
  for (const std::string& bad : {expired, wrong_audience, unsigned_token}) {
    const auto refused = Post(port, "/v1/completions", body, bearer(bad));
    EXPECT_EQ(refused.status, 401) << refused.body;
    EXPECT_EQ(Stream(TextRequest("x", 2), bad).status.error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(Stream(TextRequest("x", 2), valid).status.ok());
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, made with the openssl tool.
bool MakeCertificates(const std::string& dir) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::ofstream(dir + "/san.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  const std::vector<std::string> commands = {
      absl::StrCat("openssl req -x509 ", ec, " -keyout ", dir, "/ca.key -out ", dir,
                   "/ca.pem -days 2 -subj /CN=test-ca"),
      absl::StrCat("openssl req ", ec, " -keyout ", dir, "/server.key -out ", dir,
                   "/server.csr -subj /CN=localhost"),
      absl::StrCat("openssl x509 -req -in ", dir, "/server.csr -CA ", dir, "/ca.pem -CAkey ", dir,
                   "/ca.key -CAcreateserial -out ", dir, "/server.pem -days 2 -extfile ", dir,
                   "/san.ext"),
      absl::StrCat("openssl req ", ec, " -keyout ", dir, "/client.key -out ", dir,
                   "/client.csr -subj /CN=gateway"),
      absl::StrCat("openssl x509 -req -in ", dir, "/client.csr -CA ", dir, "/ca.pem -CAkey ", dir,
                   "/ca.key -CAcreateserial -out ", dir, "/client.pem -days 2"),
  };
  for (const std::string& command : commands) {
    if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) return false;
  }
  return true;
}

TEST(GatewayTlsTest, MutualTlsToWorkersAndTlsForClients) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl tool";
  ::llmserve::testing::ScopedTempDir dir("gateway_tls_test");
  ASSERT_TRUE(::llmserve::testing::WriteTinyModel(dir.path()).ok());
  ASSERT_TRUE(MakeCertificates(dir.path()));
  const std::string d = dir.path();
  absl::StatusOr<std::unique_ptr<worker::WorkerServer>> worker =
      worker::WorkerServer::Start({.model_dir = d,
                                   .served_model_name = "tiny",
                                   .host = "127.0.0.1",
                                   .port = 0,
                                   .metrics_port = -1,
                                   .kv_cache_bytes = 8 << 20,
                                   .threads = 1,
                                   .tls = {.cert_file = d + "/server.pem",
                                           .key_file = d + "/server.key",
                                           .client_ca_file = d + "/ca.pem"}});
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string worker_address = absl::StrCat("127.0.0.1:", (*worker)->port());

  GatewayServerOptions options{.host = "127.0.0.1", .grpc_port = 0, .http_port = 0};
  options.pool.workers = {worker_address};
  options.pool.probe_interval = absl::Milliseconds(50);
  options.pool.backoff_initial = absl::Milliseconds(50);
  options.tls = {.cert_file = d + "/server.pem", .key_file = d + "/server.key"};
  // Without a client certificate the worker refuses the gateway.
  options.worker_tls = {.ca_file = d + "/ca.pem"};
  absl::StatusOr<std::unique_ptr<GatewayServer>> refused = GatewayServer::Start(options);
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_FALSE((*refused)->workers().AnyReady());
  refused->reset();

  options.worker_tls = {
      .ca_file = d + "/ca.pem", .cert_file = d + "/client.pem", .key_file = d + "/client.key"};
  absl::StatusOr<std::unique_ptr<GatewayServer>> gateway = GatewayServer::Start(options);
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  const absl::Time deadline = absl::Now() + kPatience;
  while (!(*gateway)->workers().AnyReady() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE((*gateway)->workers().AnyReady());

  grpc::SslCredentialsOptions client_tls;
  std::ifstream ca(d + "/ca.pem");
  client_tls.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
  auto stub = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*gateway)->grpc_port()), grpc::SslCredentials(client_tls)));
  ::llmserve::v1::GenerateRequest request;
  request.set_text("over TLS");
  request.mutable_stopping()->set_max_tokens(3);
  // Sampled at temperature 1 from random weights: without this, EOS can end it early.
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  ::llmserve::v1::GenerateResponse response;
  const grpc::Status status = stub->Generate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.usage().completion_tokens(), 3u);

  // The HTTP API is HTTPS with the same certificate.
  if (std::system("command -v curl >/dev/null 2>&1") == 0) {
    const std::string https =
        absl::StrCat("curl -sf --max-time 20 --cacert ", d,
                     "/ca.pem https://127.0.0.1:", (*gateway)->http_port(), "/healthz >/dev/null");
    EXPECT_EQ(std::system(https.c_str()), 0) << https;
    const std::string plain_http =
        absl::StrCat("curl -sf --max-time 20 http://127.0.0.1:", (*gateway)->http_port(),
                     "/healthz >/dev/null 2>&1");
    EXPECT_NE(std::system(plain_http.c_str()), 0);
  }

  // A plaintext client cannot talk to the TLS port.
  auto plain = ::llmserve::v1::Inference::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*gateway)->grpc_port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext plain_context;
  plain_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  EXPECT_FALSE(plain->Generate(&plain_context, request, &response).ok());

  // Files are checked at start, naming the problem.
  options.tls = {.cert_file = d + "/server.pem"};
  absl::StatusOr<std::unique_ptr<GatewayServer>> half = GatewayServer::Start(options);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("--tls_key"), absl::string_view::npos);
  options.tls = {.cert_file = d + "/san.ext", .key_file = d + "/server.key"};
  absl::StatusOr<std::unique_ptr<GatewayServer>> not_pem = GatewayServer::Start(options);
  ASSERT_FALSE(not_pem.ok());
  EXPECT_NE(not_pem.status().message().find("san.ext: not a PEM file"), absl::string_view::npos);
  // An endless file is refused after 1 MiB, not read until memory runs out.
  options.tls = {.cert_file = "/dev/zero", .key_file = d + "/server.key"};
  absl::StatusOr<std::unique_ptr<GatewayServer>> endless = GatewayServer::Start(options);
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.status().message().find("PEM file /dev/zero is larger than 1048576 bytes"),
            absl::string_view::npos)
      << endless.status();
}

}  // namespace
}  // namespace llmserve::gateway
