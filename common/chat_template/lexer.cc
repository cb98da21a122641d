#include "common/chat_template/lexer.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/py_string.h"
#include "common/utf8/utf8.h"

namespace llmserve::common {
namespace {

// jinja2 splits the source on every newline convention and joins it with "\n", dropping one
// trailing newline (keep_trailing_newline=False).
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(absl::string_view source) : src_(NormalizeNewlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    // jinja2's `line_starting`: the previous match ended a line, so text before the next tag
    // is at a line start even without a newline in it.
    bool line_starting = true;
    while (true) {
      const size_t tag = FindTagStart(pos);
      std::string text = src_.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
      if (tag == std::string::npos) {
        EmitText(std::move(text), pos);
        break;
      }
      const char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      if (sign == '-') {
        text = py_string::Strip(text, nullptr, /*left=*/false, /*right=*/true);
      } else if (sign != '+' && kind != '{') {
        LstripBlock(line_starting, &text);
      }
      EmitText(std::move(text), pos);
      const size_t after_open = tag + 2 + (sign != '\0' ? 1 : 0);
      absl::StatusOr<size_t> end =
          kind == '#' ? SkipComment(tag, after_open) : LexTag(kind, tag, after_open);
      if (!end.ok()) return end.status();
      pos = *end;
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof;
    eof.type = TokenType::kEof;
    eof.pos = PosAt(src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  SourcePos PosAt(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    SourcePos pos;
    pos.line = static_cast<int>(line);
    pos.column = static_cast<int>(offset - line_starts_[line - 1] + 1);
    return pos;
  }

  absl::Status Error(size_t offset, absl::string_view message) const {
    const SourcePos pos = PosAt(offset);
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: line ", pos.line, ", column ", pos.column, ": ", message));
  }

  size_t FindTagStart(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
    }
    return std::string::npos;
  }

  // lstrip_blocks: drop the whitespace between the last line start and the tag.
  static void LstripBlock(bool line_starting, std::string* text) {
    const size_t newline = text->rfind('\n');
    const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if (line_start == 0 && !line_starting) return;
    if (line_start == text->size()) return;
    const std::string tail = text->substr(line_start);
    if (py_string::Strip(tail, nullptr, true, true).empty()) text->resize(line_start);
  }

  void EmitText(std::string text, size_t offset) {
    if (text.empty()) return;
    Token token;
    token.type = TokenType::kText;
    token.text = std::move(text);
    token.pos = PosAt(offset);
    tokens_.push_back(std::move(token));
  }

  void Emit(TokenType type, std::string text, size_t offset) {
    Token token;
    token.type = type;
    token.text = std::move(text);
    token.pos = PosAt(offset);
    tokens_.push_back(std::move(token));
  }

  // Offset after all whitespace starting at `p` (jinja2's `\s*` after a `-` end marker).
  size_t SkipSpace(size_t p) const {
    while (p < src_.size()) {
      char32_t cp;
      const int len = utf8::DecodeOne(src_, p, &cp);
      if (len <= 0 || !py_string::IsSpace(cp)) break;
      p += static_cast<size_t>(len);
    }
    return p;
  }

  absl::StatusOr<size_t> SkipComment(size_t tag, size_t after_open) const {
    const size_t close = src_.find("#}", after_open);
    if (close == std::string::npos) return Error(tag, "unclosed comment");
    size_t end = close + 2;
    if (close > after_open && src_[close - 1] == '-') {
      end = SkipSpace(end);
    } else if (!(close > after_open && src_[close - 1] == '+') && end < src_.size() &&
               src_[end] == '\n') {
      ++end;  // trim_blocks
    }
    return end;
  }

  // Lexes the inside of a `{{ }}` or `{% %}` tag; returns the offset after its end marker.
  absl::StatusOr<size_t> LexTag(char kind, size_t tag, size_t after_open) {
    const bool is_var = kind == '{';
    Emit(is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, is_var ? "{{" : "{%", tag);
    std::vector<char> brackets;
    size_t p = after_open;
    while (true) {
      p = SkipSpace(p);
      if (p >= src_.size()) {
        return Error(tag, is_var ? "unclosed '{{' (missing '}}')" : "unclosed '{%' (missing '%}')");
      }
      const absl::string_view rest = absl::string_view(src_).substr(p);
      if (brackets.empty()) {
        const char* close = is_var ? "}}" : "%}";
        if (rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == close) {
          Emit(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, close, p);
          return SkipSpace(p + 3);
        }
        if (!is_var && rest.size() >= 3 && rest[0] == '+' && rest.substr(1, 2) == close) {
          Emit(TokenType::kBlockEnd, close, p);
          return p + 3;
        }
        if (rest.substr(0, 2) == close) {
          Emit(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, close, p);
          size_t end = p + 2;
          if (!is_var && end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
          return end;
        }
      }
      const char c = src_[p];
      if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> end = LexString(p);
        if (!end.ok()) return end.status();
        p = *end;
      } else if (IsDigit(c)) {
        absl::StatusOr<size_t> end = LexInt(p);
        if (!end.ok()) return end.status();
        p = *end;
      } else if (IsNameStart(c)) {
        size_t end = p;
        while (end < src_.size() && IsNameChar(src_[end])) ++end;
        Emit(TokenType::kName, src_.substr(p, end - p), p);
        p = end;
      } else {
        static constexpr absl::string_view kTwoCharOps[] = {"//", "**", "==", "!=", "<=", ">="};
        size_t len = 0;
        for (absl::string_view op : kTwoCharOps) {
          if (rest.substr(0, 2) == op) len = 2;
        }
        if (len == 0 &&
            absl::string_view("+-*/%~<>=()[]{},.:|").find(c) != absl::string_view::npos) {
          len = 1;
        }
        if (len == 0) {
          return Error(p, absl::StrCat("unexpected character '", src_.substr(p, 1), "'"));
        }
        if (c == '(' || c == '[' || c == '{') {
          brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
          if (brackets.empty() || brackets.back() != c) {
            return Error(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
          }
          brackets.pop_back();
        }
        Emit(TokenType::kOp, src_.substr(p, len), p);
        p += len;
      }
    }
  }

  absl::StatusOr<size_t> LexInt(size_t start) {
    size_t p = start;
    int64_t value = 0;
    while (p < src_.size() && (IsDigit(src_[p]) || (src_[p] == '_' && p > start))) {
      if (src_[p] != '_') {
        const int digit = src_[p] - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return Error(start, "integer literal out of range");
        }
        value = value * 10 + digit;
      }
      ++p;
    }
    // jinja2's float literal: digits, then .digits and/or e[+-]digits.
    size_t q = p;
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
      is_float = true;
      ++q;
      while (q < src_.size() && (IsDigit(src_[q]) || src_[q] == '_')) ++q;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && IsDigit(src_[e])) {
        is_float = true;
        q = e;
        while (q < src_.size() && (IsDigit(src_[q]) || src_[q] == '_')) ++q;
      }
    }
    if (is_float) {
      std::string text;
      for (size_t i = start; i < q; ++i) {
        if (src_[i] != '_') text.push_back(src_[i]);
      }
      double d = 0;
      if (!absl::SimpleAtod(text, &d)) return Error(start, "malformed float literal");
      Emit(TokenType::kFloat, text, start);
      tokens_.back().float_value = d;
      return q;
    }
    Emit(TokenType::kInt, src_.substr(start, p - start), start);
    tokens_.back().int_value = value;
    return p;
  }

  // A quoted literal with Python's escapes (jinja2 decodes it with "unicode-escape").
  absl::StatusOr<size_t> LexString(size_t start) {
    const char quote = src_[start];
    std::string value;
    size_t p = start + 1;
    while (true) {
      if (p >= src_.size()) return Error(start, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return Error(start, "unterminated string literal");
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
        case '\'':
        case '"':
          value.push_back(e);
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t i = 0; i < digits; ++i) {
            const int h = p + i < src_.size() ? HexValue(src_[p + i]) : -1;
            if (h < 0) return Error(p - 2, "malformed \\x, \\u or \\U escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          p += digits;
          if (cp > 0x10FFFF) return Error(p - 2, "escape out of the Unicode range");
          utf8::Append(static_cast<char32_t>(cp), &value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            }
            utf8::Append(static_cast<char32_t>(cp), &value);
          } else {
            // Python keeps an unknown escape as written.
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    Emit(TokenType::kString, std::move(value), start);
    return p + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source) { return Lexer(source).Run(); }

}  // namespace llmserve::common
