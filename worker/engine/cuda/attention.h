// Paged attention kernels of the CUDA backend, for a packed batch whose new K/V are already in
// the cache (LaunchRopeKv ran first): every query token attends causally to positions
// [0, its position] of its sequence through the sequence's block table.
//
//  - Decode attention: one query token per sequence (a decode step). A block per (token, KV head,
//    split) computes all the query heads that share the KV head (GQA: K/V are read once for the
//    group). Long contexts are split into up to kMaxDecodeSplits ranges (flash-decoding): each
//    split writes a partial output with its running max and sum, and a reduce kernel combines
//    them. Online softmax over chunks of keys within a split.
//  - Prefill attention: query tiles of up to kPrefillTileQ consecutive tokens of one sequence's
//    chunk; a block per (tile, query head) streams key tiles through shared memory with an online
//    softmax (flash-attention style, f32 on CUDA cores), causal against each query's position, so
//    prefix blocks cached by earlier steps or other requests are read like any other.
//
// Cache layout (as the CPU backend's): per layer, K and V each [num_blocks, num_kv_heads,
// block_size, head_dim] in DeviceDType.
//
// One dispatch site (attention_dispatch.cc) turns the runtime dtype and head dim into the
// template constants of the instantiations, one .cu file per (dtype, head dim).
//
// Thread-safe: launchers keep no state besides a once-set kernel attribute.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_ATTENTION_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {

inline constexpr int kMaxDecodeSplits = 16;
inline constexpr int kPrefillTileQ = 64;
// Query heads per KV head the kernels accept (shared memory grows with it).
inline constexpr int kMaxGqaGroup = 64;

// Fields shared by both kernels.
struct PagedAttentionCommon {
  // Query of batch token t, head h: q[t * q_stride + h * head_dim .. + head_dim), f32 (the
  // rotated Q inside the QKV buffer).
  const float* q;
  int64_t q_stride;
  // Output of batch token t, head h: out[t * out_stride + h * head_dim ..], DeviceDType.
  void* out;
  int64_t out_stride;
  const int32_t* positions;          // [batch tokens]
  const int32_t* token_seq;          // [batch tokens]
  const int32_t* block_table_start;  // [num_seqs + 1]
  const int32_t* block_ids;
  const void* k_cache;  // this layer's [num_blocks, num_kv_heads, block_size, head_dim]
  const void* v_cache;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t block_size;
  float scale;  // 1 / sqrt(head_dim)
};

struct DecodeAttentionParams {
  PagedAttentionCommon c;
  const int32_t* tokens;  // [num_tokens] batch token indices of the decode tokens
  int32_t num_tokens;
  int32_t num_splits;  // 1..kMaxDecodeSplits; with 1 the kernel writes `out` directly
  // With num_splits > 1: [num_tokens, num_heads, num_splits, head_dim] partial outputs and
  // [num_tokens, num_heads, num_splits, 2] (max, sum) pairs.
  float* partial_out;
  float* partial_max_sum;
};

struct PrefillAttentionParams {
  PagedAttentionCommon c;
  // [num_tiles, 3]: (sequence, first batch token, token count <= kPrefillTileQ) of each tile; a
  // tile's tokens are consecutive new tokens of one sequence.
  const int32_t* tiles;
  int32_t num_tiles;
};

// The instantiations (one .cu file per dtype and head dim).
template <DeviceDType kDType, int kHeadDim>
cudaError_t DecodeAttention(const DecodeAttentionParams& p, cudaStream_t stream);
template <DeviceDType kDType, int kHeadDim>
cudaError_t PrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream);

// Whether the kernels are instantiated for `head_dim`.
bool IsSupportedHeadDim(int64_t head_dim);

// The dispatch site: cudaErrorInvalidValue for a head dim without instantiation.
cudaError_t LaunchDecodeAttention(DeviceDType dtype, int32_t head_dim,
                                  const DecodeAttentionParams& p, cudaStream_t stream);
cudaError_t LaunchPrefillAttention(DeviceDType dtype, int32_t head_dim,
                                   const PrefillAttentionParams& p, cudaStream_t stream);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_ATTENTION_H_
