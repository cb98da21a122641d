#include "common/tokenizer/decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/regex.h"
#include "common/utf8/utf8.h"

namespace llmserve::common::tokenizer {
namespace {

// Decodes `text` into code points (lossy for invalid bytes, which only kBytes mode produces).
std::vector<char32_t> CodePoints(const std::string& text) {
  std::vector<char32_t> out;
  size_t pos = 0;
  char32_t cp;
  while (pos < text.size()) {
    const int n = common::utf8::DecodeOne(text, pos, &cp);
    out.push_back(n > 0 ? cp : common::utf8::kReplacementChar);
    pos += n > 0 ? n : -n;
  }
  return out;
}

class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode mode) const override {
    std::string bytes;
    for (const std::string& token : *tokens) AppendBytesOfToken(token, &bytes);
    tokens->assign(1, mode == DecodeMode::kText ? common::utf8::SanitizeLossy(bytes) : bytes);
  }
};

class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode mode) const override {
    std::vector<std::string> out;
    std::string pending;  // bytes of consecutive <0xXX> tokens
    auto flush = [&] {
      if (pending.empty()) return;
      if (mode == DecodeMode::kBytes || common::utf8::IsValid(pending)) {
        out.push_back(pending);
      } else {
        // HF emits one U+FFFD per byte of an invalid run.
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& token : *tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        byte = HexByte(token[3], token[4]);
      }
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens->swap(out);
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int HexByte(char hi, char lo) {
    const int h = HexDigit(hi);
    const int l = HexDigit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode) const override {
    std::string fused = absl::StrJoin(*tokens, "");
    tokens->assign(1, std::move(fused));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode) const override {
    for (std::string& token : *tokens) {
      if (regex_ == nullptr) {
        if (!literal_.empty()) token = absl::StrReplaceAll(token, {{literal_, content_}});
        continue;
      }
      if (!common::utf8::IsValid(token)) continue;  // PCRE2 is run without UTF checks
      std::vector<std::pair<size_t, size_t>> matches;
      if (!regex_->FindAll(token, &matches).ok()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [begin, end] : matches) {
        out.append(token, prev, begin - prev).append(content_);
        prev = end;
      }
      token = out.append(token, prev, std::string::npos);
    }
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode) const override {
    for (std::string& token : *tokens) {
      if (common::utf8::IsValid(token)) {
        token = Strip(token);
      } else if (content_ < 0x80) {
        // Raw bytes (kBytes mode): an ASCII content char can be stripped bytewise.
        size_t begin = 0;
        while (begin < start_ && begin < token.size() && token[begin] == char(content_)) ++begin;
        size_t end = token.size();
        while (token.size() - end < stop_ && end > begin && token[end - 1] == char(content_)) --end;
        token = token.substr(begin, end - begin);
      }
    }
  }

 private:
  std::string Strip(const std::string& token) const {
    const std::vector<char32_t> chars = CodePoints(token);
    size_t start_cut = 0;
    while (start_cut < start_ && start_cut < chars.size() && chars[start_cut] == content_) {
      ++start_cut;
    }
    size_t stop_cut = chars.size();
    while (chars.size() - stop_cut < stop_ && stop_cut > start_cut &&
           chars[stop_cut - 1] == content_) {
      --stop_cut;
    }
    std::string out;
    for (size_t i = start_cut; i < stop_cut; ++i) common::utf8::Append(chars[i], &out);
    return out;
  }

  char32_t content_;
  size_t start_;
  size_t stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first)
      : replacement_(common::utf8::Encode(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      // HF drops every replacement char of the first token unless prepend_scheme is "never".
      const char* with = i == 0 && strip_first_ ? "" : " ";
      (*tokens)[i] = absl::StrReplaceAll((*tokens)[i], {{replacement_, with}});
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens, DecodeMode mode) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens, mode);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

absl::StatusOr<std::unique_ptr<Decoder>> ReplaceFromJson(const Json& json) {
  constexpr char kWhere[] = "decoder Replace";
  std::string content;
  LLMSERVE_ASSIGN_OR_RETURN(content, GetString(json, "content", kWhere));
  const auto pattern = json.find("pattern");
  if (pattern != json.end() && pattern->is_object() && pattern->contains("String")) {
    std::string literal;
    LLMSERVE_ASSIGN_OR_RETURN(literal, GetString(*pattern, "String", kWhere));
    return std::make_unique<ReplaceDecoder>(literal, nullptr, content);
  }
  if (pattern != json.end() && pattern->is_object() && pattern->contains("Regex")) {
    std::string source;
    std::unique_ptr<Regex> regex;
    LLMSERVE_ASSIGN_OR_RETURN(source, GetString(*pattern, "Regex", kWhere));
    LLMSERVE_ASSIGN_OR_RETURN(regex, Regex::Compile(source));
    return std::make_unique<ReplaceDecoder>("", std::move(regex), content);
  }
  return absl::InvalidArgumentError("decoder Replace: pattern must be {String} or {Regex}");
}

absl::StatusOr<std::unique_ptr<Decoder>> StripFromJson(const Json& json) {
  constexpr char kWhere[] = "decoder Strip";
  char32_t content = 0;
  int64_t start = 0;
  int64_t stop = 0;
  LLMSERVE_ASSIGN_OR_RETURN(content, GetChar(json, "content", kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(start, GetIntOr(json, "start", 0, kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(stop, GetIntOr(json, "stop", 0, kWhere));
  return std::make_unique<StripDecoder>(content, start, stop);
}

absl::StatusOr<std::unique_ptr<Decoder>> MetaspaceFromJson(const Json& json) {
  constexpr char kWhere[] = "decoder Metaspace";
  char32_t replacement = 0;
  bool legacy_prefix = true;
  std::string scheme;
  LLMSERVE_ASSIGN_OR_RETURN(replacement, GetChar(json, "replacement", kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(legacy_prefix, GetBoolOr(json, "add_prefix_space", true, kWhere));
  LLMSERVE_ASSIGN_OR_RETURN(
      scheme, GetStringOr(json, "prepend_scheme", legacy_prefix ? "always" : "never", kWhere));
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, ": unknown prepend_scheme \"", scheme, "\""));
  }
  return std::make_unique<MetaspaceDecoder>(replacement, scheme != "never");
}

absl::StatusOr<std::unique_ptr<Decoder>> SequenceFromJson(const Json& json) {
  const auto it = json.find("decoders");
  if (it == json.end() || !it->is_array()) {
    return absl::InvalidArgumentError("decoder Sequence: \"decoders\" must be an array");
  }
  std::vector<std::unique_ptr<Decoder>> steps;
  for (const Json& item : *it) {
    std::unique_ptr<Decoder> step;
    LLMSERVE_ASSIGN_OR_RETURN(step, DecoderFromJson(item));
    if (step != nullptr) steps.push_back(std::move(step));
  }
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> DecoderFromJson(const Json& json) {
  if (json.is_null()) return nullptr;
  const std::string type = ComponentType(json);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") return ReplaceFromJson(json);
  if (type == "Strip") return StripFromJson(json);
  if (type == "Metaspace") return MetaspaceFromJson(json);
  if (type == "Sequence") return SequenceFromJson(json);
  return absl::InvalidArgumentError(absl::StrCat("unsupported decoder type \"", type, "\""));
}

}  // namespace llmserve::common::tokenizer
