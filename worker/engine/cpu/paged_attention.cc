#include "worker/engine/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/engine/cpu/cpu_features.h"
#include "worker/engine/cpu/simd.h"

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

#if defined(__x86_64__)
LLMSERVE_TARGET_AVX2 void AttendAvx2(const PagedKvLayout& layout, const int32_t* blocks,
                                     int64_t position, int64_t kv_head, const float* q, float scale,
                                     const float* k_cache, const float* v_cache, float* scores,
                                     float* out) {
  AttendImpl(layout, blocks, position, kv_head, q, scale, k_cache, v_cache, scores, out);
}

// ---- AVX2, for head_dim a multiple of 8 up to 128 (others take AttendAvx2 above): eight keys
// scored at once (the query chunk loaded once for all eight, one transposing reduction instead of
// a horizontal sum per key) and a vectorized exp; the output in registers, 8 chunks per pass over
// the values. The generic variant (a horizontal sum per key, a scalar exp per score) took 1.1 ms
// of an 11 ms decode step on the AVX2 paths; this one takes 0.7.

constexpr int kMaxAvx2Chunks = 16;  // 8 floats per chunk: head_dim <= 128

// Lane t of the result is the sum of the 8 lanes of v[t].
LLMSERVE_TARGET_AVX2 inline __m256 SumEach8(const __m256 (&v)[8]) {
  // Per 128-bit half: (v[4i] half sum, v[4i + 1]'s, v[4i + 2]'s, v[4i + 3]'s).
  const __m256 low = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 high = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(low, high, 0x20),
                       _mm256_permute2f128_ps(low, high, 0x31));
}

LLMSERVE_TARGET_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

LLMSERVE_TARGET_AVX2 inline float HorizontalMax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

template <int kChunks>
LLMSERVE_TARGET_AVX2 void AttendAvx2Chunks(const PagedKvLayout& layout, const int32_t* blocks,
                                           int64_t position, int64_t kv_head, const float* q,
                                           float scale, const float* k_cache, const float* v_cache,
                                           float* scores, float* out) {
  const int64_t d = layout.head_dim, bs = layout.block_size;
  const int64_t length = position + 1;
  alignas(32) float query[8 * kChunks];
#pragma GCC unroll 16
  for (int c = 0; c < kChunks; ++c) {
    _mm256_store_ps(query + 8 * c,
                    _mm256_mul_ps(_mm256_loadu_ps(q + 8 * c), _mm256_set1_ps(scale)));
  }
  // A cursor walks the block table; past the last key, the rows repeat the first (their scores
  // are not stored).
  int64_t block = 0, slot = 0;
  const float* block_keys = k_cache + layout.Offset(blocks[0], kv_head, 0);
  for (int64_t j = 0; j < length; j += 8) {
    const int keys = static_cast<int>(std::min<int64_t>(8, length - j));
    const float* key[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      if (t >= keys) {
        key[t] = key[0];
        continue;
      }
      key[t] = block_keys + slot * d;
      if (++slot == bs && j + t + 1 < length) {
        slot = 0;
        block_keys = k_cache + layout.Offset(blocks[++block], kv_head, 0);
      }
    }
    __m256 dot[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) dot[t] = _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) {
      const __m256 qc = _mm256_load_ps(query + 8 * c);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        dot[t] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(key[t] + 8 * c), dot[t]);
      }
    }
    const __m256 sums = SumEach8(dot);
    if (keys == 8) {
      _mm256_storeu_ps(scores + j, sums);
    } else {
      alignas(32) float partial[8];
      _mm256_store_ps(partial, sums);
      std::memcpy(scores + j, partial, keys * sizeof(float));
    }
  }
  int64_t j = 0;
  __m256 max8 = _mm256_set1_ps(-INFINITY);
  for (; j + 8 <= length; j += 8) max8 = _mm256_max_ps(max8, _mm256_loadu_ps(scores + j));
  float max_score = HorizontalMax(max8);
  for (; j < length; ++j) max_score = std::max(max_score, scores[j]);
  const __m256 max_v = _mm256_set1_ps(max_score);
  __m256 sum8 = _mm256_setzero_ps();
  for (j = 0; j + 8 <= length; j += 8) {
    const __m256 e = ExpNonPositiveAvx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), max_v));
    _mm256_storeu_ps(scores + j, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = HorizontalSum(sum8);
  for (; j < length; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  const __m256 inv_sum = _mm256_set1_ps(1.0f / sum);
  // The output 8 chunks (64 floats) at a time, in registers; a second pass for head_dim > 64.
#pragma GCC unroll 2
  for (int first = 0; first < kChunks; first += 8) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t start = 0; start < length; start += bs) {
      const float* values = v_cache + layout.Offset(blocks[start / bs], kv_head, 0);
      const int64_t in_block = std::min(bs, length - start);
      for (int64_t s = 0; s < in_block; ++s) {
        const __m256 weight = _mm256_set1_ps(scores[start + s]);
        const float* row = values + s * d + 8 * first;
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          if (first + c < kChunks) {
            acc[c] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(row + 8 * c), acc[c]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      if (first + c < kChunks) {
        _mm256_storeu_ps(out + 8 * (first + c), _mm256_mul_ps(acc[c], inv_sum));
      }
    }
  }
}

// AttendAvx2Chunks for this head_dim, or the generic AVX2 variant.
AttendFn Avx2For(int64_t head_dim) {
  static constexpr AttendFn kByChunks[kMaxAvx2Chunks] = {
      AttendAvx2Chunks<1>,  AttendAvx2Chunks<2>,  AttendAvx2Chunks<3>,  AttendAvx2Chunks<4>,
      AttendAvx2Chunks<5>,  AttendAvx2Chunks<6>,  AttendAvx2Chunks<7>,  AttendAvx2Chunks<8>,
      AttendAvx2Chunks<9>,  AttendAvx2Chunks<10>, AttendAvx2Chunks<11>, AttendAvx2Chunks<12>,
      AttendAvx2Chunks<13>, AttendAvx2Chunks<14>, AttendAvx2Chunks<15>, AttendAvx2Chunks<16>};
  if (head_dim % 8 != 0 || head_dim > 8 * kMaxAvx2Chunks) return AttendAvx2;
  return kByChunks[head_dim / 8 - 1];
}

// ---- AVX-512, for head_dim <= 128: the query (pre-scaled) and the output row stay in up to 8
// registers each while the keys and values stream past; the softmax's exp is vectorized.

constexpr int kMaxAvx512Chunks = 8;  // 16 floats per chunk: head_dim <= 128

LLMSERVE_TARGET_AVX512 inline __mmask16 FirstLanes(int64_t lanes) {
  return lanes >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << lanes) - 1);
}

