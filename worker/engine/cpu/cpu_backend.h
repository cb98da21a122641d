// The CPU backend: the reference every other backend is compared with, and the embedded default.
// f32 activations (optionally quantized to int8 for the int8 and 4-bit projections of small steps:
// CpuBackendOptions::quantized_activations); weights in f32, bf16 or f16, or projections quantized
// to int8 at load (quantization.h, matmul.h); a paged f32 KV cache sized from a memory budget
// (paged_attention.h for the layout).
//
// Not thread-safe: the engine thread owns it. It runs its own worker threads inside Forward.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_CPU_BACKEND_H_
#define LLMSERVE_WORKER_ENGINE_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/huge_page_memory.h"
#include "worker/engine/backend.h"
#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/forward_profile.h"
#include "worker/engine/cpu/matmul.h"
#include "worker/engine/cpu/paged_attention.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

namespace llmserve::worker {

// The largest LoRA rank a CPU backend takes (max_lora_rank).
inline constexpr int64_t kMaxLoraRank = 512;

struct CpuBackendOptions {
  // Bytes of KV cache (K and V of every layer); the number of blocks follows from it.
  int64_t kv_cache_bytes = int64_t{1} << 30;
  // Tokens per KV block.
  int32_t block_size = 16;
  // Threads for kernels, the calling thread included; 0: one per hardware thread.
  int num_threads = 0;
  // Run the kernels on this pool instead of one of num_threads of its own: backends that run one
  // after the other on one thread (a target model and its draft model) share their threads, so
  // one's idle spinning workers do not compete with the other's.
  std::shared_ptr<cpu::ParallelForPool> thread_pool;
  // kInt8: every projection (q/k/v, o, gate/up, down) is quantized to int8 at load, per output
  // row; embeddings and norms stay in the weights' dtype. An AWQ/GPTQ checkpoint runs its 4-bit
  // projections with kNone or its own method (ResolveQuantization); a GGUF file's 4-bit
  // projections run as such with kNone or kInt8, which then quantizes its other projections.
  Quantization quantization = Quantization::kNone;
  // The LM head quantized to int8 per row (a tied head is quantized as a copy: the embedding lookup
  // keeps the unquantized table). true: with kInt8 or a 4-bit checkpoint only (INVALID_ARGUMENT
  // otherwise); unset: exactly when the projections are quantized and the head's shape allows it
  // (measured to cost little: docs/engine.md, "Quality of each quantization mode").
  std::optional<bool> quantize_lm_head;
  // With kInt8 or a 4-bit checkpoint: the int8 and int4 projections at batches of up to
  // cpu::kQuantizedDotMaxRows tokens multiply activations quantized per token to int8 with integer
  // dot products (quantized_dot.h). Changes the numerics, so off by default.
  bool quantized_activations = false;
  // LoRA adapter slots served unmerged (SetLoraAdapter), and the largest rank one may have.
  int32_t max_loras = 0;
  int64_t max_lora_rank = 64;
};

class CpuBackend final : public Backend {
 public:
  // INVALID_ARGUMENT when the budget holds no block, the options are out of range, the
  // quantization does not fit the checkpoint (ResolveQuantization), or a weight to quantize is not
  // finite (naming it).
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(std::unique_ptr<ModelWeights> weights,
                                                            const CpuBackendOptions& options);

  const ModelConfig& config() const override { return weights_->config; }
  int32_t block_size() const override { return static_cast<int32_t>(layout_.block_size); }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  absl::string_view name() const override { return "cpu"; }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* output) override;

