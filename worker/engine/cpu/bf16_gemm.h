// out[i, r] = x[i, :] · w[r, :] with both operands in bf16 and f32 accumulation, on the CPU's
// bf16 dot-product instruction (AVX512-BF16's vdpbf16ps: 32 multiply-adds per instruction, twice
// the f32 FMA rate, and the weights need no widening). This is what the CPU backend runs for
// bf16 weights: batched decode and prefill are compute-bound, and here 2.4x faster than OpenBLAS
// sgemm on widened weights (m = 32, one core).
//
// Its numerics define the backend's bf16 mode on every CPU: the activations entering a
// projection are rounded to bf16 (round to nearest even, RoundToBf16), products are exact, sums
// are f32. CPUs without AVX512-BF16 round the activations the same way and multiply in f32, which
// gives the same products; only the order of the f32 sums differs.
//
// Thread-safe: pure functions on caller-owned memory.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_BF16_GEMM_H_
#define LLMSERVE_WORKER_ENGINE_CPU_BF16_GEMM_H_

#include <cstdint>

namespace llmserve::worker::cpu {

// Whether this CPU has AVX512-BF16 (with AVX-512 F, BW and VL).
bool Bf16GemmAvailable();

// out[i] = bf16(x[i]), round to nearest even (NaN stays NaN), as FloatToBFloat16 does.
void RoundToBf16(const float* x, int64_t count, uint16_t* out);

// x is [m, k] bf16 row-major; w is `rows` rows of k bf16; out[i * ldc + r] receives row i times
// weight row r. Any m >= 1 and k >= 1. Only call when Bf16GemmAvailable().
void Bf16Gemm(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t rows, float* out,
              int64_t ldc);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_BF16_GEMM_H_
