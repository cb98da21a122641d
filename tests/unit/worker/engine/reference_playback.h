// Plays a RandomRequestMix through a backend to its end, checking every logit row the backend
// returns against the reference model's logits of that sequence at that position: the check the
// weight-format tests (int8, int4) share. Header-only, for gtest tests (link
// llmserve_reference_model).

#ifndef LLMSERVE_TESTS_UNIT_ENGINE_REFERENCE_PLAYBACK_H_
#define LLMSERVE_TESTS_UNIT_ENGINE_REFERENCE_PLAYBACK_H_

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/worker/engine/random_request_mix.h"
#include "tests/unit/worker/engine/reference_model.h"
#include "worker/engine/backend.h"

namespace llmserve::worker::testing {

// Every logit must be within `relative` of its row's largest |logit| in `reference` (plus 1e-6);
// the first miss is fatal and names `label`, the step, sequence, position and logit. When given,
// `largest_error` receives the largest |logit - reference| / the row's largest |logit|.
inline void PlayAgainstReference(Backend& backend, RandomRequestMix& mix,
                                 const ReferenceModel& reference, double relative,
                                 const std::string& label, double* largest_error = nullptr) {
  if (largest_error != nullptr) *largest_error = 0;
  std::vector<std::vector<std::vector<double>>> references;  // [sequence][position][token]
  for (const RandomRequestMix::Sequence& seq : mix.sequences()) {
    references.push_back(reference.Logits(seq.tokens));
  }
  ForwardBatch batch;
  ForwardOutput output;
  std::vector<int> in_batch;
  for (int step = 0; step < 1000 && !mix.Done(); ++step) {
    ASSERT_TRUE(mix.NextBatch(&batch, &in_batch)) << label << ": out of KV blocks";
    if (in_batch.empty()) continue;
    ASSERT_TRUE(backend.Forward(batch, &output).ok()) << label;
    for (size_t i = 0; i < in_batch.size(); ++i) {
      const int32_t computed = mix.sequences()[in_batch[i]].computed;
      const int32_t chunk = batch.query_start[i + 1] - batch.query_start[i];
      const int32_t rows = output.row_start[i + 1] - output.row_start[i];
      for (int32_t r = 0; r < rows; ++r) {
        const int32_t position = computed + chunk - rows + r;
        const std::vector<double>& want = references[in_batch[i]][position];
        double largest = 0;
        for (double v : want) largest = std::max(largest, std::abs(v));
        const double tolerance = relative * largest + 1e-6;
        const float* got = output.Row(output.row_start[i] + r);
        for (size_t v = 0; v < want.size(); ++v) {
          if (largest_error != nullptr && largest > 0) {
            *largest_error = std::max(*largest_error, std::abs(got[v] - want[v]) / largest);
          }
          ASSERT_NEAR(got[v], want[v], tolerance)
              << label << " step " << step << " seq " << in_batch[i] << " position " << position
              << " logit " << v;
        }
      }
    }
    mix.Advance(batch, in_batch);
  }
  EXPECT_TRUE(mix.Done()) << label;
}

}  // namespace llmserve::worker::testing

#endif  // LLMSERVE_TESTS_UNIT_ENGINE_REFERENCE_PLAYBACK_H_
