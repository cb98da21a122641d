#include "gateway/frontends/openai/openai_logprobs.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

using Json = nlohmann::json;

Json Bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// One entry of chat's logprobs.content: the token, its logprob and its alternatives.
Json ChatEntry(const ServedModel& model, const TokenLogprobs& tokens, size_t i) {
  Json top = Json::array();
  for (const LogprobEntry& alternative : tokens.alternatives(i)) {
    const std::string text = model.TokenText(alternative.token_id);
    top.push_back({{"token", text}, {"logprob", alternative.logprob}, {"bytes", Bytes(text)}});
  }
  const std::string text = model.TokenText(tokens.chosen(i).token_id);
  return {{"token", text},
          {"logprob", tokens.chosen(i).logprob},
          {"bytes", Bytes(text)},
          {"top_logprobs", std::move(top)}};
}

// Completions' top_logprobs entry of token i: {text: logprob} (alternatives with the same text
// keep the last one's, as OpenAI's map does).
Json CompletionTop(const ServedModel& model, const TokenLogprobs& tokens, size_t i) {
  Json top = Json::object();
  for (const LogprobEntry& alternative : tokens.alternatives(i)) {
    top[model.TokenText(alternative.token_id)] = alternative.logprob;
  }
  return top;
}

// Appends what ChatEntry's JSON writes for one token, up to the brace that closes it, without
// building it: the keys in the order the JSON object writes them (sorted), each value written as
// the JSON value writes it. A tree per entry cost several allocations; this is most of a large
// response's rendering time.
void AppendChatToken(const std::string& text, float logprob, std::string* out) {
  out->append(R"({"bytes":[)");
  for (size_t i = 0; i < text.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, static_cast<int>(static_cast<unsigned char>(text[i])));
  }
  absl::StrAppend(out, R"(],"logprob":)", DumpJson(Json(logprob)), R"(,"token":)",
                  DumpJson(Json(text)));
}

void AppendChatEntry(const ServedModel& model, const TokenLogprobs& tokens, size_t i,
                     std::string* out) {
  AppendChatToken(model.TokenText(tokens.chosen(i).token_id), tokens.chosen(i).logprob, out);
  out->append(R"(,"top_logprobs":[)");
  bool first = true;
  for (const LogprobEntry& alternative : tokens.alternatives(i)) {
    if (!first) out->push_back(',');
    first = false;
    AppendChatToken(model.TokenText(alternative.token_id), alternative.logprob, out);
    out->push_back('}');
  }
  out->append("]}");
}

// Elements rendered before the rest of an array is reserved at their rate.
constexpr size_t kSampleElements = 64;

// Appends `[e(0),e(1),...]` for the tokens, `append_element(i, out)` writing each: no tree of
// them all. Once a sample is rendered, the rest of the array is reserved at its rate with room,
// because a body of megabytes grown by doubling holds its old copy and the new one at once
// (capacity that is never written costs no memory).
template <typename AppendElement>
void AppendArray(size_t size, AppendElement append_element, std::string* out) {
  const size_t start = out->size();
  out->push_back('[');
  for (size_t i = 0; i < size; ++i) {
    if (i == kSampleElements) {
      const size_t rest = (out->size() - start) / kSampleElements * (size - i);
      if (out->capacity() < out->size() + rest) out->reserve(out->size() + rest / 4 * 5);
    }
    if (i > 0) out->push_back(',');
    append_element(i, out);
  }
  out->push_back(']');
}

// AppendArray of elements rendered as JSON values.
template <typename Element>
void AppendJsonArray(size_t size, Element element, std::string* out) {
  AppendArray(
      size, [&](size_t i, std::string* to) { to->append(DumpJson(element(i))); }, out);
}

}  // namespace

void TokenLogprobs::Add(const ::llmserve::v1::GeneratedToken& token) {
  chosen_.push_back({.token_id = token.token_id(), .logprob = token.logprob()});
  for (const ::llmserve::v1::TokenLogprob& alternative : token.top_logprobs()) {
    alternatives_.push_back({.token_id = alternative.token_id(), .logprob = alternative.logprob()});
  }
  alternatives_end_.push_back(static_cast<uint32_t>(alternatives_.size()));
}

absl::Span<const LogprobEntry> TokenLogprobs::alternatives(size_t i) const {
  const uint32_t begin = i == 0 ? 0 : alternatives_end_[i - 1];
  return absl::MakeConstSpan(alternatives_).subspan(begin, alternatives_end_[i] - begin);
}

Json ChatLogprobsJson(const ServedModel& model, const TokenLogprobs& tokens) {
  Json content = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i) content.push_back(ChatEntry(model, tokens, i));
  return {{"content", std::move(content)}};
}

void AppendChatLogprobs(const ServedModel& model, const TokenLogprobs& tokens, std::string* out) {
  out->append(R"({"content":)");
  AppendArray(
      tokens.size(), [&](size_t i, std::string* to) { AppendChatEntry(model, tokens, i, to); },
      out);
  out->push_back('}');
}

Json CompletionLogprobsJson(const ServedModel& model, const TokenLogprobs& tokens,
                            size_t text_offset) {
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string text = model.TokenText(tokens.chosen(i).token_id);
    out["tokens"].push_back(text);
    out["token_logprobs"].push_back(tokens.chosen(i).logprob);
    out["top_logprobs"].push_back(CompletionTop(model, tokens, i));
    out["text_offset"].push_back(text_offset);
    text_offset += text.size();
  }
  return out;
}

void AppendCompletionLogprobs(const ServedModel& model, const TokenLogprobs& tokens,
                              size_t text_offset, std::string* out) {
  // The keys in the order the JSON value above is written in (sorted), one array after another.
  out->append(R"({"text_offset":)");
  AppendJsonArray(
      tokens.size(),
      [&](size_t i) {
        const size_t offset = text_offset;
        text_offset += model.TokenText(tokens.chosen(i).token_id).size();
        return Json(offset);
      },
      out);
  out->append(R"(,"token_logprobs":)");
  AppendJsonArray(
      tokens.size(), [&](size_t i) { return Json(tokens.chosen(i).logprob); }, out);
  out->append(R"(,"tokens":)");
  AppendJsonArray(
      tokens.size(), [&](size_t i) { return Json(model.TokenText(tokens.chosen(i).token_id)); },
      out);
  out->append(R"(,"top_logprobs":)");
  AppendJsonArray(
      tokens.size(), [&](size_t i) { return CompletionTop(model, tokens, i); }, out);
  out->push_back('}');
}

std::string DumpJson(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace llmserve::gateway
