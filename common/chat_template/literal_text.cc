#include "common/chat_template/literal_text.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/utf8/utf8.h"
#include "nlohmann/json.hpp"

namespace llmserve::common {
namespace {

// Placeholders come from the supplementary private-use planes 15 and 16: no tokenizer gives
// them meaning, no template writes them, and each is one code point (4 bytes of UTF-8), so
// slicing by code point cannot cut one in half.
constexpr char32_t kFirstPlaceholder = 0xF0000;
constexpr char32_t kLastPlaceholder = 0x10FFFD;

bool IsPlaceholderRange(char32_t cp) {
  return cp >= kFirstPlaceholder && cp <= kLastPlaceholder && (cp & 0xFFFE) != 0xFFFE;
}

// The code point of the 4-byte UTF-8 sequence at `s[i]` when it lies in planes 15-16, else 0.
// Only the shape is checked: the inputs may not be valid UTF-8 (the tokenizer refuses that
// later), and a malformed sequence is simply not a placeholder.
char32_t PlaneFifteenOrSixteenAt(absl::string_view s, size_t i) {
  if (i + 4 > s.size()) return 0;
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 != 0xF3 && b0 != 0xF4) return 0;
  const auto b1 = static_cast<uint8_t>(s[i + 1]);
  const auto b2 = static_cast<uint8_t>(s[i + 2]);
  const auto b3 = static_cast<uint8_t>(s[i + 3]);
  if ((b1 & 0xC0) != 0x80 || (b2 & 0xC0) != 0x80 || (b3 & 0xC0) != 0x80) return 0;
  const char32_t cp = (static_cast<char32_t>(b0 & 0x07) << 18) |
                      (static_cast<char32_t>(b1 & 0x3F) << 12) |
                      (static_cast<char32_t>(b2 & 0x3F) << 6) | (b3 & 0x3F);
  return cp >= kFirstPlaceholder && cp <= 0x10FFFF ? cp : 0;
}

}  // namespace

// One render's placeholders: which code points the inputs already use, and which placeholder
// stands for which special text.
class SpecialTextGuard::Masker {
 public:
  explicit Masker(const SpecialTextGuard& guard)
      : guard_(guard), placeholder_of_(guard.texts_.size(), 0) {}

  // Notes the planes 15-16 code points of `s`, which placeholders must avoid.
  void Reserve(absl::string_view s) {
    for (size_t i = 0; i + 4 <= s.size(); ++i) {
      if (const char32_t cp = PlaneFifteenOrSixteenAt(s, i); cp != 0) used_.insert(cp);
    }
  }

  // `s` with each special text replaced by its placeholder.
  std::string Mask(absl::string_view s) {
    std::string out;
    size_t prev = 0;
    int32_t text = -1;
    size_t begin = 0;
    size_t end = 0;
    while (guard_.FindMatch(s, prev, &text, &begin, &end)) {
      out.append(s.data() + prev, begin - prev);
      out += common::utf8::Encode(PlaceholderOf(text));
      prev = end;
    }
    out.append(s.data() + prev, s.size() - prev);
    return out;
  }

  // JSON text the template sees parsed (tool definitions; tool-call arguments when they are an
  // object): the strings are masked after parsing, so an escaped special text ("\u003c|eot_id|>")
  // cannot slip through, and the JSON is written back only when something changed (the values
  // the template sees are the same, only their spelling in JSON differs). Other text is masked
  // as text, which is what the template sees.
  std::string MaskJson(const std::string& s, bool want_object) {
    nlohmann::ordered_json json =
        nlohmann::ordered_json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || (want_object ? !json.is_object() : !json.is_array())) {
      return Mask(s);
    }
    if (!MaskJsonValue(&json, 0)) return s;
    return json.dump(-1, ' ', /*ensure_ascii=*/false,
                     nlohmann::ordered_json::error_handler_t::replace);
  }

  // `rendered` with every placeholder turned back into its special text, and the ranges.
  RenderedChat Restore(absl::string_view rendered) const {
    RenderedChat out;
    if (text_of_.empty()) {
      out.text = std::string(rendered);
      return out;
    }
    out.text.reserve(rendered.size());
    size_t i = 0;
    while (i < rendered.size()) {
      const char32_t cp = PlaneFifteenOrSixteenAt(rendered, i);
      const auto it = cp == 0 ? text_of_.end() : text_of_.find(cp);
      if (it == text_of_.end()) {
        out.text.push_back(rendered[i++]);
        continue;
      }
      const std::string& text = guard_.texts_[it->second];
      out.literal_spans.push_back({out.text.size(), out.text.size() + text.size()});
      out.text += text;
      i += 4;
    }
    return out;
  }

  bool exhausted() const { return exhausted_; }

 private:
  // Deep enough for any JSON the renderer accepts (it refuses nesting past 32).
  static constexpr int kMaxDepth = 64;

  // Masks the keys and strings of `json` in place; whether anything changed. Deeper values
  // than kMaxDepth are left as they are: the renderer refuses them anyway.
  bool MaskJsonValue(nlohmann::ordered_json* json, int depth) {
    if (depth > kMaxDepth) return false;
    bool changed = false;
    if (json->is_string()) {
      std::string masked = Mask(json->get_ref<const std::string&>());
      if (masked != json->get_ref<const std::string&>()) {
        *json = std::move(masked);
        changed = true;
      }
    } else if (json->is_array()) {
      for (nlohmann::ordered_json& item : *json) changed |= MaskJsonValue(&item, depth + 1);
    } else if (json->is_object()) {
      nlohmann::ordered_json rebuilt = nlohmann::ordered_json::object();
      for (auto it = json->begin(); it != json->end(); ++it) {
        std::string masked_key = Mask(it.key());
        changed |= masked_key != it.key();
        changed |= MaskJsonValue(&it.value(), depth + 1);
        rebuilt[masked_key] = std::move(it.value());
      }
      if (changed) *json = std::move(rebuilt);
    }
    return changed;
  }

  char32_t PlaceholderOf(int32_t text) {
    if (placeholder_of_[text] != 0) return placeholder_of_[text];
    while (next_ <= kLastPlaceholder && (!IsPlaceholderRange(next_) || used_.contains(next_))) {
      ++next_;
    }
    if (next_ > kLastPlaceholder) {
      // Cannot happen for inputs of sane size; the caller fails the render.
      exhausted_ = true;
      return kFirstPlaceholder;
    }
    placeholder_of_[text] = next_;
    text_of_.emplace(next_, text);
    return next_++;
  }

  const SpecialTextGuard& guard_;
  absl::flat_hash_set<char32_t> used_;
  std::vector<char32_t> placeholder_of_;  // per special text; 0 while unassigned
  absl::flat_hash_map<char32_t, int32_t> text_of_;
  char32_t next_ = kFirstPlaceholder;
  bool exhausted_ = false;
};

