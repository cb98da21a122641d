// The unmerged LoRA delta of one token's projection (lora_adapter.h): y[row_offset ..] +=
// B (A x), with the adapter's scaling already in B. Two small matrix-vector products per module,
// on AVX2/FMA when the CPU has it (cpu_features.h), else portable code.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_LORA_KERNELS_H_
#define LLMSERVE_WORKER_ENGINE_CPU_LORA_KERNELS_H_

#include <cstdint>

#include "worker/model/lora_adapter.h"

namespace llmserve::worker::cpu {

// Adds `module`'s delta for input row `x` (module.in floats) to output row `y` (the fused
// projection's row; the module writes y[row_offset, row_offset + out)). `scratch` holds at least
// the adapter's rank floats.
void AddLoraDelta(const LoraModule& module, int64_t rank, const float* x, float* y, float* scratch);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_LORA_KERNELS_H_
