#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {
namespace {

template <typename T>
__global__ void EmbedKernel(EmbedParams p) {
  const int32_t t = blockIdx.x;
  const T* row = static_cast<const T*>(p.embedding) + int64_t{p.token_ids[t]} * p.hidden;
  const float* position_row = p.position_embedding == nullptr
                                  ? nullptr
                                  : p.position_embedding + int64_t{p.positions[t]} * p.hidden;
  float* out = p.residual + int64_t{t} * p.hidden;
  for (int32_t i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float v = ToFloat(row[i]);
    if (position_row != nullptr) v += position_row[i];
    out[i] = v;
  }
}

}  // namespace

cudaError_t LaunchEmbed(DeviceDType dtype, const EmbedParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  if (dtype == DeviceDType::kBF16) {
    EmbedKernel<__nv_bfloat16><<<p.num_tokens, 256, 0, stream>>>(p);
  } else {
    EmbedKernel<__half><<<p.num_tokens, 256, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda
