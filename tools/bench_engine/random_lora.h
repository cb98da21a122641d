// Random PEFT LoRA adapters for the engine benchmark: written as a PEFT directory
// (adapter_config.json, adapter_model.safetensors) and read back through the worker's own loader,
// so the benchmark runs adapters exactly as a worker holds them.

#ifndef LLMSERVE_TOOLS_BENCH_ENGINE_RANDOM_LORA_H_
#define LLMSERVE_TOOLS_BENCH_ENGINE_RANDOM_LORA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/lora_adapter.h"
#include "worker/model/model_config.h"

namespace llmserve::tools {

// Writes an adapter of rank `rank` over `targets` (PEFT module names of a Llama-family model:
// q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) with values from `seed` into
// `dir`, and loads it. INVALID_ARGUMENT for a GPT-2 model or an unknown module.
absl::StatusOr<std::unique_ptr<worker::LoraAdapter>> MakeRandomLoraAdapter(
    const worker::ModelConfig& config, int64_t rank, const std::vector<std::string>& targets,
    uint32_t seed, const std::string& dir);

}  // namespace llmserve::tools

#endif  // LLMSERVE_TOOLS_BENCH_ENGINE_RANDOM_LORA_H_
