// Splits a Jinja2 template into tokens the way jinja2's lexer does under the environment
// Hugging Face renders chat templates with (transformers' apply_chat_template):
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
// with the default keep_trailing_newline=False. So, before parsing:
//   - "\r\n" and "\r" become "\n", and one trailing newline of the source is dropped;
//   - trim_blocks: the first "\n" right after a block tag `%}` or a comment `#}` is removed;
//   - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag
//     are removed (not before `{{`);
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` all
//     whitespace after it; `{%+` and `+%}` turn lstrip_blocks / trim_blocks off for that tag.
// Comments produce no tokens.
//
// Thread-safety: pure function.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_LEXER_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::common {

// A 1-based line and column (in bytes) of the template source after newline normalization.
struct SourcePos {
  int line = 1;
  int column = 1;
};

enum class TokenType {
  kText,        // literal template text (already whitespace-controlled)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal; text holds the decoded value
  kInt,         // integer literal; int_value holds it
  kFloat,       // float literal; float_value holds it
  kOp,          // operator or punctuation: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

// INVALID_ARGUMENT with "line L, column C: ..." for an unclosed tag or comment, an unterminated
// string, a malformed number or a character that starts no token.
absl::StatusOr<std::vector<Token>> Lex(absl::string_view source);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_LEXER_H_
