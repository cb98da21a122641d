// What the OpenAI request parsers share: the body's JSON type (ordered: a JSON Schema's
// properties are generated in the order the client wrote them, and a model answers better when,
// say, "reasoning" comes before "answer"), field lookup, and the 400 message naming a field.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_JSON_H_
#define LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_JSON_H_

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace llmserve::gateway::openai_json {

using Json = nlohmann::ordered_json;

// INVALID_ARGUMENT "'field' problem".
inline absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' ", problem));
}

// The field, or nullptr when absent or null (OpenAI clients send null for "unset").
inline const Json* Find(const Json& object, const char* field) {
  const auto it = object.find(field);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace llmserve::gateway::openai_json

#endif  // LLMSERVE_GATEWAY_FRONTENDS_OPENAI_OPENAI_JSON_H_