  int num_threads() const { return pool_.num_threads(); }
  // The kernels' pool, to share with a backend that runs after this one on the same thread.
  std::shared_ptr<cpu::ParallelForPool> thread_pool() const { return pool_owner_; }
  // What runs: ResolveQuantization of the options and the checkpoint.
  Quantization quantization() const { return quantization_; }
  bool lm_head_quantized() const override { return lm_head_.is_int8(); }
  bool supports_hidden_states() const override { return true; }
  int32_t max_loras() const override { return static_cast<int32_t>(lora_slots_.size()); }
  int64_t max_lora_rank() const override { return max_lora_rank_; }
  absl::Status SetLoraAdapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) override;
  bool quantized_activations() const { return quantized_activations_; }
  // Bytes of the weights as the backend holds them (packed, quantized): what a decode step reads.
  int64_t weight_bytes() const { return weight_bytes_; }

  // Profiling (forward_profile.h): off by default. While on, each Forward adds its phases' times
  // to profile(); ResetProfile starts over.
  void EnableProfile(bool on);
  const cpu::ForwardProfile& profile() const { return profile_; }
  void ResetProfile() { profile_ = {}; }

  // Bytes one KV block of `block_size` tokens takes for `config` (K and V of every layer), so that
  // callers can size kv_cache_bytes for a number of tokens.
  static int64_t KvBytesPerBlock(const ModelConfig& config, int32_t block_size);

 private:
  CpuBackend(std::unique_ptr<ModelWeights> weights, const CpuBackendOptions& options,
             int32_t num_blocks, int num_threads);

  void Embed(const ForwardBatch& batch);
  void RunLayer(int layer, const ForwardBatch& batch);
  void Attention(int layer, const ForwardBatch& batch);
  struct LayerProjections {
    cpu::ProjectionWeight qkv, o, up, down;
  };
  void Mlp(int layer, const LayerWeights& weights, const LayerProjections& projections,
           int64_t tokens);
  void ComputeLogits(const ForwardBatch& batch, ForwardOutput* output);
  // Adds the LoRA deltas of layer `layer`'s `target` projection, input rows `x` ([tokens, in]),
  // to its output rows `y` ([tokens, y_width]), for the tokens whose sequence names an adapter:
  // per adapter of the step, its tokens as one group (cpu/lora_kernels.h).
  void ApplyLora(int layer, LoraTarget target, const float* x, int64_t x_width, float* y,
                 int64_t y_width);
  // Profiling: the time since the previous mark goes to `phase` (and `weight_bytes` to its bytes).
  void Mark(cpu::ForwardPhase phase, int64_t weight_bytes = 0) {
    if (!profiling_) return;
    const int64_t now = cpu::SteadyClockNanos();
    profile_.nanos[static_cast<int>(phase)] += now - mark_nanos_;
    profile_.weight_bytes[static_cast<int>(phase)] += weight_bytes;
    const int64_t waited = pool_.wait_nanos_measured();
    profile_.wait_nanos[static_cast<int>(phase)] += waited - mark_wait_nanos_;
    mark_nanos_ = now;
    mark_wait_nanos_ = waited;
  }

  // Norms, biases and the untied embedding table; the projections have moved out into
  // projections_ and lm_head_.
  std::unique_ptr<ModelWeights> weights_;
  std::vector<LayerProjections> projections_;
  cpu::ProjectionWeight lm_head_;
  bool embedding_is_lm_head_ = false;
  Quantization quantization_ = Quantization::kNone;
  bool quantized_activations_ = false;
  int64_t weight_bytes_ = 0;
  cpu::PagedKvLayout layout_;
  int32_t num_blocks_;
  std::vector<double> rope_inv_freq_;
  std::shared_ptr<cpu::ParallelForPool> pool_owner_;
  cpu::ParallelForPool& pool_;
  cpu::MatMul matmul_;
  // [layers][num_blocks, num_kv_heads, block_size, head_dim], on huge pages.
  std::unique_ptr<float[], HugePageMemoryDeleter> k_cache_;
  std::unique_ptr<float[], HugePageMemoryDeleter> v_cache_;
  // LoRA: the adapter in each slot (null: empty), and this step's tokens of each slot in use.
  struct LoraGroup {
    int32_t slot = 0;
    std::vector<int64_t> tokens;
  };
  // One module's work on one group in ApplyLora: the group's shrink outputs start at s_offset of
  // lora_s_, its input and output row pointers at io_offset of lora_xs_ / lora_ys_.
  struct LoraJob {
    const LoraModule* module = nullptr;
    int64_t rank = 0;
    int64_t num_tokens = 0;
    int64_t s_offset = 0;
    int64_t io_offset = 0;
  };
  std::vector<std::shared_ptr<const LoraAdapter>> lora_slots_;
  int64_t max_lora_rank_ = 0;
  std::vector<LoraGroup> lora_groups_;
  std::vector<LoraJob> lora_jobs_;
  std::vector<float> lora_s_;
  std::vector<const float*> lora_xs_;
  std::vector<float*> lora_ys_;

  // Per-step scratch, grown to the largest batch seen.
  std::vector<int32_t> token_seq_;          // [tokens] sequence of each token
  std::vector<int32_t> token_pos_;          // [tokens] position of each token
  cpu::AlignedVector<float> hidden_;        // [tokens, hidden] the residual stream
  cpu::AlignedVector<float> normed_;        // [tokens, hidden]
  cpu::AlignedVector<float> qkv_;           // [tokens, (heads + 2 * kv_heads) * head_dim]
  cpu::AlignedVector<float> attn_out_;      // [tokens, heads * head_dim]
  cpu::AlignedVector<float> proj_;          // [tokens, hidden]
  cpu::AlignedVector<float> mlp_up_;        // [tokens, 2 * intermediate] or [tokens, intermediate]
  cpu::AlignedVector<float> mlp_act_;       // [tokens, intermediate]
  std::vector<std::vector<float>> scores_;  // per thread [max_model_len]

  bool profiling_ = false;
  cpu::ForwardProfile profile_;
  int64_t mark_nanos_ = 0;
  int64_t mark_wait_nanos_ = 0;
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CPU_CPU_BACKEND_H_
