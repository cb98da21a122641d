// The arithmetic the quantized kernels share, written once for both nvcc (device) and the host
// compiler, so that the CPU tests (tests/unit/worker/engine/cuda_weight_layout_test.cc) run the
// very code that decodes a weight word on the GPU against the canonical Int4Matrix::Dequantized.
//
// No CUDA include: plain C++ outside nvcc.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_MATH_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_MATH_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LLMSERVE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LLMSERVE_HOST_DEVICE inline
#endif

namespace llmserve::worker::cuda {

// The 8 weights of one int4 word (column + i at bits 4i; `column`, the word's first column, a
// multiple of 8) as q * scale - offset with one rounding (fmaf), exactly as
// Int4Matrix::Dequantized. `scale_offset` is the row's [groups, 2] (scale, offset) pairs. (The
// loops have constant trip counts: nvcc unrolls them without a pragma, which the host compiler
// would warn about.)
LLMSERVE_HOST_DEVICE void DequantizeInt4Word(uint32_t word, int32_t column, int32_t group_size,
                                             const float* scale_offset, float* w) {
  if (group_size % 8 == 0) {
    // The whole word lies in one group: one pair per word.
    const int32_t g = column / group_size;
    const float scale = scale_offset[2 * g], offset = scale_offset[2 * g + 1];
    for (int i = 0; i < 8; ++i) {
      w[i] = fmaf(static_cast<float>((word >> (4 * i)) & 0xFu), scale, -offset);
    }
  } else {
    for (int i = 0; i < 8; ++i) {
      const int32_t g = (column + i) / group_size;
      w[i] = fmaf(static_cast<float>((word >> (4 * i)) & 0xFu), scale_offset[2 * g],
                  -scale_offset[2 * g + 1]);
    }
  }
}

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_MATH_H_
