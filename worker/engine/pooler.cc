#include "worker/engine/pooler.h"

#include <algorithm>
#include <cmath>

namespace llmserve::worker {

Pooler::Pooler(const PoolingParams& params, int64_t hidden_size)
    : params_(params), hidden_size_(hidden_size), pooled_(hidden_size, 0.0) {}

void Pooler::Add(const float* rows, int32_t count, int32_t first_position) {
  if (count <= 0) return;
  switch (params_.method) {
    case PoolingMethod::kMean:
      for (int32_t r = 0; r < count; ++r) {
        const float* row = rows + r * hidden_size_;
        for (int64_t i = 0; i < hidden_size_; ++i) pooled_[i] += row[i];
      }
      break;
    case PoolingMethod::kLast:
      std::copy(rows + (count - 1) * hidden_size_, rows + count * hidden_size_, pooled_.begin());
      break;
    case PoolingMethod::kCls:
      if (first_position == 0) std::copy(rows, rows + hidden_size_, pooled_.begin());
      break;
  }
}

void Pooler::Reset() { std::fill(pooled_.begin(), pooled_.end(), 0.0); }

std::vector<float> Pooler::Finish(int32_t num_tokens) const {
  const int64_t length =
      params_.dimensions > 0 ? std::min<int64_t>(params_.dimensions, hidden_size_) : hidden_size_;
  const double scale =
      params_.method == PoolingMethod::kMean && num_tokens > 0 ? 1.0 / num_tokens : 1.0;
  std::vector<double> values(pooled_.begin(), pooled_.begin() + length);
  for (double& value : values) value *= scale;
  double divisor = 1.0;
  if (params_.normalize) {
    double squares = 0;
    for (double value : values) squares += value * value;
    divisor = std::max(std::sqrt(squares), 1e-12);
  }
  std::vector<float> out(length);
  for (int64_t i = 0; i < length; ++i) out[i] = static_cast<float>(values[i] / divisor);
  return out;
}

}  // namespace llmserve::worker
