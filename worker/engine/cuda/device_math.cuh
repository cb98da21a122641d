// Device helpers shared by the kernels: 16-bit <-> f32 conversions by DeviceDType and warp/block
// reductions. Included by .cu files only.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MATH_CUH_
#define LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {

template <DeviceDType kDType>
struct DeviceType;
template <>
struct DeviceType<DeviceDType::kBF16> {
  using T = __nv_bfloat16;
};
template <>
struct DeviceType<DeviceDType::kF16> {
  using T = __half;
};

__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the call synchronises the block.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < num_warps ? scratch[lane] : 0.0f;
  return WarpSum(total);
}

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_DEVICE_MATH_CUH_
