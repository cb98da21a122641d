// Stop strings over streamed text. Text arrives in deltas; a stop string may span several
// deltas, so text that could be the start of a stop string is held back until it is either
// completed (the stream stops there, the stop string and anything after it dropped) or ruled
// out (then emitted). Text held back at the end of the stream is emitted by Flush.
//
// Stop strings are valid UTF-8 and deltas are whole characters, so text is only ever split at
// character boundaries (a continuation byte never equals a stop string's first byte).
//
// Not thread-safe: one per stream.

#ifndef LLMSERVE_GATEWAY_PIPELINE_STOP_MATCHER_H_
#define LLMSERVE_GATEWAY_PIPELINE_STOP_MATCHER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace llmserve::gateway {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Step {
    // Text safe to emit now.
    std::string text;
    // The stop string that completed (the stream ends: nothing after it is emitted).
    std::optional<std::string> matched;
  };
  // Adds a delta. After a match, further calls return nothing.
  Step Add(absl::string_view delta);
  // The text still held back (the stream ended without a match).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_STOP_MATCHER_H_
