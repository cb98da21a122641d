#include "worker/engine/cuda/attention.h"

namespace llmserve::worker::cuda {
namespace {

template <DeviceDType kDType>
cudaError_t DecodeForHeadDim(int32_t head_dim, const DecodeAttentionParams& p,
                             cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return DecodeAttention<kDType, 64>(p, stream);
    case 128:
      return DecodeAttention<kDType, 128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <DeviceDType kDType>
cudaError_t PrefillForHeadDim(int32_t head_dim, const PrefillAttentionParams& p,
                              cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return PrefillAttention<kDType, 64>(p, stream);
    case 128:
      return PrefillAttention<kDType, 128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

bool IsSupportedHeadDim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchDecodeAttention(DeviceDType dtype, int32_t head_dim,
                                  const DecodeAttentionParams& p, cudaStream_t stream) {
  return dtype == DeviceDType::kBF16 ? DecodeForHeadDim<DeviceDType::kBF16>(head_dim, p, stream)
                                     : DecodeForHeadDim<DeviceDType::kF16>(head_dim, p, stream);
}

cudaError_t LaunchPrefillAttention(DeviceDType dtype, int32_t head_dim,
                                   const PrefillAttentionParams& p, cudaStream_t stream) {
  return dtype == DeviceDType::kBF16 ? PrefillForHeadDim<DeviceDType::kBF16>(head_dim, p, stream)
                                     : PrefillForHeadDim<DeviceDType::kF16>(head_dim, p, stream);
}

}  // namespace llmserve::worker::cuda
