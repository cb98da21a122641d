// The arithmetic the quantized kernels share, written once for both nvcc (device) and the host
// compiler, so that the CPU tests (tests/unit/engine/cuda_weight_layout_test.cc) run the very code
// that decodes a weight word on the GPU against the canonical Int4Matrix::Dequantized.
//
// No CUDA include: plain C++ outside nvcc.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_MATH_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_MATH_H_

#include <cstdint>

#if defined(__CUDACC__)
#define LLMSERVE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LLMSERVE_HOST_DEVICE inline
#endif

namespace llmserve::worker::cuda {

// The 8 weights of one int4 word (column + i at bits 4i; `column`, the word's first column, a
// multiple of 8) as (q - zero) * scale in f32, exactly as Int4Matrix::Dequantized: the difference
// of two small integers is exact, then one rounding. `scale_zero` is the row's [groups, 2]
// (scale, zero) pairs. (The loops have constant trip counts: nvcc unrolls them without a pragma,
// which the host compiler would warn about.)
LLMSERVE_HOST_DEVICE void DequantizeInt4Word(uint32_t word, int32_t column, int32_t group_size,
                                             const float* scale_zero, float* w) {
  if (group_size % 8 == 0) {
    // The whole word lies in one group: one pair per word.
    const int32_t g = column / group_size;
    const float scale = scale_zero[2 * g], zero = scale_zero[2 * g + 1];
    for (int i = 0; i < 8; ++i) {
      w[i] = (static_cast<float>((word >> (4 * i)) & 0xFu) - zero) * scale;
    }
  } else {
    for (int i = 0; i < 8; ++i) {
      const int32_t g = (column + i) / group_size;
      w[i] = (static_cast<float>((word >> (4 * i)) & 0xFu) - scale_zero[2 * g + 1]) *
             scale_zero[2 * g];
    }
  }
}

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_MATH_H_
