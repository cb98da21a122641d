// Parses the tokens of a chat template into statements (see ast.h) with jinja2's grammar and
// operator precedence, for the subset of Jinja chat templates use (docs/chat-templates.md).
//
// Everything outside the subset is rejected here, at load time, so that the gateway can refuse
// a model whose template it would render wrongly: unknown statements (include, raw, ...),
// unknown filters and tests, break/continue outside a loop.
//
// Thread-safety: pure function.
#ifndef LLMSERVE_COMMON_CHAT_TEMPLATE_PARSER_H_
#define LLMSERVE_COMMON_CHAT_TEMPLATE_PARSER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/lexer.h"

namespace llmserve::common {

// The message of a template error at `pos`: "chat template: line L, column C: <message>".
std::string TemplateErrorMessage(SourcePos pos, const std::string& message);

// INVALID_ARGUMENT naming the line and column of the first problem.
absl::StatusOr<ast::Body> ParseTemplate(const std::vector<Token>& tokens);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_CHAT_TEMPLATE_PARSER_H_
