#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {
namespace {

constexpr int kNormThreads = 256;

// One block per output row. Each thread only re-reads the residual elements it wrote itself, so
// the add and the norm's passes need no synchronisation besides the reductions.
template <typename T>
__global__ void AddNormKernel(AddNormParams p) {
  __shared__ float scratch[32];
  const int32_t r = blockIdx.x;
  const int32_t source_row = p.rows == nullptr ? r : p.rows[r];
  float* x = p.residual + int64_t{source_row} * p.hidden;
  const int32_t n = p.hidden;
  float sum = 0, sum_sq = 0;
  if (p.delta != nullptr) {
    const float* delta = p.delta + int64_t{r} * n;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
      float v = x[i] + delta[i];
      if (p.delta_bias != nullptr) v += p.delta_bias[i];
      x[i] = v;
      sum += v;
      sum_sq += v * v;
    }
  } else {
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = x[i];
      sum += v;
      sum_sq += v * v;
    }
  }
  if (p.out == nullptr) return;
  float mean = 0, scale;
  if (p.rms_norm) {
    scale = rsqrtf(BlockSum(sum_sq, scratch) / n + p.eps);
  } else {
    // Two passes (mean, then squared deviations) as the CPU backend: no cancellation.
    mean = BlockSum(sum, scratch) / n;
    float var = 0;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) var += (x[i] - mean) * (x[i] - mean);
    scale = rsqrtf(BlockSum(var, scratch) / n + p.eps);
  }
  T* out = static_cast<T*>(p.out) + int64_t{r} * n;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = (x[i] - mean) * scale * p.weight[i];
    if (p.bias != nullptr) v += p.bias[i];
    out[i] = FromFloat<T>(v);
  }
}

}  // namespace

cudaError_t LaunchAddNorm(DeviceDType dtype, const AddNormParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return cudaSuccess;
  if (dtype == DeviceDType::kBF16) {
    AddNormKernel<__nv_bfloat16><<<p.num_rows, kNormThreads, 0, stream>>>(p);
  } else {
    AddNormKernel<__half><<<p.num_rows, kNormThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda
