// Dequantization of a quantized projection's row range into a 16-bit [rows, k] scratch, for the
// prefill path (quantized_gemm.h), which then runs cuBLAS on it: the weights are computed in f32
// exactly as the GEMV kernel and the host reference compute them, then rounded to the dtype.

#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/quantized_kernels.h"
#include "worker/engine/cuda/quantized_math.h"

namespace llmserve::worker::cuda {
namespace {

// One int4 word (8 columns) per thread, written as one 16-byte store (k is a multiple of 8).
template <typename T>
__global__ void DequantizeInt4Kernel(DequantizeParams p) {
  const int32_t k = p.w.k, words = k / 8, groups = k / p.w.group_size;
  const int64_t total = int64_t{p.num_rows} * words;
  const uint32_t* data = static_cast<const uint32_t*>(p.w.data);
  T* out = static_cast<T*>(p.out);
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < total;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = index / words;
    const int32_t j = static_cast<int32_t>(index % words);
    const int64_t row = p.first_row + r;
    const uint32_t word = data[row * words + j];
    float w[8];
    DequantizeInt4Word(word, 8 * j, p.w.group_size, p.w.scales + row * groups * 2, w);
    union {
      uint4 packed;
      T values[8];
    } v;
#pragma unroll
    for (int i = 0; i < 8; ++i) v.values[i] = FromFloat<T>(w[i]);
    *reinterpret_cast<uint4*>(out + r * k + 8 * j) = v.packed;
  }
}

// One int8 weight per thread.
template <typename T>
__global__ void DequantizeInt8Kernel(DequantizeParams p) {
  const int32_t k = p.w.k;
  const int64_t total = int64_t{p.num_rows} * k;
  const int8_t* data = static_cast<const int8_t*>(p.w.data);
  T* out = static_cast<T*>(p.out);
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < total;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = index / k;
    const int32_t c = static_cast<int32_t>(index % k);
    const int64_t row = p.first_row + r;
    out[index] = FromFloat<T>(static_cast<float>(data[row * p.w.row_stride + c]) * p.w.scales[row]);
  }
}

template <typename T>
cudaError_t Launch(const DequantizeParams& p, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t items =
      int64_t{p.num_rows} * (p.w.format == WeightFormat::kInt4 ? p.w.k / 8 : p.w.k);
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  if (p.w.format == WeightFormat::kInt4) {
    DequantizeInt4Kernel<T><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    DequantizeInt8Kernel<T><<<blocks, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchDequantize(DeviceDType dtype, const DequantizeParams& p, cudaStream_t stream) {
  if (p.w.format == WeightFormat::kDense16 || p.first_row < 0 || p.num_rows < 0 ||
      int64_t{p.first_row} + p.num_rows > p.w.n) {
    return cudaErrorInvalidValue;
  }
  if (p.num_rows == 0 || p.w.k == 0) return cudaSuccess;
  return dtype == DeviceDType::kBF16 ? Launch<__nv_bfloat16>(p, stream) : Launch<__half>(p, stream);
}

}  // namespace llmserve::worker::cuda
