#include "worker/engine/cuda/cuda_engine_builder.h"

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/engine/cuda/cuda_plugin_loader.h"
#include "worker/model/model_loader.h"

namespace llmserve::worker {

absl::StatusOr<std::unique_ptr<Engine>> BuildCudaEngine(const CudaEngineOptions& options) {
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend runs bf16 or f16 weights, not ", DTypeName(options.dtype),
                     " (f32 checkpoints are converted: pass --dtype=bf16 or --dtype=f16)"));
  }
  if (options.engine.speculative.method == SpeculativeMethod::kDraft) {
    return absl::InvalidArgumentError(
        "speculative_method=draft runs on the CPU backend only; the CUDA backend cannot load a "
        "draft model yet");
  }
  // Before the (possibly long) weight load.
  LLMSERVE_RETURN_IF_ERROR(CheckCudaDevice(options.device));
  std::unique_ptr<ModelWeights> weights;
  LLMSERVE_ASSIGN_OR_RETURN(weights, LoadModel(options.model_dir, options.max_model_len,
                                               options.dtype, options.load_progress));
  // int8 on a 4-bit checkpoint, awq/gptq on another format. An AWQ/GPTQ checkpoint's projections
  // stay in 4 bits: the backend has kernels for them.
  Quantization resolved;
  LLMSERVE_ASSIGN_OR_RETURN(
      resolved, ResolveQuantization(options.quantization, weights->config.quantization));
  std::unique_ptr<Backend> backend;
  LLMSERVE_ASSIGN_OR_RETURN(
      backend,
      CreateCudaBackend(std::move(weights),
                        {.device = options.device,
                         .dtype = options.dtype,
                         .quantization = resolved == Quantization::kInt8 ? Quantization::kInt8
                                                                         : Quantization::kNone,
                         .kv_cache_bytes = options.kv_cache_bytes,
                         .kv_cache_fraction = options.kv_cache_fraction,
                         .block_size = options.block_size,
                         .max_num_batched_tokens = options.engine.max_num_batched_tokens,
                         .max_num_seqs = options.engine.max_num_seqs,
                         .max_loras = options.engine.max_loras,
                         .max_lora_rank = options.max_lora_rank}));
  return Engine::Create(std::move(backend), options.engine);
}

}  // namespace llmserve::worker
