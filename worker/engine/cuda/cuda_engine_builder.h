// Builds an Engine on the CUDA backend from a model directory: what BuildCpuEngine
// (worker/engine/cpu_engine_builder.h) is for the CPU, for llmserve-worker --backend=cuda.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_CUDA_ENGINE_BUILDER_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_CUDA_ENGINE_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"
#include "worker/model/quantization.h"

namespace llmserve::worker {

struct CudaEngineOptions {
  // A Hugging Face model directory or a GGUF file (model_loader.h).
  std::string model_dir;
  int device = 0;
  // bf16 or f16 (the checkpoint is converted while loading).
  DType dtype = DType::kBF16;
  // --quantization: kNone, or kInt8 (projections quantized per row at load). An AWQ/GPTQ
  // checkpoint keeps its projections in 4 bits whether this is kNone or names its format;
  // ResolveQuantization's pairs are refused as on the CPU (INVALID_ARGUMENT).
  Quantization quantization = Quantization::kNone;
  // KV cache bytes; when 0, kv_cache_fraction of the device memory free after the weights, the
  // activation workspace and a profiling forward pass.
  int64_t kv_cache_bytes = 0;
  double kv_cache_fraction = 0.9;
  int32_t block_size = 16;
  // Context length to serve; 0 = the model's. Above the model's is INVALID_ARGUMENT, except for
  // a GGUF file's RoPE model (model_loader.h).
  int64_t max_model_len = 0;
  // LoRA: engine.max_loras adapter slots, each of rank at most this.
  int64_t max_lora_rank = 64;
  // Its max_num_batched_tokens and max_num_seqs also size the backend's workspace.
  EngineConfig engine;
  LoadProgress load_progress;
};

// NOT_FOUND / INVALID_ARGUMENT / UNIMPLEMENTED from model loading, and CudaBackend::Create's
// errors (FAILED_PRECONDITION without a device, RESOURCE_EXHAUSTED when the model does not fit).
absl::StatusOr<std::unique_ptr<Engine>> BuildCudaEngine(const CudaEngineOptions& options);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_CUDA_ENGINE_BUILDER_H_
