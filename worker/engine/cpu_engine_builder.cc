#include "worker/engine/cpu_engine_builder.h"

#include "common/status/status_macros.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/model/model_files.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

absl::StatusOr<std::unique_ptr<Engine>> BuildCpuEngine(const CpuEngineOptions& options) {
  std::unique_ptr<ModelFiles> files;
  LLMSERVE_ASSIGN_OR_RETURN(files, ModelFiles::Open(options.model_dir));
  ModelConfig config;
  LLMSERVE_ASSIGN_OR_RETURN(
      config, ParseModelConfig(files->config_json(), files->generation_config_json()));
  std::unique_ptr<ModelWeights> weights;
  LLMSERVE_ASSIGN_OR_RETURN(weights, LoadModelWeights(*files, config, options.dtype));
  std::unique_ptr<CpuBackend> backend;
  LLMSERVE_ASSIGN_OR_RETURN(
      backend, CpuBackend::Create(std::move(weights), {.kv_cache_bytes = options.kv_cache_bytes,
                                                       .block_size = options.block_size,
                                                       .num_threads = options.num_threads}));
  return Engine::Create(std::move(backend), options.engine);
}

}  // namespace llmserve::worker
