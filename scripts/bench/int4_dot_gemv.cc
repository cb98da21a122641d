// Prototype for the next step of issue 18 (not part of the build): a 4-bit GEMV whose activations
// are quantized to int8 per block of 32 and multiplied with integer dot products (AVX2
// vpmaddubsw + vpmaddwd, as llama.cpp's Q4 x Q8 does), against a GEMV that converts every nibble
// to f32 and uses FMAs (what the packed int4 kernel does). Both read the same row-major 4-bit
// weights (each block of 32 inputs: 16 bytes, low nibbles inputs 0..15, high 16..31; a scale and
// a zero point per group of 64), cycling 8 copies so that they come from memory. Prints one JSON
// line: times, GB/s of weights, the speedup and the largest difference between the two outputs
// relative to the largest output (the cost of quantizing the activations).
//
//   g++ -O2 -std=c++17 scripts/bench/int4_dot_gemv.cc -o /tmp/int4_dot_gemv && /tmp/int4_dot_gemv
#include <immintrin.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

constexpr int N = 5632, K = 2048, B = 32;  // block of 32 inputs, group 64 = 2 blocks

__attribute__((target("avx2,fma"))) static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// w: per row K/2 bytes; block j (32 k) = 16 bytes: lo nibble = k 0..15, hi = k 16..31.
// scale per (row, block pair=group 64) and zero. xq: K int8, xs: scale per block, xsum: sum of xq
// per block.
__attribute__((target("avx2,fma"))) void DotInt(const uint8_t* w, const float* ws, const float* wz,
                                                const int8_t* xq, const float* xs, const int* xsum,
                                                float* out) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < N; ++r) {
    const uint8_t* row = w + (size_t)r * K / 2;
    __m256 acc = _mm256_setzero_ps();
    float zero_term = 0;
    for (int b = 0; b < K / B; b += 2) {  // a group of 64
      // two blocks with their own activation scale
      __m256 accb = _mm256_setzero_ps();
      for (int h = 0; h < 2; ++h) {
        const __m128i raw = _mm_loadu_si128((const __m128i*)(row + (b + h) * 16));
        const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), mask);
        const __m256i x = _mm256_loadu_si256((const __m256i*)(xq + (b + h) * B));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), ones);
        accb = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(xs[b + h]), accb);
      }
      const int g = b / 2;
      const float scale = ws[(size_t)r * (K / 64) + g];
      acc = _mm256_fmadd_ps(accb, _mm256_set1_ps(scale), acc);
      zero_term +=
          wz[(size_t)r * (K / 64) + g] * scale * (xs[b] * xsum[b] + xs[b + 1] * xsum[b + 1]);
    }
    out[r] = hsum(acc) - zero_term;
  }
}

// Float path: same layout, nibbles converted to f32 and FMA'd with f32 activations.
__attribute__((target("avx2,fma"))) void DotFloat(const uint8_t* w, const float* ws,
                                                  const float* wz, const float* x, float* out) {
  for (int r = 0; r < N; ++r) {
    const uint8_t* row = w + (size_t)r * K / 2;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < K / B; b += 2) {
      __m256 a = _mm256_setzero_ps();
      __m256 xsv = _mm256_setzero_ps();
      for (int h = 0; h < 2; ++h) {
        for (int j = 0; j < 2; ++j) {  // 8 bytes -> 16 weights (lo: k j*8.., hi: k 16+j*8..)
          const __m256i bytes =
              _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(row + (b + h) * 16 + j * 8)));
          const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(15)));
          const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
          const float* xb = x + (b + h) * B;
          const __m256 x0 = _mm256_loadu_ps(xb + j * 8), x1 = _mm256_loadu_ps(xb + 16 + j * 8);
          a = _mm256_fmadd_ps(lo, x0, a);
          a = _mm256_fmadd_ps(hi, x1, a);
          xsv = _mm256_add_ps(xsv, _mm256_add_ps(x0, x1));
        }
      }
      const int g = b / 2;
      const float scale = ws[(size_t)r * (K / 64) + g], zs = wz[(size_t)r * (K / 64) + g] * scale;
      acc = _mm256_fmadd_ps(a, _mm256_set1_ps(scale), acc);
      acc = _mm256_fnmadd_ps(xsv, _mm256_set1_ps(zs), acc);
    }
    out[r] = hsum(acc);
  }
}

int main() {
  std::mt19937 rng(1);
  std::vector<uint8_t> w((size_t)N * K / 2);
  for (auto& v : w) v = rng() & 0xFF;
  std::vector<float> ws((size_t)N * K / 64), wz(ws.size());
  for (auto& v : ws) v = 0.001f + (rng() % 100) * 1e-5f;
  for (auto& v : wz) v = rng() % 16;
  std::vector<float> x(K);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<int8_t> xq(K);
  std::vector<float> xs(K / B);
  std::vector<int> xsum(K / B);
  auto quant = [&] {
    for (int b = 0; b < K / B; ++b) {
      float m = 0;
      for (int i = 0; i < B; ++i) m = std::max(m, std::fabs(x[b * B + i]));
      xs[b] = m / 127;
      int s = 0;
      for (int i = 0; i < B; ++i) {
        xq[b * B + i] = (int8_t)std::lrint(x[b * B + i] / xs[b]);
        s += xq[b * B + i];
      }
      xsum[b] = s;
    }
  };
  std::vector<float> o1(N), o2(N);
  // The weights (5.8 MB) fit no cache level here but L3 partly: cycle 8 copies to come from memory.
  const int copies = 8;
  std::vector<std::vector<uint8_t>> ws8(copies, w);
  double best_i = 1e9, best_f = 1e9;
  for (int rep = 0; rep < 40; ++rep) {
    const auto& wc = ws8[rep % copies];
    auto t0 = std::chrono::steady_clock::now();
    quant();
    DotInt(wc.data(), ws.data(), wz.data(), xq.data(), xs.data(), xsum.data(), o1.data());
    auto t1 = std::chrono::steady_clock::now();
    DotFloat(ws8[(rep + 4) % copies].data(), ws.data(), wz.data(), x.data(), o2.data());
    auto t2 = std::chrono::steady_clock::now();
    best_i = std::min(best_i, std::chrono::duration<double, std::milli>(t1 - t0).count());
    best_f = std::min(best_f, std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  DotFloat(w.data(), ws.data(), wz.data(), x.data(), o2.data());
  quant();
  DotInt(w.data(), ws.data(), wz.data(), xq.data(), xs.data(), xsum.data(), o1.data());
  double err = 0, mag = 0;
  for (int r = 0; r < N; ++r) {
    err = std::max(err, (double)std::fabs(o1[r] - o2[r]));
    mag = std::max(mag, (double)std::fabs(o2[r]));
  }
  const double bytes = (double)N * K / 2;
  std::printf(
      "{\"shape\": [%d, %d], \"int_dot_ms\": %.3f, \"float_ms\": %.3f, \"int_gb_s\": %.2f, "
      "\"float_gb_s\": %.2f, \"speedup\": %.2f, \"max_err_rel_to_max\": %.2e}\n",
      N, K, best_i, best_f, bytes / best_i / 1e6, bytes / best_f / 1e6, best_f / best_i, err / mag);
}
