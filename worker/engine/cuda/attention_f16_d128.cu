// Attention kernels for f16 caches and head dim 128 (one instantiation per file keeps nvcc
// runs parallel and small).

#include "worker/engine/cuda/decode_attention.cuh"
#include "worker/engine/cuda/prefill_attention.cuh"

namespace llmserve::worker::cuda {

template cudaError_t DecodeAttention<DeviceDType::kF16, 128>(const DecodeAttentionParams&,
                                                             cudaStream_t);
template cudaError_t PrefillAttention<DeviceDType::kF16, 128>(const PrefillAttentionParams&,
                                                              cudaStream_t);

}  // namespace llmserve::worker::cuda