SpecialTextGuard::SpecialTextGuard(const std::vector<std::string>& special_texts) {
  for (const std::string& text : special_texts) {
    if (text.empty()) continue;
    int32_t node = 0;
    for (char c : text) {
      const auto byte = static_cast<uint8_t>(c);
      auto it = nodes_[node].children.find(byte);
      if (it == nodes_[node].children.end()) {
        nodes_.emplace_back();
        it = nodes_[node].children.emplace(byte, static_cast<int32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    if (nodes_[node].text >= 0) continue;  // the same text twice
    nodes_[node].text = static_cast<int32_t>(texts_.size());
    texts_.push_back(text);
    first_byte_[static_cast<uint8_t>(text[0])] = true;
  }
}

bool SpecialTextGuard::FindMatch(absl::string_view s, size_t from, int32_t* text, size_t* begin,
                                 size_t* end) const {
  for (size_t start = from; start < s.size(); ++start) {
    if (!first_byte_[static_cast<uint8_t>(s[start])]) continue;
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = start; i < s.size(); ++i) {
      const auto it = nodes_[node].children.find(static_cast<uint8_t>(s[i]));
      if (it == nodes_[node].children.end()) break;
      node = it->second;
      if (nodes_[node].text >= 0) {
        best = nodes_[node].text;
        best_end = i + 1;
      }
    }
    if (best >= 0) {
      *text = best;
      *begin = start;
      *end = best_end;
      return true;
    }
  }
  return false;
}

absl::StatusOr<RenderedChat> SpecialTextGuard::RenderLiteral(const ChatTemplateInput& input,
                                                             absl::string_view template_source,
                                                             const Render& render) const {
  if (empty()) {
    absl::StatusOr<std::string> text = render(input);
    if (!text.ok()) return text.status();
    return RenderedChat{.text = *std::move(text)};
  }
  Masker masker(*this);
  masker.Reserve(template_source);
  masker.Reserve(input.bos_token);
  masker.Reserve(input.eos_token);
  masker.Reserve(input.tools_json);
  masker.Reserve(input.template_kwargs_json);
  for (const ChatMessage& message : input.messages) {
    masker.Reserve(message.content);
    masker.Reserve(message.name);
    masker.Reserve(message.tool_call_id);
    for (const ChatToolCall& call : message.tool_calls) {
      masker.Reserve(call.id);
      masker.Reserve(call.name);
      masker.Reserve(call.arguments);
    }
  }
  ChatTemplateInput masked = input;
  masked.tools_json = masker.MaskJson(input.tools_json, /*want_object=*/false);
  masked.template_kwargs_json = masker.MaskJson(input.template_kwargs_json, /*want_object=*/true);
  for (ChatMessage& message : masked.messages) {
    message.content = masker.Mask(message.content);
    message.name = masker.Mask(message.name);
    message.tool_call_id = masker.Mask(message.tool_call_id);
    for (ChatToolCall& call : message.tool_calls) {
      call.id = masker.Mask(call.id);
      call.name = masker.Mask(call.name);
      call.arguments = masker.MaskJson(call.arguments, /*want_object=*/true);
    }
  }
  if (masker.exhausted()) {
    return absl::ResourceExhaustedError(
        "chat: the messages use every private-use code point of planes 15 and 16");
  }
  absl::StatusOr<std::string> text = render(masked);
  if (!text.ok()) return text.status();
  return masker.Restore(*text);
}

}  // namespace llmserve::common
