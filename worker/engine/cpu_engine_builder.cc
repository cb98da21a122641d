#include "worker/engine/cpu_engine_builder.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/cgroup_limits.h"
#include "common/status/status_macros.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {
namespace {

// What the kernel thinks can be allocated without swapping (MemAvailable), capped by the room left
// under this process's cgroup memory limit (a container's), in bytes.
absl::StatusOr<int64_t> AvailableMemoryBytes() {
  absl::StatusOr<std::string> meminfo = ReadTextFile("/proc/meminfo", 1 << 16);
  if (!meminfo.ok()) return meminfo.status();
  for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, "kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return common::MemoryAvailableToProcess(kib * 1024, common::ReadCgroupLimits());
    }
  }
  return absl::UnavailableError("/proc/meminfo has no MemAvailable line");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> BuildCpuEngine(const CpuEngineOptions& options) {
  if (options.block_size < 1 || options.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size ", options.block_size, " is outside [1, 1024]"));
  }
  std::unique_ptr<ModelWeights> weights;
  LLMSERVE_ASSIGN_OR_RETURN(weights, LoadModelDirectory(options.model_dir, options.max_model_len,
                                                        options.dtype, options.load_progress));
  int64_t kv_cache_bytes = options.kv_cache_bytes;
  if (kv_cache_bytes <= 0) {
    if (!(options.kv_cache_fraction > 0 && options.kv_cache_fraction <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_fraction ",
                                                     options.kv_cache_fraction,
                                                     " is outside (0, 1] and no byte size is set"));
    }
    int64_t available = 0;
    LLMSERVE_ASSIGN_OR_RETURN(available, AvailableMemoryBytes());
    kv_cache_bytes = static_cast<int64_t>(options.kv_cache_fraction * available);
    // Past room for max_num_seqs full contexts twice over (the second half keeps prefixes
    // cached), memory only costs: a small model on a big machine would take gigabytes for nothing.
    const ModelConfig& config = weights->config;
    const int64_t useful = 2 * int64_t{options.engine.max_num_seqs} * config.max_model_len /
                           options.block_size *
                           CpuBackend::KvBytesPerBlock(config, options.block_size);
    kv_cache_bytes = std::min(kv_cache_bytes, std::max<int64_t>(useful, 1));
  }
  std::unique_ptr<CpuBackend> backend;
  LLMSERVE_ASSIGN_OR_RETURN(
      backend, CpuBackend::Create(std::move(weights),
                                  {.kv_cache_bytes = kv_cache_bytes,
                                   .block_size = options.block_size,
                                   .num_threads = options.num_threads,
                                   .quantization = options.quantization,
                                   .quantize_lm_head = options.quantize_lm_head,
                                   .quantized_activations = options.quantized_activations}));
  return Engine::Create(std::move(backend), options.engine);
}

}  // namespace llmserve::worker
