#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/lora_kernels.h"

namespace llmserve::worker::cuda {
namespace {

constexpr int kShrinkThreads = 256;  // 8 warps: 8 rank rows at a time
constexpr int kExpandThreads = 256;  // columns per block

template <typename T>
__global__ void LoraShrinkKernel(LoraShrinkParams p) {
  const LoraPair pair = p.pairs[blockIdx.x];
  const T* x = static_cast<const T*>(p.x) + int64_t{pair.token} * p.x_width;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int32_t r = warp; r < pair.rank; r += kShrinkThreads / 32) {
    const float* a = pair.a + int64_t{r} * pair.in;
    float sum = 0.0f;
    for (int32_t i = lane; i < pair.in; i += 32) sum += a[i] * ToFloat(x[i]);
    sum = WarpSum(sum);
    if (lane == 0) p.s[pair.s_offset + r] = sum;
  }
}

__global__ void LoraExpandKernel(LoraExpandParams p) {
  const LoraPair pair = p.pairs[blockIdx.x];
  const int32_t c = blockIdx.y * kExpandThreads + threadIdx.x;
  if (c >= pair.out) return;
  const float* s = p.s + pair.s_offset;
  float sum = 0.0f;
  for (int32_t r = 0; r < pair.rank; ++r) sum += s[r] * pair.b_t[int64_t{r} * pair.out + c];
  p.y[int64_t{pair.token} * p.y_width + pair.row_offset + c] += sum;
}

}  // namespace

cudaError_t LaunchLoraShrink(DeviceDType dtype, const LoraShrinkParams& p, cudaStream_t stream) {
  if (p.num_pairs == 0) return cudaSuccess;
  if (dtype == DeviceDType::kBF16) {
    LoraShrinkKernel<__nv_bfloat16><<<p.num_pairs, kShrinkThreads, 0, stream>>>(p);
  } else {
    LoraShrinkKernel<__half><<<p.num_pairs, kShrinkThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t LaunchLoraExpand(const LoraExpandParams& p, cudaStream_t stream) {
  if (p.num_pairs == 0 || p.max_out == 0) return cudaSuccess;
  // Pairs along x (up to 2^31 - 1: a long prefill has many), column chunks along y (a few).
  const dim3 grid(p.num_pairs, (p.max_out + kExpandThreads - 1) / kExpandThreads);
  LoraExpandKernel<<<grid, kExpandThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda
