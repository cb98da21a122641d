#include "gateway/frontends/openai/openai_request.h"

#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace llmserve::gateway {
namespace {

// `count` copies of `element` joined by commas, inside [ ].
std::string JsonList(const std::string& element, size_t count) {
  std::string out = "[";
  out.reserve(count * (element.size() + 1) + 2);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += ",";
    out += element;
  }
  return out + "]";
}

// The body of the hostile request of issue 15: a 4 MiB list of empty objects in `field`.
std::string HostileBody(const std::string& field) {
  const std::string junk = JsonList("{}", (size_t{4} << 20) / 3);
  return absl::StrCat(R"({"model": "tiny", "prompt": "hi", ")", field, R"(": )", junk, "}");
}

// The process's resident-set high-water mark in kB (VmHWM), or -1 when unreadable.
int64_t PeakRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view view = line;
    if (!absl::ConsumePrefix(&view, "VmHWM:")) continue;
    int64_t kb = 0;
    if (absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(view), " kB"), &kb)) {
      return kb;
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when the kernel refuses.
bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good();
}

TEST(OpenAiRequestTest, ParsesTheFieldsItReadsAndIgnoresOthers) {
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(
      OpenAiEndpoint::kCompletions,
      R"({"model": "tiny", "prompt": "hi", "temperature": 0.5, "top_p": 0.9, "top_k": -1,
          "max_tokens": 7, "stop": ["x"], "n": 2, "stream": true, "seed": 3,
          "stream_options": {"include_usage": true}, "user": "u",
          "metadata": {"deep": [[[{"a": 1}]]]}, "tools": [{"type": "function"}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request.model(), "tiny");
  EXPECT_EQ(parsed->request.text(), "hi");
  EXPECT_FLOAT_EQ(parsed->request.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(parsed->request.sampling().top_p(), 0.9f);
  EXPECT_EQ(parsed->request.sampling().top_k(), 0);
  EXPECT_EQ(parsed->request.sampling().seed(), 3u);
  EXPECT_EQ(parsed->request.stopping().max_tokens(), 7u);
  ASSERT_EQ(parsed->request.stopping().stop_size(), 1);
  EXPECT_EQ(parsed->n, 2);
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->include_usage);
  EXPECT_EQ(parsed->user, "u");
}

TEST(OpenAiRequestTest, ChatMessagesWithParts) {
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                         R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"},
                                                    {"type": "text", "text": "b"}]}],
          "add_generation_prompt": false})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->request.chat().messages_size(), 2);
  EXPECT_EQ(parsed->request.chat().messages(1).content(), "ab");
  EXPECT_FALSE(parsed->request.chat().add_generation_prompt());
}

// chat_template_kwargs travel as the JSON text of the object (checked with the chat, whichever
// API: prompt_builder's ValidateChatPrompt); an empty object or null is none.
TEST(OpenAiRequestTest, ChatTemplateKwargsAreCarriedAsJson) {
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                         R"({"messages": [{"role": "user", "content": "hi"}],
          "chat_template_kwargs": {"enable_thinking": false, "effort": "low"}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request.chat().chat_template_kwargs_json(),
            R"({"enable_thinking":false,"effort":"low"})");
  for (const char* none : {"{}", "null"}) {
    parsed = ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                                absl::StrCat(R"({"messages": [{"role": "user", "content": "hi"}],
                                                 "chat_template_kwargs": )",
                                             none, "}"));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->request.chat().chat_template_kwargs_json(), "") << none;
  }
}

// What a body's parse error says ("" when it parses).
std::string ParseError(OpenAiEndpoint endpoint, const std::string& body) {
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, body);
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(parsed.status().message());
}

TEST(OpenAiRequestTest, LogitBiasIsCarriedAsTokenIdsAndBiases) {
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                         R"({"messages": [{"role": "user", "content": "hi"}],
          "logit_bias": {"50256": -100, "7": 100, "0": 0.5}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& bias = parsed->request.sampling().logit_bias();
  ASSERT_EQ(bias.size(), 3);
  EXPECT_EQ(bias[0].token_id(), 50256);
  EXPECT_FLOAT_EQ(bias[0].bias(), -100.0f);
  EXPECT_EQ(bias[1].token_id(), 7);
  EXPECT_FLOAT_EQ(bias[1].bias(), 100.0f);
  EXPECT_EQ(bias[2].token_id(), 0);
  // null is unset, as OpenAI clients send it.
  parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "logit_bias": null})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request.sampling().logit_bias_size(), 0);
}

TEST(OpenAiRequestTest, BadLogitBiasIsRefusedNamingTheKey) {
  const auto error = [](const std::string& bias) {
    return ParseError(OpenAiEndpoint::kCompletions,
                      absl::StrCat(R"({"prompt": "hi", "logit_bias": )", bias, "}"));
  };
  EXPECT_EQ(error("[1]"), "'logit_bias' must be an object mapping token ids to biases");
  EXPECT_EQ(error(R"({"abc": 1})"),
            "'logit_bias' key \"abc\" is not a token id (a decimal integer)");
  EXPECT_EQ(error(R"({"-1": 1})"), "'logit_bias' key \"-1\" is not a token id (a decimal integer)");
  EXPECT_EQ(error(R"({"1.5": 1})"),
            "'logit_bias' key \"1.5\" is not a token id (a decimal integer)");
  EXPECT_EQ(error(R"({"99999999999": 1})"),
            "'logit_bias' key \"99999999999\" is not a token id (a decimal integer)");
  EXPECT_EQ(error(R"({"5": 100.5})"), "'logit_bias[\"5\"]' must be a number in [-100, 100]");
  EXPECT_EQ(error(R"({"5": -101})"), "'logit_bias[\"5\"]' must be a number in [-100, 100]");
  EXPECT_EQ(error(R"({"5": "1"})"), "'logit_bias[\"5\"]' must be a number in [-100, 100]");
  std::string many = "{";
  for (int i = 0; i < 301; ++i) absl::StrAppend(&many, i == 0 ? "" : ",", "\"", i, "\": 1");
  EXPECT_EQ(error(many + "}"), "'logit_bias' has 301 entries; at most 300");
}

// Fields we do not implement are refused naming them, never ignored.
TEST(OpenAiRequestTest, UnsupportedFieldsAreRefusedNamingThem) {
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "best_of": 3})"),
            "'best_of' is not supported (only best_of equal to n, 1, is accepted)");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "n": 2, "best_of": 4})"),
            "'best_of' is not supported (only best_of equal to n, 2, is accepted)");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "n": 2, "best_of": 2})"),
            "");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "best_of": 1})"), "");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "best_of": null})"), "");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "prompt_logprobs": 1})"),
            "'prompt_logprobs' is not supported");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "prompt_logprobs": 0})"),
            "'prompt_logprobs' is not supported");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "suffix": "end"})"),
            "'suffix' is not supported (insertion after a suffix)");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "suffix": ""})"), "");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions,
                       R"({"prompt": "hi", "chat_template_kwargs": {"enable_thinking": false}})"),
            "'chat_template_kwargs' applies to chat completions only (a completions prompt is "
            "not rendered by a chat template)");
  EXPECT_EQ(
      ParseError(OpenAiEndpoint::kCompletions, R"({"prompt": "hi", "chat_template_kwargs": {}})"),
      "");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "hi"}],
                           "chat_template_kwargs": [1]})"),
            "'chat_template_kwargs' must be an object");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "hi"}], "best_of": 2})"),
            "'best_of' is not supported (only best_of equal to n, 1, is accepted)");
}

TEST(OpenAiRequestTest, ParseSpecialTokensInContentIsAChatBoolean) {
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(
      OpenAiEndpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "hi"}], "parse_special_tokens_in_content": true})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->request.chat().parse_special_tokens_in_content());
  parsed = ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                              R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->request.chat().parse_special_tokens_in_content());
  EXPECT_EQ(ParseError(OpenAiEndpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "hi"}],
                           "parse_special_tokens_in_content": "yes"})"),
            "'parse_special_tokens_in_content' must be true or false");
  EXPECT_EQ(ParseError(OpenAiEndpoint::kCompletions,
                       R"({"prompt": "hi", "parse_special_tokens_in_content": false})"),
            "'parse_special_tokens_in_content' applies to chat completions only (a completions "
            "prompt's special-token text is always read as special tokens)");
}

