// Non-throwing accessors over nlohmann::json for the tokenizer loader: a missing or mistyped
// field becomes an INVALID_ARGUMENT naming the component, never an exception.
#ifndef LLMSERVE_COMMON_TOKENIZER_JSON_UTIL_H_
#define LLMSERVE_COMMON_TOKENIZER_JSON_UTIL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llmserve::common::tokenizer {

using Json = nlohmann::json;

// The "type" string of a component object, or "" when absent.
std::string ComponentType(const Json& component);

// A required string field.
absl::StatusOr<std::string> GetString(const Json& object, const std::string& key,
                                      const std::string& where);
// An optional string field: `fallback` when missing or null.
absl::StatusOr<std::string> GetStringOr(const Json& object, const std::string& key,
                                        const std::string& fallback, const std::string& where);
// An optional bool field: `fallback` when missing or null.
absl::StatusOr<bool> GetBoolOr(const Json& object, const std::string& key, bool fallback,
                               const std::string& where);
// An optional non-negative integer field: `fallback` when missing or null.
absl::StatusOr<int64_t> GetIntOr(const Json& object, const std::string& key, int64_t fallback,
                                 const std::string& where);
// A required single-character string field (e.g. Metaspace "replacement").
absl::StatusOr<char32_t> GetChar(const Json& object, const std::string& key,
                                 const std::string& where);

}  // namespace llmserve::common::tokenizer

#endif  // LLMSERVE_COMMON_TOKENIZER_JSON_UTIL_H_
