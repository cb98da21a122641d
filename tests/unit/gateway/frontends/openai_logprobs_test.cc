// Logprobs rendered for OpenAI responses: a whole response's body, appended one entry at a time
// from the compact store, is exactly the JSON a stream's chunk writes for the same tokens (the
// two paths cannot drift apart), for chat and completions, over more tokens than the renderer
// samples before it reserves the rest, and with token texts that are partial UTF-8.

#include "gateway/frontends/openai/openai_logprobs.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"
#include "tools/make_model/bpe_builder.h"

namespace llmserve::gateway {
namespace {

std::shared_ptr<const ServedModel> TestModel() {
  const tools::BuiltTokenizer built = tools::BuildByteLevelTokenizer(200);
  worker::v1::ModelInfo info;
  info.set_model_name("m");
  info.set_max_model_len(4096);
  info.set_vocab_size(built.vocab_size);
  info.set_tokenizer_json(built.tokenizer_json);
  info.set_tokenizer_config_json(built.tokenizer_config_json);
  absl::StatusOr<std::shared_ptr<const ServedModel>> model = ServedModel::Create(info);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// `count` tokens walking the vocabulary (byte tokens above 0x7f decode to partial UTF-8), each
// with `top` alternatives.
TokenLogprobs Tokens(const ServedModel& model, int count, int top) {
  TokenLogprobs tokens;
  for (int i = 0; i < count; ++i) {
    ::llmserve::v1::GeneratedToken token;
    token.set_token_id((i * 37) % model.vocab_size());
    token.set_logprob(-0.25f * static_cast<float>(i));
    for (int j = 0; j < top; ++j) {
      ::llmserve::v1::TokenLogprob* alternative = token.add_top_logprobs();
      alternative->set_token_id((i * 37 + j * 11) % model.vocab_size());
      alternative->set_logprob(-0.5f * static_cast<float>(j) - 1e-7f * static_cast<float>(i));
    }
    tokens.Add(token);
  }
  return tokens;
}

TEST(OpenAiLogprobsTest, ChatBodiesAreTheJsonOfTheirTokens) {
  const std::shared_ptr<const ServedModel> model = TestModel();
  ASSERT_NE(model, nullptr);
  const TokenLogprobs tokens = Tokens(*model, 300, 5);
  std::string body = "prefix";
  AppendChatLogprobs(*model, tokens, &body);
  EXPECT_EQ(body, "prefix" + DumpJson(ChatLogprobsJson(*model, tokens)));

  const nlohmann::json parsed = nlohmann::json::parse(body.substr(6));
  ASSERT_EQ(parsed["content"].size(), 300u);
  const nlohmann::json& entry = parsed["content"][3];
  EXPECT_FLOAT_EQ(entry["logprob"].get<float>(), -0.75f);
  EXPECT_EQ(entry["token"], model->TokenText(tokens.chosen(3).token_id));
  ASSERT_EQ(entry["top_logprobs"].size(), 5u);
  EXPECT_EQ(entry["top_logprobs"][2]["token"],
            model->TokenText(tokens.alternatives(3)[2].token_id));
}

TEST(OpenAiLogprobsTest, CompletionBodiesAreTheJsonOfTheirTokens) {
  const std::shared_ptr<const ServedModel> model = TestModel();
  ASSERT_NE(model, nullptr);
  const TokenLogprobs tokens = Tokens(*model, 300, 3);
  std::string body;
  AppendCompletionLogprobs(*model, tokens, 7, &body);
  EXPECT_EQ(body, DumpJson(CompletionLogprobsJson(*model, tokens, 7)));

  const nlohmann::json parsed = nlohmann::json::parse(body);
  ASSERT_EQ(parsed["tokens"].size(), 300u);
  size_t offset = 7;
  for (size_t i = 0; i < 300; ++i) {
    EXPECT_EQ(parsed["text_offset"][i], offset);
    offset += model->TokenText(tokens.chosen(i).token_id).size();
  }
}

TEST(OpenAiLogprobsTest, NoTokensAreEmptyArrays) {
  const std::shared_ptr<const ServedModel> model = TestModel();
  ASSERT_NE(model, nullptr);
  std::string chat;
  AppendChatLogprobs(*model, TokenLogprobs(), &chat);
  EXPECT_EQ(chat, R"({"content":[]})");
  std::string completion;
  AppendCompletionLogprobs(*model, TokenLogprobs(), 0, &completion);
  EXPECT_EQ(completion, R"({"text_offset":[],"token_logprobs":[],"tokens":[],"top_logprobs":[]})");
}

}  // namespace
}  // namespace llmserve::gateway
