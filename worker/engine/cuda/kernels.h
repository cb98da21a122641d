// The elementwise and row-wise kernels of the CUDA backend: plain parameter structs of device
// pointers and sizes (shapes in the comments), and host launchers that enqueue one kernel on a
// stream and return the launch's cudaError_t (cudaSuccess, or the launch error; faults inside the
// kernel surface at the next synchronisation).
//
// This header is shared by the .cu files (compiled by nvcc) and the C++ backend, so it includes
// nothing but the CUDA runtime API. Attention kernels are in attention.h.
//
// Thread-safe: launchers keep no state.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_KERNELS_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace llmserve::worker::cuda {

// The 16-bit type of weights, GEMM inputs and the KV cache on the device.
enum class DeviceDType { kBF16, kF16 };

// The activation of the MLP (worker/model/model_config.h's Activation, as a plain int for nvcc).
enum class DeviceActivation { kGeluTanh, kGeluErf, kSilu };

struct EmbedParams {
  const void* embedding;            // [vocab, hidden] DeviceDType
  const float* position_embedding;  // [max_positions, hidden] f32; null without learned positions
  const int32_t* token_ids;         // [num_tokens]
  const int32_t* positions;         // [num_tokens]
  float* residual;                  // [num_tokens, hidden] out
  int32_t num_tokens;
  int32_t hidden;
};
// residual[t] = embedding[token_ids[t]] (+ position_embedding[positions[t]]).
cudaError_t LaunchEmbed(DeviceDType dtype, const EmbedParams& p, cudaStream_t stream);

struct AddNormParams {
  float* residual;          // [rows, hidden] the f32 residual stream
  const float* delta;       // [rows, hidden] f32 added to the residual first; null: no add
  const float* delta_bias;  // [hidden] f32 added with delta; null: none
  // [num_rows] the residual row each output row normalises; null: row r is residual row r.
  // Only without delta (a gather for the final norm of the rows that need logits).
  const int32_t* rows;
  const float* weight;  // [hidden] f32
  const float* bias;    // [hidden] f32, LayerNorm's; null: none
  void* out;            // [num_rows, hidden] DeviceDType; null: add only
  int32_t num_rows;
  int32_t hidden;
  float eps;
  bool rms_norm;  // RMSNorm, else LayerNorm
};
// residual[r] += delta[r] + delta_bias; out[r] = norm(residual[rows[r]]) * weight + bias.
// One block per row, f32 sums.
cudaError_t LaunchAddNorm(DeviceDType dtype, const AddNormParams& p, cudaStream_t stream);

struct RopeKvParams {
  // [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim] f32, the QKV GEMM's output. The bias
  // is added and the query heads are rotated in place; K and V go to the cache only.
  float* qkv;
  const float* qkv_bias;             // [(num_heads + 2 * num_kv_heads) * head_dim] f32; null: none
  const double* inv_freq;            // [head_dim / 2] rotary inverse frequencies; null: no rotary
  const int32_t* positions;          // [num_tokens]
  const int32_t* token_seq;          // [num_tokens] the sequence of each token
  const int32_t* block_table_start;  // [num_seqs + 1] CSR into block_ids
  const int32_t* block_ids;
  // This layer's caches, [num_blocks, num_kv_heads, block_size, head_dim] DeviceDType each.
  void* k_cache;
  void* v_cache;
  int32_t num_tokens;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size;
};
// Adds the QKV bias, applies rotary embeddings (Hugging Face rotate_half pairs (i, i + D/2),
// angles position * inv_freq in double precision as the CPU backend) to Q and K, writes Q back
// and K/V into each token's cache slot. One block per token.
cudaError_t LaunchRopeKv(DeviceDType dtype, const RopeKvParams& p, cudaStream_t stream);

struct ActivationParams {
  const float* up;       // [num_tokens, gated ? 2 * intermediate : intermediate] f32
  const float* up_bias;  // [gated ? 2 * intermediate : intermediate] f32; null: none
  void* out;             // [num_tokens, intermediate] DeviceDType
  int32_t num_tokens;
  int32_t intermediate;
  bool gated;  // out = act(gate) * up with gate = up[:, :I], up = up[:, I:]; else act(up)
  DeviceActivation activation;
};
cudaError_t LaunchActivation(DeviceDType dtype, const ActivationParams& p, cudaStream_t stream);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_KERNELS_H_
