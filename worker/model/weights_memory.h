// What loading a model file (GGUF, llama2.c) takes, and the check that its weights fit in this
// machine's memory before anything is allocated.
//
// Thread-safe: pure functions (PhysicalMemoryBytes reads sysconf and the cgroup files).

#ifndef LLMSERVE_WORKER_MODEL_WEIGHTS_MEMORY_H_
#define LLMSERVE_WORKER_MODEL_WEIGHTS_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

struct FileLoadOptions {
  DType dtype = DType::kF32;
  LoadProgress progress;
  // The memory the weights must fit in; 0: this machine's physical memory, capped by the cgroup
  // memory limit (PhysicalMemoryBytes). Tests give a small one.
  int64_t memory_limit_bytes = 0;
};

// This machine's physical memory (sysconf), capped by this process's cgroup memory limit.
int64_t PhysicalMemoryBytes();

// OK when `needed` bytes of weights in `dtype` fit in `memory_limit_bytes` (0:
// PhysicalMemoryBytes); otherwise RESOURCE_EXHAUSTED naming `name` and both sizes, with `why` (what
// the weights become at load) in parentheses when it is not empty.
absl::Status CheckWeightsFitInMemory(const std::string& name, int64_t needed, DType dtype,
                                     int64_t memory_limit_bytes, absl::string_view why);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_WEIGHTS_MEMORY_H_
