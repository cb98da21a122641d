// Builds an Engine on the CPU backend from a model directory: the one place that turns "a path
// and some flags" into a running engine, for llmserve-run, the benchmarks and the worker.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_ENGINE_BUILDER_H_
#define LLMSERVE_WORKER_ENGINE_CPU_ENGINE_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"
#include "worker/model/dtype.h"

namespace llmserve::worker {

struct CpuEngineOptions {
  std::string model_dir;
  DType dtype = DType::kF32;
  // Kernel threads, 0 = one per hardware thread.
  int num_threads = 0;
  // KV cache budget in bytes.
  int64_t kv_cache_bytes = int64_t{1} << 30;
  int32_t block_size = 16;
  EngineConfig engine;
};

// NOT_FOUND / INVALID_ARGUMENT / UNIMPLEMENTED from model loading, naming the file or field.
absl::StatusOr<std::unique_ptr<Engine>> BuildCpuEngine(const CpuEngineOptions& options);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CPU_ENGINE_BUILDER_H_
