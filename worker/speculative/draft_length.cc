#include "worker/speculative/draft_length.h"

#include <algorithm>

namespace llmserve::worker {

DraftLengthController::DraftLengthController(int32_t max_drafts)
    : max_drafts_(std::max(1, max_drafts)), length_(max_drafts_) {}

int32_t DraftLengthController::NextLength() {
  if (pause_left_ > 0) {
    --pause_left_;
    return 0;
  }
  return length_;
}

void DraftLengthController::Record(int32_t proposed, int32_t accepted) {
  if (proposed < 1) return;
  accepted = std::clamp(accepted, 0, proposed);
  if (accepted == proposed) {
    length_ = std::min(max_drafts_, proposed + 1);
  } else {
    length_ = std::min(max_drafts_, accepted + 1);
  }
  if (accepted > 0) {
    consecutive_misses_ = 0;
    return;
  }
  ++consecutive_misses_;
  if (consecutive_misses_ >= 2) {
    pause_left_ = std::min(kMaxBackoffSteps, 1 << std::min(consecutive_misses_ - 2, 5));
    length_ = 1;
  }
}

}  // namespace llmserve::worker
