#include "worker/engine/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llmserve::worker::cpu {
namespace {

// Eight floats: two SSE registers on the x86-64 baseline, one AVX register in the AVX2 variant.
typedef float Vec8 __attribute__((vector_size(32)));

// a · b. Two accumulators hide the add latency; the reassociation changes the last bits only.
// always_inline: these are compiled inside each ISA variant of AttendImpl below, with its
// instruction set. (A Vec8 never crosses a call, which would change the calling convention.)
__attribute__((always_inline)) inline float Dot(const float* a, const float* b, int64_t n) {
  Vec8 acc0 = {}, acc1 = {}, x0, y0, x1, y1;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    std::memcpy(&x0, a + i, sizeof x0);
    std::memcpy(&y0, b + i, sizeof y0);
    std::memcpy(&x1, a + i + 8, sizeof x1);
    std::memcpy(&y1, b + i + 8, sizeof y1);
    acc0 += x0 * y0;
    acc1 += x1 * y1;
  }
  for (; i + 8 <= n; i += 8) {
    std::memcpy(&x0, a + i, sizeof x0);
    std::memcpy(&y0, b + i, sizeof y0);
    acc0 += x0 * y0;
  }
  acc0 += acc1;
  float sum = 0;
  for (int lane = 0; lane < 8; ++lane) sum += acc0[lane];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += w * x.
__attribute__((always_inline)) inline void Axpy(float w, const float* x, float* y, int64_t n) {
  const Vec8 wv = {w, w, w, w, w, w, w, w};
  Vec8 xv, yv;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::memcpy(&xv, x + i, sizeof xv);
    std::memcpy(&yv, y + i, sizeof yv);
    yv += wv * xv;
    std::memcpy(y + i, &yv, sizeof yv);
  }
  for (; i < n; ++i) y[i] += w * x[i];
}

__attribute__((always_inline)) inline void AttendImpl(const PagedKvLayout& layout,
                                                      const int32_t* blocks, int64_t position,
                                                      int64_t kv_head, const float* q, float scale,
                                                      const float* k_cache, const float* v_cache,
                                                      float* scores, float* out) {
  const int64_t d = layout.head_dim, bs = layout.block_size;
  const int64_t length = position + 1;
  float max_score = -INFINITY;
  for (int64_t start = 0; start < length; start += bs) {
    const float* keys = k_cache + layout.Offset(blocks[start / bs], kv_head, 0);
    const int64_t in_block = std::min(bs, length - start);
    for (int64_t s = 0; s < in_block; ++s) {
      scores[start + s] = Dot(q, keys + s * d, d) * scale;
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
      Axpy(scores[start + s] * inv_sum, values + s * d, out, d);
    }
  }
}

using AttendFn = void (*)(const PagedKvLayout&, const int32_t*, int64_t, int64_t, const float*,
                          float, const float*, const float*, float*, float*);

void AttendBaseline(const PagedKvLayout& layout, const int32_t* blocks, int64_t position,
                    int64_t kv_head, const float* q, float scale, const float* k_cache,
                    const float* v_cache, float* scores, float* out) {
  AttendImpl(layout, blocks, position, kv_head, q, scale, k_cache, v_cache, scores, out);
}

// The variant is picked once with __builtin_cpu_supports rather than with target_clones: an
// ifunc resolver runs before sanitizer runtimes start, and crashed the ThreadSanitizer build.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void AttendAvx2(const PagedKvLayout& layout,
                                                    const int32_t* blocks, int64_t position,
                                                    int64_t kv_head, const float* q, float scale,
                                                    const float* k_cache, const float* v_cache,
                                                    float* scores, float* out) {
  AttendImpl(layout, blocks, position, kv_head, q, scale, k_cache, v_cache, scores, out);
}
#endif

AttendFn SelectAttend() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return AttendAvx2;
#endif
  return AttendBaseline;
}

}  // namespace

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
  static const AttendFn attend = SelectAttend();
  attend(layout, blocks, position, kv_head, q, scale, k_cache, v_cache, scores, out);
}

}  // namespace llmserve::worker::cpu
