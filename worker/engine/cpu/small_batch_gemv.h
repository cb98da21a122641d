// out[i, r] = x[i, :] · w[r, :] for a few activation rows x (f32) against bf16 weight rows,
// widening each weight vector in registers: decode of bf16 weights on CPUs without the AVX512-BF16
// dot product (bf16_gemm.h). Decode at small batch is bound by the bytes of weights read: this
// reads each weight byte once, front to back, with no f32 copy in between, and reaches the
// machine's read bandwidth where BLAS (or widening into a panel first) does not. (f32 and f16
// weights are packed and take packed_gemm.h instead.)
//
// Vectorized for AVX-512 (F + BW + VL) and for AVX2 + FMA + F16C, picked at run time; where neither
// exists, Available() is false and callers use BLAS.
//
// Thread-safe: a pure function on caller-owned memory.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_SMALL_BATCH_GEMV_H_
#define LLMSERVE_WORKER_ENGINE_CPU_SMALL_BATCH_GEMV_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace llmserve::worker::cpu {

// The most activation rows one call takes; larger batches are compute-bound and go to BLAS.
inline constexpr int64_t kSmallBatchGemvMaxRows = 4;

// Whether this CPU has a vectorized SmallBatchGemv.
bool SmallBatchGemvAvailable();

// x is [m, k] row-major f32 with 1 <= m <= kSmallBatchGemvMaxRows (64-byte aligned rows read
// fastest); w is `rows` rows of k bf16 elements; out[i * ldc + r] receives x row i times weight
// row r. Only call when SmallBatchGemvAvailable().
void SmallBatchGemv(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t rows,
                    float* out, int64_t ldc);

// The instruction sets this CPU runs the kernel with, best first: "avx512", "avx2". SmallBatchGemv
// uses the first.
std::vector<std::string> SmallBatchGemvIsas();

// SmallBatchGemv with one of SmallBatchGemvIsas(), so that tests check every variant the CPU runs.
void SmallBatchGemvWithIsa(absl::string_view isa, const float* x, int64_t m, int64_t k,
                           const uint16_t* w, int64_t rows, float* out, int64_t ldc);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_SMALL_BATCH_GEMV_H_
