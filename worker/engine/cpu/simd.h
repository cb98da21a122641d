// What the CPU backend's vectorized kernel files include: the x86 intrinsics, the target
// attributes each instruction-set variant is compiled with, and the vector math they share.
// Variants are chosen at run time (cpu_features.h), so the build never assumes the CPU it runs on;
// not with target_clones, whose ifunc resolvers run before sanitizer runtimes start.
//
// It also silences -Wuninitialized for the rest of the including file: GCC 12's own AVX-512
// intrinsics (_mm512_cvtph_ps, _mm512_reduce_add_ps, ...) pass _mm512_undefined_* placeholders
// that the warning then reports. Only kernel .cc files include it.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_SIMD_H_
#define LLMSERVE_WORKER_ENGINE_CPU_SIMD_H_

#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and warns of the unknown name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__x86_64__)
#include <immintrin.h>

#define LLMSERVE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LLMSERVE_TARGET_AVX512BF16 \
  __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LLMSERVE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace llmserve::worker::cpu {

// How far ahead of its loads a weight-streaming kernel asks for cache lines. Decode reads every
// weight once per step, each thread its own contiguous panels front to back (panels lie one after
// the other, so prefetching past a panel's end fetches the next one). The hardware prefetcher alone
// kept too few lines in flight: on the 2-core AVX-512 VM of docs/engine.md, f16 batch-1 decode
// read 13-15 GB/s of the 20 measured; with 2 KiB ahead 18-19, with 4 KiB as much or more (512
// bytes: no gain).
inline constexpr int64_t kStreamPrefetchBytes = 4096;

// Prefetches into L1 the lines of [p + kStreamPrefetchBytes, + kBytes): a kernel calls it once
// per kBytes of weights it consumes, with p where those bytes start.
template <int64_t kBytes>
inline void PrefetchStream(const void* p) {
  const char* at = static_cast<const char*>(p) + kStreamPrefetchBytes;
#pragma GCC unroll 4
  for (int64_t line = 0; line < kBytes; line += 64) _mm_prefetch(at + line, _MM_HINT_T0);
}

// The first `lanes` of 16 lanes (none for lanes <= 0, all for lanes >= 16).
LLMSERVE_TARGET_AVX512 inline __mmask16 LaneMask(int lanes) {
  return lanes >= 16  ? static_cast<__mmask16>(0xffff)
         : lanes <= 0 ? static_cast<__mmask16>(0)
                      : static_cast<__mmask16>((1u << lanes) - 1);
}

// a's low 8 floats then b's (LowHalves), or their high 8 (HighHalves): what the int4 kernels use
// to take row-ordered scales into the order of a panel's nibbles (rows {0..7, 16..23} in the low
// nibbles, {8..15, 24..31} in the high ones) and their totals back into row order.
LLMSERVE_TARGET_AVX512 inline __m512 LowHalves(__m512 a, __m512 b) {
  return _mm512_shuffle_f32x4(a, b, 0x44);
}
LLMSERVE_TARGET_AVX512 inline __m512 HighHalves(__m512 a, __m512 b) {
  return _mm512_shuffle_f32x4(a, b, 0xEE);
}

// e^x for x <= 0, within 1.2 ulp on (-87, 0] (checked against double
// exp): x = n ln2 + r with |r| <= ln2 / 2, e^r from Cephes' expf polynomial, then scaled by 2^n
// (vscalefps, which goes smoothly to 0 below the normal range).
LLMSERVE_TARGET_AVX512 inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// ExpNonPositive for AVX2 (same polynomial): 2^n is built in the exponent bits, which hold normal
// numbers only, so below -87 (e^-87 is about 1.6e-38, near the smallest normal float) it returns
// 0 rather than a subnormal.
LLMSERVE_TARGET_AVX2 inline __m256 ExpNonPositiveAvx2(__m256 x) {
  const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(exponent)), in_range);
}

}  // namespace llmserve::worker::cpu
#endif

#endif  // LLMSERVE_WORKER_ENGINE_CPU_SIMD_H_
