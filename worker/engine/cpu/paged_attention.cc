#include "worker/engine/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llmserve::worker::cpu {
namespace {

// Eight floats: two SSE registers on the x86-64 baseline, one AVX register where the clone for
// a newer CPU runs. target_clones compiles each function once per listed ISA and picks one at
// load time (ifunc), so the build runs everywhere and uses what the CPU has.
typedef float Vec8 __attribute__((vector_size(32)));

#if defined(__x86_64__)
#define LLMSERVE_SIMD_CLONES \
  __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define LLMSERVE_SIMD_CLONES
#endif

// Unaligned loads and stores as macros: a Vec8 passed to or returned from a function would
// change the calling convention between the default and the AVX clones.
#define LLMSERVE_LOAD8(v, p) std::memcpy(&(v), (p), sizeof(Vec8))
#define LLMSERVE_STORE8(p, v) std::memcpy((p), &(v), sizeof(Vec8))

// a · b. Two accumulators hide the add latency; the reassociation changes the last bits only.
LLMSERVE_SIMD_CLONES float Dot(const float* a, const float* b, int64_t n) {
  Vec8 acc0 = {}, acc1 = {};
  int64_t i = 0;
  Vec8 x0, y0, x1, y1;
  for (; i + 16 <= n; i += 16) {
    LLMSERVE_LOAD8(x0, a + i);
    LLMSERVE_LOAD8(y0, b + i);
    LLMSERVE_LOAD8(x1, a + i + 8);
    LLMSERVE_LOAD8(y1, b + i + 8);
    acc0 += x0 * y0;
    acc1 += x1 * y1;
  }
  for (; i + 8 <= n; i += 8) {
    LLMSERVE_LOAD8(x0, a + i);
    LLMSERVE_LOAD8(y0, b + i);
    acc0 += x0 * y0;
  }
  acc0 += acc1;
  float sum = 0;
  for (int lane = 0; lane < 8; ++lane) sum += acc0[lane];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += w * x.
LLMSERVE_SIMD_CLONES void Axpy(float w, const float* x, float* y, int64_t n) {
  const Vec8 wv = {w, w, w, w, w, w, w, w};
  int64_t i = 0;
  Vec8 xv, yv;
  for (; i + 8 <= n; i += 8) {
    LLMSERVE_LOAD8(xv, x + i);
    LLMSERVE_LOAD8(yv, y + i);
    yv += wv * xv;
    LLMSERVE_STORE8(y + i, yv);
  }
  for (; i < n; ++i) y[i] += w * x[i];
}

#undef LLMSERVE_SIMD_CLONES
#undef LLMSERVE_LOAD8
#undef LLMSERVE_STORE8

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

}  // namespace llmserve::worker::cpu
