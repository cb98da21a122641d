// JSON Schema (and JSON mode) -> GBNF, in one compact output layout: json.dumps's
// `{"a": 1, "b": [1, 2]}` — no whitespace but one space after ':' and ','. A model driven only
// by the mask must be able to finish, so no free whitespace is ever allowed.
//
// Supported: type (string/integer/number/boolean/null/object/array and unions), nullable,
// properties (generated in the schema's order; required ones always, optional ones may be
// skipped), required, additionalProperties (absent = false, as OpenAI's strict mode: the output
// then has exactly the declared shape; with declared properties, true or a schema also produce
// only the declared ones — valid, not complete; with no properties, true/a schema give a map),
// items / prefixItems (and draft-7 array items) / minItems / maxItems, enum, const (values
// filtered by the minimum / maximum / exclusive* / min/maxLength / min/maxItems / required beside
// them; any other validation keyword beside them is refused),
// minimum / maximum / exclusiveMinimum / exclusiveMaximum (integers: exact; numbers: exact for
// integer bounds, no exponent then; non-integer bounds of numbers are tightened inward to
// integers — valid output, not every valid number), minLength / maxLength (code points),
// pattern (regex_converter.h subset; JSON Schema search semantics; not with min/maxLength),
// format date / time / date-time / uuid / email / ipv4 (date does not check the day against the
// month; other formats are annotations and ignored), anyOf / oneOf (oneOf is treated as anyOf:
// the branches are not checked for overlap), allOf of one schema, $ref to "#..." JSON pointers
// ($defs, definitions, recursion), `{}` / true (any JSON value). Annotations are ignored.
// Keywords that change validity but are not supported (not, if/then/else, patternProperties,
// uniqueItems, multipleOf, dependentRequired, min/maxProperties, contains, ...) are
// INVALID_ARGUMENT naming the path: "response_format schema: properties.age.type: ...".
//
// Bounds: nesting depth kMaxSchemaDepth; string lengths and item counts up to kMaxRepetition;
// integer bounds within +-2^53.
//
// Thread-safety: pure functions.
#ifndef LLMSERVE_WORKER_STRUCTURED_JSON_SCHEMA_CONVERTER_H_
#define LLMSERVE_WORKER_STRUCTURED_JSON_SCHEMA_CONVERTER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::worker::structured {

inline constexpr int kMaxSchemaDepth = 64;

absl::StatusOr<std::string> JsonSchemaToGbnf(absl::string_view schema_text);

// Any JSON object (JSON mode), in the same layout.
std::string JsonObjectGbnf();

// "\"...\"" GBNF literal of raw bytes (valid UTF-8).
std::string GbnfLiteral(absl::string_view bytes);

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_JSON_SCHEMA_CONVERTER_H_