// Lane t of the result is the sum of the 16 lanes of v[t]: pairs of vectors are interleaved and
// added at 32-bit, then 64-bit, then 128-bit granularity, each step halving the vectors left.
LLMSERVE_TARGET_AVX512 inline __m512 SumEach(const __m512 (&v)[16]) {
  __m512 pairs[8], quads[4], octets[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    // Per 128-bit lane: (a0 + a2, b0 + b2, a1 + a3, b1 + b3) for a = v[2i], b = v[2i + 1].
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    // Per 128-bit lane: the lane's sums of v[4i .. 4i + 3], in order.
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    // 128-bit lanes: (lanes 0 + 1 of quads[2i], lanes 2 + 3 of it, the same of quads[2i + 1]).
    octets[i] = _mm512_add_ps(
        _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
        _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // 128-bit lane L: the whole sums of v[4L .. 4L + 3].
  return _mm512_add_ps(_mm512_shuffle_f32x4(octets[0], octets[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(octets[0], octets[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

template <int kChunks>
LLMSERVE_TARGET_AVX512 void AttendAvx512(const PagedKvLayout& layout, const int32_t* blocks,
                                         int64_t position, int64_t kv_head, const float* q,
                                         float scale, const float* k_cache, const float* v_cache,
                                         float* scores, float* out) {
  const int64_t d = layout.head_dim, bs = layout.block_size;
  const int64_t length = position + 1;
  const __mmask16 last = FirstLanes(d - (kChunks - 1) * 16);
  const auto mask = [last](int chunk) {
    return chunk == kChunks - 1 ? last : static_cast<__mmask16>(0xffff);
  };
  __m512 query[kChunks];
#pragma GCC unroll 8
  for (int c = 0; c < kChunks; ++c) {
    query[c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask(c), q + c * 16), _mm512_set1_ps(scale));
  }
  // Scores 16 keys at a time: 16 vectors of partial products, then one transposing reduction
  // instead of a horizontal sum per key. A cursor walks the block table.
  int64_t block = 0, slot = 0;
  const float* block_keys = k_cache + layout.Offset(blocks[0], kv_head, 0);
  for (int64_t j = 0; j < length; j += 16) {
    const int keys = static_cast<int>(std::min<int64_t>(16, length - j));
    __m512 dot[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
      dot[t] = _mm512_setzero_ps();
      if (t >= keys) continue;
      const float* key = block_keys + slot * d;
#pragma GCC unroll 8
      for (int c = 0; c < kChunks; ++c) {
        dot[t] = _mm512_fmadd_ps(query[c], _mm512_maskz_loadu_ps(mask(c), key + c * 16), dot[t]);
      }
      if (++slot == bs && j + t + 1 < length) {
        slot = 0;
        block_keys = k_cache + layout.Offset(blocks[++block], kv_head, 0);
      }
    }
    _mm512_mask_storeu_ps(scores + j, FirstLanes(keys), SumEach(dot));
  }
  __m512 max = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < length; j += 16) {
    const __mmask16 lanes = FirstLanes(length - j);
    max = _mm512_mask_max_ps(max, lanes, max, _mm512_maskz_loadu_ps(lanes, scores + j));
  }
  const __m512 max_score = _mm512_set1_ps(_mm512_reduce_max_ps(max));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < length; j += 16) {
    const __mmask16 lanes = FirstLanes(length - j);
    const __m512 e =
        ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, scores + j), max_score));
    _mm512_mask_storeu_ps(scores + j, lanes, e);
    sum = _mm512_mask_add_ps(sum, lanes, sum, e);
  }
  const __m512 inv_sum = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  __m512 acc[kChunks];
#pragma GCC unroll 8
  for (int c = 0; c < kChunks; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t start = 0; start < length; start += bs) {
    const float* values = v_cache + layout.Offset(blocks[start / bs], kv_head, 0);
    const int64_t in_block = std::min(bs, length - start);
    for (int64_t s = 0; s < in_block; ++s) {
      const __m512 weight = _mm512_set1_ps(scores[start + s]);
#pragma GCC unroll 8
      for (int c = 0; c < kChunks; ++c) {
        acc[c] = _mm512_fmadd_ps(weight, _mm512_maskz_loadu_ps(mask(c), values + s * d + c * 16),
                                 acc[c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < kChunks; ++c) {
    _mm512_mask_storeu_ps(out + c * 16, mask(c), _mm512_mul_ps(acc[c], inv_sum));
  }
}

AttendFn Avx512For(int64_t head_dim) {
  static constexpr AttendFn kByChunks[kMaxAvx512Chunks] = {
      AttendAvx512<1>, AttendAvx512<2>, AttendAvx512<3>, AttendAvx512<4>,
      AttendAvx512<5>, AttendAvx512<6>, AttendAvx512<7>, AttendAvx512<8>};
  return kByChunks[(head_dim + 15) / 16 - 1];
}
#endif

// The variant for `isa` at this head_dim, or null where it does not run.
AttendFn AttendFor(absl::string_view isa, int64_t head_dim) {
#if defined(__x86_64__)
  if (isa == "avx512") {
    return HasAvx512() && head_dim <= 16 * kMaxAvx512Chunks ? Avx512For(head_dim) : nullptr;
  }
  if (isa == "avx2") return HasAvx2FmaF16c() ? Avx2For(head_dim) : nullptr;
#endif
  return isa == "baseline" ? AttendBaseline : nullptr;
}

// The first of AttentionIsas() that runs this head_dim.
AttendFn BestAttend(int64_t head_dim) {
#if defined(__x86_64__)
  static const bool avx512 = HasAvx512(), avx2 = HasAvx2FmaF16c();
  if (avx512 && head_dim <= 16 * kMaxAvx512Chunks) return Avx512For(head_dim);
  return avx2 ? Avx2For(head_dim) : AttendBaseline;
#else
  return AttendBaseline;
#endif
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

std::vector<std::string> AttentionIsas() {
  std::vector<std::string> isas = VectorIsas();
  isas.push_back("baseline");
  return isas;
}

void AttendOneHead(const PagedKvLayout& layout, const int32_t* blocks, int64_t position,
                   int64_t kv_head, const float* q, float scale, const float* k_cache,
                   const float* v_cache, float* scores, float* out) {
  BestAttend(layout.head_dim)(layout, blocks, position, kv_head, q, scale, k_cache, v_cache, scores,
                              out);
}

bool AttendOneHeadWithIsa(absl::string_view isa, const PagedKvLayout& layout, const int32_t* blocks,
                          int64_t position, int64_t kv_head, const float* q, float scale,
                          const float* k_cache, const float* v_cache, float* scores, float* out) {
  const AttendFn attend = AttendFor(isa, layout.head_dim);
  if (attend == nullptr) return false;
  attend(layout, blocks, position, kv_head, q, scale, k_cache, v_cache, scores, out);
  return true;
}

}  // namespace llmserve::worker::cpu
