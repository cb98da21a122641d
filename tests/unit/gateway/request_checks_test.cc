// What the gateway checks before it answers a byte or admits a request (issue 15): Tokenize refuses
// the chats Generate refuses.

#include <grpcpp/grpcpp.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "llmserve/v1/inference.grpc.pb.h"
#include "tests/unit/gateway/gateway_test_fixture.h"

namespace llmserve::gateway {
namespace {

// Issue 15, defect 7: the proto promises Tokenize treats a chat as Generate does.
TEST_F(GatewayServerTest, TokenizeRefusesTheChatsGenerateRefuses) {
  StartGateway();
  std::vector<::llmserve::v1::ChatPrompt> chats(3);
  // chats[0] has no message.
  for (int i = 0; i < 100000; ++i) {
    auto* message = chats[1].add_messages();
    message->set_role("user");
    message->set_content("hi");
  }
  auto* wizard = chats[2].add_messages();
  wizard->set_role("wizard");
  wizard->set_content("abracadabra");
  for (const ::llmserve::v1::ChatPrompt& chat : chats) {
    ::llmserve::v1::GenerateRequest generate;
    *generate.mutable_chat() = chat;
    generate.mutable_stopping()->set_max_tokens(2);
    grpc::ClientContext generate_context;
    ::llmserve::v1::GenerateResponse generated;
    const grpc::Status generate_status = stub_->Generate(&generate_context, generate, &generated);
    EXPECT_EQ(generate_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

    ::llmserve::v1::TokenizeRequest tokenize;
    *tokenize.mutable_chat() = chat;
    grpc::ClientContext tokenize_context;
    ::llmserve::v1::TokenizeResponse tokens;
    const grpc::Status tokenize_status = stub_->Tokenize(&tokenize_context, tokenize, &tokens);
    EXPECT_EQ(tokenize_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << chat.messages_size() << " messages";
    EXPECT_EQ(tokenize_status.error_message(), generate_status.error_message());
    EXPECT_EQ(tokens.token_ids_size(), 0);
  }
}

}  // namespace
}  // namespace llmserve::gateway
