// What the CPU backend's vectorized kernel files include: the x86 intrinsics and the target
// attributes each instruction-set variant is compiled with. Variants are chosen at run time
// (cpu_features.h), so the build never assumes the CPU it runs on; not with target_clones, whose
// ifunc resolvers run before sanitizer runtimes start.
//
// It also silences -Wuninitialized for the rest of the including file: GCC 12's own AVX-512
// intrinsics (_mm512_cvtph_ps, _mm512_reduce_add_ps, ...) pass _mm512_undefined_* placeholders
// that the warning then reports. Only kernel .cc files include it.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_SIMD_H_
#define LLMSERVE_WORKER_ENGINE_CPU_SIMD_H_

#if defined(__x86_64__)
#include <immintrin.h>

#define LLMSERVE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LLMSERVE_TARGET_AVX512BF16 \
  __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define LLMSERVE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#endif  // LLMSERVE_WORKER_ENGINE_CPU_SIMD_H_
