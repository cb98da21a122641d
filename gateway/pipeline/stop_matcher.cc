#include "gateway/pipeline/stop_matcher.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace llmserve::gateway {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

StopMatcher::Step StopMatcher::Add(absl::string_view delta) {
  Step step;
  if (matched_) return step;
  pending_.append(delta.data(), delta.size());
  // The earliest occurrence of any stop string wins (ties: the longer string).
  size_t first = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at == std::string::npos) continue;
    if (at < first || (at == first && stop.size() > which->size())) {
      first = at;
      which = &stop;
    }
  }
  if (which != nullptr) {
    matched_ = true;
    step.text = pending_.substr(0, first);
    step.matched = *which;
    pending_.clear();
    return step;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t length = longest; length > hold; --length) {
      if (absl::EndsWith(pending_, absl::string_view(stop).substr(0, length))) {
        hold = length;
        break;
      }
    }
  }
  step.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return step;
}

std::string StopMatcher::Flush() {
  std::string rest;
  rest.swap(pending_);
  return matched_ ? std::string() : rest;
}

}  // namespace llmserve::gateway
