// Attention kernels for bf16 caches and head dim 64 (one instantiation per file keeps nvcc
// runs parallel and small).

#include "worker/engine/cuda/decode_attention.cuh"
#include "worker/engine/cuda/prefill_attention.cuh"

namespace llmserve::worker::cuda {

template cudaError_t DecodeAttention<DeviceDType::kBF16, 64>(const DecodeAttentionParams&,
                                                             cudaStream_t);
template cudaError_t PrefillAttention<DeviceDType::kBF16, 64>(const PrefillAttentionParams&,
                                                              cudaStream_t);

}  // namespace llmserve::worker::cuda
