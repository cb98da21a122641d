#include <cmath>

#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {
namespace {

// The same formulas as the CPU backend's ActivateOne (worker/engine/cpu/kernels.cc).
__device__ __forceinline__ float Activate(DeviceActivation activation, float v) {
  switch (activation) {
    case DeviceActivation::kSilu:
      return v / (1.0f + expf(-v));
    case DeviceActivation::kGeluTanh: {
      constexpr float kSqrt2OverPi = 0.7978845608028654f;
      return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
    }
    case DeviceActivation::kGeluErf:
      return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
  return v;
}

// A grid-stride loop over the [num_tokens, intermediate] outputs.
template <typename T>
__global__ void ActivationKernel(ActivationParams p) {
  const int64_t total = int64_t{p.num_tokens} * p.intermediate;
  const int32_t n = p.intermediate;
  const int32_t width = p.gated ? 2 * n : n;
  T* out = static_cast<T*>(p.out);
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < total;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = index / n;
    const int32_t j = static_cast<int32_t>(index % n);
    const float* row = p.up + t * width;
    float gate = row[j];
    if (p.up_bias != nullptr) gate += p.up_bias[j];
    float v = Activate(p.activation, gate);
    if (p.gated) {
      float up = row[n + j];
      if (p.up_bias != nullptr) up += p.up_bias[n + j];
      v *= up;
    }
    out[index] = FromFloat<T>(v);
  }
}

}  // namespace

cudaError_t LaunchActivation(DeviceDType dtype, const ActivationParams& p, cudaStream_t stream) {
  const int64_t total = int64_t{p.num_tokens} * p.intermediate;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  if (dtype == DeviceDType::kBF16) {
    ActivationKernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    ActivationKernel<__half><<<blocks, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda
