#include "worker/model/rope.h"

#include <cmath>
#include <cstdint>
#include <numbers>

namespace llmserve::worker {

std::vector<double> RopeInverseFrequencies(const ModelConfig& config) {
  const int64_t half = config.head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(config.rope_theta, static_cast<double>(2 * i) / config.head_dim);
  }
  const RopeScaling& s = config.rope_scaling;
  if (s.kind == RopeScaling::Kind::kLinear) {
    for (double& f : inv_freq) f /= s.factor;
  } else if (s.kind == RopeScaling::Kind::kLlama3) {
    // Llama 3.1: keep high frequencies, divide low ones by factor, blend in between.
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / s.low_freq_factor;
    const double high_freq_wavelen = old_len / s.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;
      if (wavelen > low_freq_wavelen) {
        f /= s.factor;
      } else {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

}  // namespace llmserve::worker
