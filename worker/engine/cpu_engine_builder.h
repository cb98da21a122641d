// Builds an Engine on the CPU backend from a model directory or a GGUF file (model_loader.h): the
// one place that turns "a path and some flags" into a running engine, for llmserve-run, the
// benchmarks and the worker.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_ENGINE_BUILDER_H_
#define LLMSERVE_WORKER_ENGINE_CPU_ENGINE_BUILDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

namespace llmserve::worker {

struct CpuEngineOptions {
  // A Hugging Face model directory or a GGUF file (model_loader.h).
  std::string model_dir;
  DType dtype = DType::kF32;
  // Projections quantized at load (CpuBackendOptions), and the LM head with them (unset: exactly
  // when the projections are quantized).
  Quantization quantization = Quantization::kNone;
  std::optional<bool> quantize_lm_head;
  // Integer dot products on activations quantized per token (CpuBackendOptions).
  bool quantized_activations = false;
  // Kernel threads, 0 = one per hardware thread.
  int num_threads = 0;
  // KV cache budget in bytes; when 0, kv_cache_fraction of the memory available once the
  // weights are loaded (MemAvailable in /proc/meminfo).
  int64_t kv_cache_bytes = int64_t{1} << 30;
  double kv_cache_fraction = 0;
  int32_t block_size = 16;
  // Context length to serve; 0 = the model's. Above the model's is INVALID_ARGUMENT, except for
  // a GGUF file's RoPE model (model_loader.h).
  int64_t max_model_len = 0;
  // LoRA: engine.max_loras adapter slots, each of rank at most this.
  int64_t max_lora_rank = 64;
  EngineConfig engine;
  // Reports weight loading, layer by layer.
  LoadProgress load_progress;
};

// NOT_FOUND / INVALID_ARGUMENT / UNIMPLEMENTED from model loading, naming the file or field.
absl::StatusOr<std::unique_ptr<Engine>> BuildCpuEngine(const CpuEngineOptions& options);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CPU_ENGINE_BUILDER_H_
