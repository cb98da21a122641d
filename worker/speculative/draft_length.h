// How many draft tokens one request asks for at its next step, from how its earlier drafts fared.
//
// Verifying a draft costs a position of the forward pass whether or not it is accepted, and on a
// CPU that is not free even at batch 1 (a 5-position step takes ~1.5x a 1-position one on the
// `small` model). So a request whose drafts keep failing drafts less, then not at all for a while:
//   - all drafts accepted: one more next time (up to the maximum);
//   - some accepted: as many as were accepted, plus one;
//   - none accepted twice in a row: no drafts for 1, 2, 4, ... up to kMaxBackoffSteps steps,
//     doubling while the misses go on, and back to one draft after the pause.
//
// Not thread-safe: part of one request's state on the engine thread.

#ifndef LLMSERVE_WORKER_SPECULATIVE_DRAFT_LENGTH_H_
#define LLMSERVE_WORKER_SPECULATIVE_DRAFT_LENGTH_H_

#include <cstdint>

namespace llmserve::worker {

class DraftLengthController {
 public:
  static constexpr int32_t kMaxBackoffSteps = 32;

  // `max_drafts` >= 1; a new request starts at the maximum.
  explicit DraftLengthController(int32_t max_drafts);

  // The drafts to propose at this step: 0 while pausing (each call counts a step of the pause).
  int32_t NextLength();
  // Reports a verification: `proposed` >= 1 drafts, of which the first `accepted` matched.
  void Record(int32_t proposed, int32_t accepted);

 private:
  int32_t max_drafts_;
  int32_t length_;
  int32_t consecutive_misses_ = 0;
  int32_t pause_left_ = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SPECULATIVE_DRAFT_LENGTH_H_