TEST(OpenAiRequestTest, DeveloperRoleIsSystem) {
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions,
                         R"({"messages": [{"role": "developer", "content": "be brief"},
                                          {"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request.chat().messages(0).role(), "system");
  EXPECT_EQ(parsed->request.chat().messages(1).role(), "user");
}

TEST(OpenAiRequestTest, DuplicateKeysKeepTheLastValue) {
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(
      OpenAiEndpoint::kCompletions, R"({"prompt": "a", "prompt": "b", "n": 1, "n": 3})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request.text(), "b");
  EXPECT_EQ(parsed->n, 3);
}

TEST(OpenAiRequestTest, MalformedBodiesAreInvalidArgument) {
  for (const char* body : {"", "{", "{not json", R"({"prompt": "x"} trailing)", "[1, 2]", "3",
                           R"({"prompt": "x", "top_p": 1e999})"}) {
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
  }
  absl::StatusOr<OpenAiRequest> array = ParseOpenAiRequest(OpenAiEndpoint::kCompletions, "[]");
  EXPECT_NE(array.status().message().find("must be a JSON object"), absl::string_view::npos)
      << array.status();
}

TEST(OpenAiRequestTest, NestingDeeperThanTheLimitIsRefusedNamingIt) {
  const std::string deep =
      absl::StrCat(std::string(kMaxJsonDepth, '['), std::string(kMaxJsonDepth, ']'));
  // The body object is one level: kMaxJsonDepth lists inside it are one too many, in a known
  // field or an ignored one.
  for (const char* field : {"metadata", "stop"}) {
    const std::string body = absl::StrCat(R"({"prompt": "x", ")", field, R"(": )", deep, "}");
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body);
    ASSERT_FALSE(parsed.ok()) << field;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(absl::StrCat("nested more than ", kMaxJsonDepth)),
              absl::string_view::npos)
        << parsed.status();
  }
  // One level less is fine (and ignored).
  const std::string ok_deep =
      absl::StrCat(std::string(kMaxJsonDepth - 1, '['), std::string(kMaxJsonDepth - 1, ']'));
  EXPECT_TRUE(ParseOpenAiRequest(OpenAiEndpoint::kCompletions,
                                 absl::StrCat(R"({"prompt": "x", "metadata": )", ok_deep, "}"))
                  .ok());
  // A million levels neither crash nor take long.
  const std::string abyss = absl::StrCat(R"({"prompt": "x", "metadata": )",
                                         std::string(1 << 20, '['), std::string(1 << 20, ']'), "}");
  EXPECT_FALSE(ParseOpenAiRequest(OpenAiEndpoint::kCompletions, abyss).ok());
}

TEST(OpenAiRequestTest, MoreValuesThanTheLimitAreRefusedNamingIt) {
  for (const char* field : {"metadata", "stop", "prompt"}) {
    const std::string body =
        absl::StrCat(R"({"model": "m", ")", field, R"(": )", JsonList("1", kMaxJsonValues), "}");
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body);
    ASSERT_FALSE(parsed.ok()) << field;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(absl::StrCat("more than ", kMaxJsonValues)),
              absl::string_view::npos)
        << parsed.status();
  }
  // A token-id prompt as long as a 256k context minus a little room is accepted.
  const std::string ids = JsonList("7", kMaxJsonValues - 16);
  absl::StatusOr<OpenAiRequest> prompt = ParseOpenAiRequest(
      OpenAiEndpoint::kCompletions, absl::StrCat(R"({"prompt": )", ids, R"(, "max_tokens": 1})"));
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->request.token_ids().ids_size(), kMaxJsonValues - 16);
}

// Issue 15, defect 5: 4 MiB of `[{},{},...]` in an ignored field cost 156 MiB of gateway memory.
// The body is refused now, and parsing it stays within a few MiB beyond the body itself.
TEST(OpenAiRequestTest, AHostileBodyIsRefusedWithoutBuildingIt) {
  for (const char* field : {"ignored_field", "stop", "messages"}) {
    const std::string body = HostileBody(field);
    const bool measured = ResetPeakRss() && PeakRssKb() > 0;
    const int64_t before_kb = PeakRssKb();
    absl::StatusOr<OpenAiRequest> parsed =
        ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body);
    const int64_t growth_kb = PeakRssKb() - before_kb;
    ASSERT_FALSE(parsed.ok()) << field;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("JSON values"), absl::string_view::npos)
        << parsed.status();
    // Nothing of an ignored field is built; a known one is built up to the value limit, which
    // costs about what a legitimate 4 MiB prompt does.
    const int64_t bound_kb = absl::string_view(field) == "ignored_field" ? 8 * 1024 : 48 * 1024;
    if (measured) {
      std::cout << field << ": the peak RSS grew by " << growth_kb << " kB\n";
      EXPECT_LT(growth_kb, bound_kb)
          << field << ": parsing grew the peak RSS by " << growth_kb << " kB";
    }
  }
}

}  // namespace
}  // namespace llmserve::gateway
