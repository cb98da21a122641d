// A Generate response collected token by token (gateway/frontends/grpc/unary_response.h) is,
// byte for byte, the message serialized whole, and parses back to it.

#include "gateway/frontends/grpc/unary_response.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

::llmserve::v1::GenerateResponse Rest() {
  ::llmserve::v1::GenerateResponse rest;
  rest.set_request_id("req-1");
  rest.set_model("tiny");
  rest.set_finish_reason(::llmserve::v1::FINISH_REASON_LENGTH);
  rest.mutable_usage()->set_prompt_tokens(3);
  rest.mutable_usage()->set_completion_tokens(200);
  ::llmserve::v1::ToolCall* call = rest.add_tool_calls();
  call->set_id("call-1");
  call->set_name("f");
  return rest;
}

TEST(UnaryResponseTest, IsTheWholeMessageSerialized) {
  ::llmserve::v1::GenerateResponse whole = Rest();
  UnaryResponse collected;
  for (int i = 0; i < 200; ++i) {
    ::llmserve::v1::GeneratedToken token;
    token.set_token_id(i * 1000);  // varints of 1 to 3 bytes
    token.set_logprob(-0.5f * static_cast<float>(i));
    token.set_special(i == 199);
    for (int j = 0; j < i % 21; ++j) {
      ::llmserve::v1::TokenLogprob* alternative = token.add_top_logprobs();
      alternative->set_token_id(j);
      alternative->set_text(std::string(j, 'a'));
      alternative->set_logprob(-1.0f * static_cast<float>(j));
    }
    const std::string text = "t" + std::to_string(i);
    collected.AppendText(text);
    collected.AppendToken(token);
    whole.mutable_text()->append(text);
    *whole.add_tokens() = token;
  }
  const std::string bytes = Bytes(collected.Build(Rest()));
  EXPECT_EQ(bytes, whole.SerializeAsString());
  ::llmserve::v1::GenerateResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.tokens_size(), 200);
  EXPECT_EQ(parsed.tokens(20).top_logprobs(19).text(), std::string(19, 'a'));
  EXPECT_EQ(parsed.text(), whole.text());
}

TEST(UnaryResponseTest, WithoutTokensOrTextIsTheRestAlone) {
  UnaryResponse collected;
  EXPECT_EQ(Bytes(collected.Build(Rest())), Rest().SerializeAsString());
}

}  // namespace
}  // namespace llmserve::gateway
