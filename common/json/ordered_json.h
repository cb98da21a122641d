// Parses JSON text from outside (request bodies, JSON Schemas, model output) into
// nlohmann::ordered_json, which keeps the order keys were written in, in linear time and within
// bounds. nlohmann's own ordered_json parser looks every key up linearly in its object, so an
// object of n keys costs O(n^2): 200k keys took two minutes. Here each open object indexes its
// keys while it is built (a repeated key replaces the value in place, as nlohmann does), and the
// document is refused once it nests deeper than max_depth or holds more than max_values values
// (skipped ones included), so its memory stays a small multiple of its text.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_COMMON_JSON_ORDERED_JSON_H_
#define LLMSERVE_COMMON_JSON_ORDERED_JSON_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llmserve::common {

struct OrderedJsonLimits {
  int max_depth = 64;
  int64_t max_values = int64_t{1} << 20;
  // What the text is, for error messages: "<what> is not valid JSON: ...".
  std::string what = "the JSON";
  // When set, the values of top-level object keys it rejects are skipped (counted, not kept).
  std::function<bool(std::string_view key)> keep_top_level_key;
};

// INVALID_ARGUMENT "<what> is not valid JSON: ..." (nlohmann's message), "<what> is nested more
// than N levels deep", "<what> holds more than N JSON values".
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text,
                                                        const OrderedJsonLimits& limits = {});

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_JSON_ORDERED_JSON_H_
