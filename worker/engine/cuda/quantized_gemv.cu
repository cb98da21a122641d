// The small-batch (decode) GEMV of quantized projections: one warp per output row, its 32 lanes
// reading consecutive 4-byte words of the row (one 128-byte segment per warp load), so each
// weight byte is read once per call whatever the batch; dequantized in registers, multiplied with
// the batch's activations (read through L1/L2: every warp of the grid reads the same [m, k]) and
// accumulated in f32 per batch row, then summed across the warp.

#include <cstdint>

#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/quantized_kernels.h"
#include "worker/engine/cuda/quantized_math.h"

namespace llmserve::worker::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// Sums each batch row's accumulator across the warp; lane 0 writes y[b, row] * scale.
__device__ __forceinline__ void WriteRow(const float* acc, int32_t m, int32_t n, int32_t row,
                                         float scale, float* y) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int b = 0; b < kMaxGemvBatch; ++b) {
    if (b < m) {
      const float sum = WarpSum(acc[b]);
      if (lane == 0) y[int64_t{b} * n + row] = sum * scale;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) Int4GemvKernel(QuantizedGemvParams p) {
  const int32_t row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= p.w.n) return;  // the whole warp: row is the same for its lanes
  const int lane = threadIdx.x % 32;
  const int32_t k = p.w.k, words = k / 8;
  const uint32_t* w_row = static_cast<const uint32_t*>(p.w.data) + int64_t{row} * words;
  const float* scale_offset = p.w.scales + int64_t{row} * (k / p.w.group_size) * 2;
  const T* x = static_cast<const T*>(p.x);
  float acc[kMaxGemvBatch] = {};
  for (int32_t j = lane; j < words; j += 32) {
    float w[8];
    DequantizeInt4Word(w_row[j], 8 * j, p.w.group_size, scale_offset, w);
#pragma unroll
    for (int b = 0; b < kMaxGemvBatch; ++b) {
      if (b < p.m) {
        // 8 activations in one 16-byte load: k is a multiple of 8 and rows start 16-byte aligned.
        const uint4 packed = *reinterpret_cast<const uint4*>(x + int64_t{b} * k + 8 * j);
        const T* xs = reinterpret_cast<const T*>(&packed);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = fmaf(ToFloat(xs[i]), w[i], sum);
        acc[b] += sum;
      }
    }
  }
  WriteRow(acc, p.m, p.w.n, row, 1.0f, p.y);
}

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) Int8GemvKernel(QuantizedGemvParams p) {
  const int32_t row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= p.w.n) return;
  const int lane = threadIdx.x % 32;
  const int32_t k = p.w.k, words = p.w.row_stride / 4;
  const char4* w_row = reinterpret_cast<const char4*>(static_cast<const int8_t*>(p.w.data) +
                                                      int64_t{row} * p.w.row_stride);
  const T* x = static_cast<const T*>(p.x);
  float acc[kMaxGemvBatch] = {};
  for (int32_t j = lane; j < words; j += 32) {
    const char4 q = w_row[j];
    const float w[4] = {static_cast<float>(q.x), static_cast<float>(q.y), static_cast<float>(q.z),
                        static_cast<float>(q.w)};
    const int32_t c = 4 * j;
    // The row's padding holds zero weights, but the activations end at k: never read past it
    // (x's rows need not be 4-element aligned, so the loads are scalar).
    const int32_t valid = k - c < 4 ? k - c : 4;
#pragma unroll
    for (int b = 0; b < kMaxGemvBatch; ++b) {
      if (b < p.m) {
        const T* xs = x + int64_t{b} * k + c;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (i < valid) sum = fmaf(ToFloat(xs[i]), w[i], sum);
        }
        acc[b] += sum;
      }
    }
  }
  // The row's scale applies once per output: sum_c x * q * s = s * sum_c x * q.
  WriteRow(acc, p.m, p.w.n, row, p.w.scales[row], p.y);
}

template <typename T>
cudaError_t Launch(const QuantizedGemvParams& p, cudaStream_t stream) {
  const int blocks = (p.w.n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (p.w.format == WeightFormat::kInt4) {
    Int4GemvKernel<T><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
  } else {
    Int8GemvKernel<T><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchQuantizedGemv(DeviceDType dtype, const QuantizedGemvParams& p,
                                cudaStream_t stream) {
  if (p.m < 1 || p.m > kMaxGemvBatch || p.w.format == WeightFormat::kDense16 ||
      (p.w.format == WeightFormat::kInt4 && reinterpret_cast<uintptr_t>(p.x) % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (p.w.n == 0) return cudaSuccess;
  return dtype == DeviceDType::kBF16 ? Launch<__nv_bfloat16>(p, stream) : Launch<__half>(p, stream);
}

}  // namespace llmserve::worker::cuda
