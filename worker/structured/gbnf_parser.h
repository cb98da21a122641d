// Parser of GBNF, llama.cpp's grammar dialect, into a byte-level Grammar (start rule "root").
//
// Supported: `name ::= alternatives` (a rule ends where the next `name ::=` starts, so rules may
// span lines), "literals" and [classes] with escapes (\n \r \t \\ \" \[ \] \- \xHH \uHHHH
// \UHHHHHHHH), ranges and negation [^...], `.` (any code point), ( ) groups, |, * + ? {m} {m,}
// {,n} {m,n}, # comments, rule references and recursion (not left recursion). Literals and
// classes are code points, matched as their UTF-8 encoding.
//
// Bounds: groups nest at most kMaxGbnfNesting deep; the grammar bounds of grammar.h apply.
// Errors are INVALID_ARGUMENT "<what>: line L, column C: ...".
//
// Thread-safety: a pure function.
#ifndef LLMSERVE_WORKER_STRUCTURED_GBNF_PARSER_H_
#define LLMSERVE_WORKER_STRUCTURED_GBNF_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/structured/grammar.h"

namespace llmserve::worker::structured {

inline constexpr int kMaxGbnfNesting = 128;

// Errors start with `what` and, when `source_positions`, the line and column in `source`: a
// client's own GBNF grammar gets them; GBNF generated from a regex, a JSON Schema or a choice list
// does not, since its positions are in text the client never wrote.
// `start_rule` names the rule the grammar starts from.
absl::StatusOr<Grammar> ParseGbnf(absl::string_view source, absl::string_view what = "grammar",
                                  bool source_positions = true,
                                  absl::string_view start_rule = "root");

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_GBNF_PARSER_H_
