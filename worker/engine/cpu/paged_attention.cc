#include "worker/engine/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llmserve::worker::cpu {

void WriteKv(const PagedKvLayout& layout, const int32_t* blocks, int64_t position, const float* k,
             const float* v, float* k_cache, float* v_cache) {
  const int64_t block = blocks[position / layout.block_size];
  const int64_t slot = position % layout.block_size;
  const size_t bytes = layout.head_dim * sizeof(float);
  for (int64_t h = 0; h < layout.num_kv_heads; ++h) {
    const int64_t offset = layout.Offset(block, h, slot);
    std::memcpy(k_cache + offset, k + h * layout.head_dim, bytes);
    std::memcpy(v_cache + offset, v + h * layout.head_dim, bytes);
  }
}

void AttendOneHead(const PagedKvLayout& layout, const int32_t* blocks, int64_t position,
                   int64_t kv_head, const float* q, float scale, const float* k_cache,
                   const float* v_cache, float* scores, float* out) {
  const int64_t d = layout.head_dim, bs = layout.block_size;
  const int64_t length = position + 1;
  float max_score = -INFINITY;
  for (int64_t start = 0; start < length; start += bs) {
    const float* keys = k_cache + layout.Offset(blocks[start / bs], kv_head, 0);
    const int64_t in_block = std::min(bs, length - start);
    for (int64_t s = 0; s < in_block; ++s) {
      const float* key = keys + s * d;
      float dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += q[i] * key[i];
      scores[start + s] = dot * scale;
      max_score = std::max(max_score, scores[start + s]);
    }
  }
  float sum = 0;
  for (int64_t j = 0; j < length; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  const float inv_sum = 1.0f / sum;
  std::fill(out, out + d, 0.0f);
  for (int64_t start = 0; start < length; start += bs) {
    const float* values = v_cache + layout.Offset(blocks[start / bs], kv_head, 0);
    const int64_t in_block = std::min(bs, length - start);
    for (int64_t s = 0; s < in_block; ++s) {
      const float weight = scores[start + s] * inv_sum;
      const float* value = values + s * d;
      for (int64_t i = 0; i < d; ++i) out[i] += weight * value[i];
    }
  }
}

}  // namespace llmserve::worker::cpu
