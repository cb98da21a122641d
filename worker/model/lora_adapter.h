// A LoRA adapter as PEFT saves it: adapter_config.json (peft_type LORA, r, lora_alpha,
// target_modules, use_rslora, ...) and adapter_model.safetensors with, for each adapted
// projection, lora_A [r, in] and lora_B [out, r]. Served unmerged: a projection y = W x of a
// request that uses the adapter becomes y = W x + scaling * B (A x), where scaling is
// lora_alpha / r (lora_alpha / sqrt(r) with use_rslora).
//
// Each adapted projection is placed where the backends keep it: q/k/v inside the fused qkv
// matrix, gate/up inside the fused gate-up matrix (model_weights.h), at the offset of its rows.
// Llama-family names (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj) and GPT-2's
// (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are read.
//
// Refused with INVALID_ARGUMENT naming the file and field or tensor: another peft_type, DoRA
// (use_dora), bias other than "none", modules_to_save, rank_pattern / alpha_pattern, a rank above
// max_rank, a target module the model does not have, a tensor that is not a LoRA A/B of one (an
// embedding or LM-head adapter), a missing half, wrong shapes, non-finite values.
//
// Thread-safe after loading: immutable.

#ifndef LLMSERVE_WORKER_MODEL_LORA_ADAPTER_H_
#define LLMSERVE_WORKER_MODEL_LORA_ADAPTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/model_config.h"

namespace llmserve::worker {

// Which fused projection of a layer an adapted module adds to.
enum class LoraTarget { kQkv, kO, kUp, kDown };

struct LoraModule {
  LoraTarget target = LoraTarget::kQkv;
  // The module's rows within the fused projection's output: [row_offset, row_offset + out).
  int64_t row_offset = 0;
  int64_t in = 0;
  int64_t out = 0;
  // [rank, in], f32.
  std::vector<float> a;
  // B transposed, [rank, out], f32, with the adapter's scaling folded in: the layout in which
  // the kernels add S B^T row by row (cpu/lora_kernels.h).
  std::vector<float> b_t;
};

struct LoraAdapter {
  int64_t rank = 0;
  double scaling = 1;
  // The checkpoint's own module names it adapts ("q_proj", "v_proj", ...), sorted.
  std::vector<std::string> target_modules;
  // Per layer, the adapted modules (any number, in file order).
  std::vector<std::vector<LoraModule>> layers;
  // Floats of A and B in all (what the adapter costs in memory, / 4 bytes).
  int64_t NumParameters() const;
};

// Where a checkpoint module lands in the backends' fused projections: its target, its first row
// there, and its [in, out].
struct LoraPlacement {
  LoraTarget target;
  int64_t row_offset;
  int64_t in;
  int64_t out;
};

// The placement of module `group`.`module` ("self_attn"/"q_proj", "mlp"/"c_fc", ...) in a model
// of `config`, or nullopt when the model has no such projection.
std::optional<LoraPlacement> PlaceLoraModule(const ModelConfig& config, const std::string& group,
                                             const std::string& module);

// Reads the adapter in `directory` for a model of `base`, with a rank of at most `max_rank`.
// NOT_FOUND when a file is missing.
absl::StatusOr<std::unique_ptr<LoraAdapter>> LoadLoraAdapter(const std::string& directory,
                                                             const ModelConfig& base,
                                                             int64_t max_rank);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_LORA_ADAPTER_H_
