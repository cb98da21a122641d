// The per-request bound on logprob entries (issue 28, gateway/pipeline/logprob_budget.h), seen
// through both public APIs of a gateway in front of real workers: the same request is accepted
// at the limit and refused one token past it by the OpenAI API (chat and completions, streamed
// or not) and by gRPC (Generate and GenerateStream), with INVALID_ARGUMENT / 400 naming the
// fields, the figure and the flag, before any stream message.

#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/unit/gateway/server/gateway_test_fixture.h"

namespace llmserve::gateway {
namespace {

// 12 tokens of 4 alternatives each (plus the token's own): 60 entries.
constexpr int kLimit = 60;
constexpr int kTop = 4;

class LogprobBudgetTest : public GatewayServerTest {
 protected:
  void SetUp() override {
    GatewayServerTest::SetUp();
    GatewayServerOptions options;
    options.inference.limits.max_logprob_entries = kLimit;
    StartGateway(options);
  }
};

// What the refusal says, whichever API: the formula with the request's figures, the limit, the
// flag.
void ExpectNamesTheBound(const std::string& message, int n, int max_tokens) {
  EXPECT_NE(message.find(absl::StrCat("n * max_tokens * (top_logprobs + 1) = ", n, " * ",
                                      max_tokens, " * (", kTop,
                                      " + 1) = ", n * max_tokens * (kTop + 1), " logprob entries")),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(absl::StrCat("limit of ", kLimit)), std::string::npos) << message;
  EXPECT_NE(message.find("--max_logprob_entries"), std::string::npos) << message;
}

std::string OpenAiBody(bool chat, int n, int max_tokens, bool stream) {
  const std::string logprobs = chat ? absl::StrCat(R"("logprobs": true, "top_logprobs": )", kTop)
                                    : absl::StrCat(R"("logprobs": )", kTop);
  const std::string prompt =
      chat ? R"("messages": [{"role": "user", "content": "Hi"}])" : R"("prompt": "Hi")";
  return absl::StrCat(R"({"model": "tiny", )", prompt, ", ", logprobs, R"(, "n": )", n,
                      R"(, "max_tokens": )", max_tokens, R"(, "ignore_eos": true, "stream": )",
                      stream ? "true" : "false", "}");
}

TEST_F(LogprobBudgetTest, TheOpenAiApiAcceptsTheLimitAndRefusesOneTokenMore) {
  for (const bool chat : {true, false}) {
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    for (const bool stream : {false, true}) {
      // 2 choices x 6 tokens x 5 = 60: at the limit.
      const auto accepted = Post(gateway_->http_port(), path, OpenAiBody(chat, 2, 6, stream));
      EXPECT_EQ(accepted.status, 200) << path << " stream " << stream << ": " << accepted.body;
      if (!stream && accepted.status == 200) {
        const nlohmann::json body = nlohmann::json::parse(accepted.body);
        for (const nlohmann::json& choice : body["choices"]) {
          const nlohmann::json& logprobs = choice["logprobs"];
          EXPECT_EQ((chat ? logprobs["content"] : logprobs["tokens"]).size(), 6u) << body;
        }
      }
      const auto refused = Post(gateway_->http_port(), path, OpenAiBody(chat, 2, 7, stream));
      EXPECT_EQ(refused.status, 400) << path << " stream " << stream << ": " << refused.body;
      EXPECT_EQ(refused.Header("content-type"), "application/json");
      const nlohmann::json error =
          nlohmann::json::parse(refused.body, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(error.is_object() && error.contains("error")) << refused.body;
      EXPECT_EQ(error["error"].value("type", ""), "invalid_request_error") << refused.body;
      ExpectNamesTheBound(error["error"].value("message", ""), 2, 7);
    }
  }
}

TEST_F(LogprobBudgetTest, TheGrpcApiAcceptsTheLimitAndRefusesOneTokenMore) {
  auto request = [](int max_tokens) {
    ::llmserve::v1::GenerateRequest request = TextRequest("Hi", max_tokens);
    request.mutable_sampling()->set_return_logprobs(true);
    request.mutable_sampling()->set_top_logprobs(kTop);
    return request;
  };
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
    ::llmserve::v1::GenerateResponse response;
    const grpc::Status status = stub_->Generate(&context, request(12), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.tokens_size(), 12);
    for (const ::llmserve::v1::GeneratedToken& token : response.tokens()) {
      EXPECT_TRUE(token.has_logprob());
      EXPECT_EQ(token.top_logprobs_size(), kTop);
    }
    EXPECT_EQ(response.finish_reason(), ::llmserve::v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(response.usage().completion_tokens(), 12u);
  }
  EXPECT_TRUE(Stream(request(12)).status.ok());

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  ::llmserve::v1::GenerateResponse response;
  const grpc::Status unary = stub_->Generate(&context, request(13), &response);
  EXPECT_EQ(unary.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << unary.error_message();
  ExpectNamesTheBound(unary.error_message(), 1, 13);
  const Streamed streamed = Stream(request(13));
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectNamesTheBound(streamed.status.error_message(), 1, 13);
  EXPECT_TRUE(streamed.messages.empty());
}

}  // namespace
}  // namespace llmserve::gateway
