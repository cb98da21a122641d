// Makes one embedding request's vector from the last layer's hidden states (after the final
// norm) as its prompt is computed, chunk by chunk: the last token's row, the first's, or the mean
// of all (accumulated in double), then cut to the requested length and scaled to unit length
// (as sentence-transformers' Normalize and torch's F.normalize do, with eps 1e-12).
//
// Not thread-safe: the engine thread owns every pooler.

#ifndef LLMSERVE_WORKER_ENGINE_POOLER_H_
#define LLMSERVE_WORKER_ENGINE_POOLER_H_

#include <cstdint>
#include <vector>

#include "worker/model/pooling_config.h"

namespace llmserve::worker {

struct PoolingParams {
  PoolingMethod method = PoolingMethod::kLast;
  bool normalize = true;
  // Keep the first `dimensions` values (Matryoshka); 0: all.
  int32_t dimensions = 0;
};

class Pooler {
 public:
  Pooler(const PoolingParams& params, int64_t hidden_size);

  // `count` rows of hidden_size floats, the hidden states of positions first_position.. in order.
  void Add(const float* rows, int32_t count, int32_t first_position);
  // The request was preempted: its prompt is computed again from position 0.
  void Reset();
  // The embedding, once every one of the prompt's `num_tokens` positions was added.
  std::vector<float> Finish(int32_t num_tokens) const;

 private:
  const PoolingParams params_;
  const int64_t hidden_size_;
  // kMean: the running sum; kLast, kCls: the row kept.
  std::vector<double> pooled_;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_POOLER_H_
