#include "worker/engine/cpu_engine_builder.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/cgroup_limits.h"
#include "common/base/cpu_isa_cap.h"
#include "common/base/logging.h"
#include "common/status/status_macros.h"
#include "worker/engine/cpu/cpu_backend.h"
#include "worker/engine/cpu/cpu_features.h"
#include "worker/model/model_loader.h"

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

// The draft model of speculative decoding, in the target's dtype (a 4-bit checkpoint stays 4-bit)
// or int8 as asked, on the target's threads, with a KV cache of as many tokens as the target's
// (each request the target holds can be drafted for) plus room for the drafts themselves.
absl::StatusOr<std::unique_ptr<CpuBackend>> BuildDraftBackend(const CpuEngineOptions& options,
                                                              const CpuBackend& target) {
  const std::string& dir = options.engine.speculative.model;
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      LoadModel(dir, /*max_model_len=*/0, options.dtype, /*progress=*/{});
  if (!weights.ok()) {
    return absl::Status(weights.status().code(),
                        absl::StrCat("draft model: ", weights.status().message()));
  }
  const ModelConfig& config = (*weights)->config;
  const bool int8 = options.engine.speculative.model_int8;
  const int64_t blocks =
      int64_t{target.num_kv_blocks()} +
      int64_t{options.engine.max_num_seqs} * (1 + kMaxSpeculativeTokens / options.block_size);
  absl::StatusOr<std::unique_ptr<CpuBackend>> draft = CpuBackend::Create(
      *std::move(weights),
      {.kv_cache_bytes = blocks * CpuBackend::KvBytesPerBlock(config, options.block_size),
       .block_size = options.block_size,
       .thread_pool = target.thread_pool(),
       // A 4-bit draft keeps its projections in 4 bits; its LM head goes int8 all the same.
       .quantization =
           int8 && !config.quantization.quantized() ? Quantization::kInt8 : Quantization::kNone,
       .quantize_lm_head = int8,
       .quantized_activations = int8});
  if (!draft.ok()) {
    return absl::Status(draft.status().code(),
                        absl::StrCat("draft model: ", draft.status().message()));
  }
  return draft;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> BuildCpuEngine(const CpuEngineOptions& options) {
  if (options.block_size < 1 || options.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size ", options.block_size, " is outside [1, 1024]"));
  }
  // Before the load, which can take minutes (CpuBackend::Create checks it too).
  LLMSERVE_RETURN_IF_ERROR(common::CheckCpuIsaCap());
  LLMSERVE_LOG(INFO) << "CPU kernels: " << cpu::CpuIsaSummary();
  std::unique_ptr<ModelWeights> weights;
  LLMSERVE_ASSIGN_OR_RETURN(weights, LoadModel(options.model_dir, options.max_model_len,
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
                                   .quantized_activations = options.quantized_activations,
                                   .max_loras = options.engine.max_loras,
                                   .max_lora_rank = options.max_lora_rank}));
  std::unique_ptr<CpuBackend> draft;
  if (options.engine.speculative.method == SpeculativeMethod::kDraft) {
    LLMSERVE_ASSIGN_OR_RETURN(draft, BuildDraftBackend(options, *backend));
  }
  return Engine::Create(std::move(backend), options.engine, std::move(draft));
}

}  // namespace llmserve::worker
