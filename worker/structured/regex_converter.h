// Translates a regular expression (a practical subset, ECMAScript/Python-like) into a GBNF
// expression over code points, so that regex constraints and JSON Schema "pattern" share the
// GBNF parser and the byte-level matcher.
//
// Supported: literals, escapes (\d \w \s \D \W \S \. \n \t \r \f \v \0 \xHH \uHHHH \u{H..}),
// classes with ranges and negation, `.` (any code point but \n), groups ( ) (?: ) (?<name> ),
// |, * + ? {m} {m,} {m,n} (lazy `?` suffixes accepted: whole-string matching ignores laziness),
// `^` only at the start and `$` only at the end. Anything else — backreferences, lookaround,
// word boundaries, Unicode properties, possessive quantifiers — is INVALID_ARGUMENT naming it and
// its position. Repetition counts are at most kMaxRepetition, group nesting kMaxGbnfNesting.
//
// Thread-safety: pure functions.
#ifndef LLMSERVE_WORKER_STRUCTURED_REGEX_CONVERTER_H_
#define LLMSERVE_WORKER_STRUCTURED_REGEX_CONVERTER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker::structured {

struct RegexOptions {
  // The text matched is the content of a JSON string: literal '"', '\' and control characters
  // are emitted in their JSON-escaped form, and classes and `.` never produce them (a subset of
  // the pattern's language, but every output is valid JSON that matches the pattern).
  bool json_string = false;
  // JSON Schema semantics: the pattern may match anywhere unless anchored with ^ / $.
  bool search = false;
};

// The GBNF expression (no rule name) for `regex`. Errors: INVALID_ARGUMENT
// "regex: position N: ...".
absl::StatusOr<std::string> RegexToGbnf(absl::string_view regex, const RegexOptions& options);

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_REGEX_CONVERTER_H_
