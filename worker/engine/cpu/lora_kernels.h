// The unmerged LoRA delta of a group of tokens that share one adapter (lora_adapter.h):
// Y[:, row_offset ..] += (X A^T) B^T, with the adapter's scaling already in B, in two steps as
// Punica's SGMV does on GPUs: shrink (each token's input down to `rank` values, S = X A^T) and
// expand (S B^T added to the outputs). Grouping a step's tokens by adapter reads each adapter's A
// and B once per step instead of once per token; each step's loops keep one row of A (shrink) or
// of B^T (expand) in cache across the group's tokens. AVX2/FMA when the CPU has it
// (cpu_features.h), else portable code.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_LORA_KERNELS_H_
#define LLMSERVE_WORKER_ENGINE_CPU_LORA_KERNELS_H_

#include <cstdint>

#include "worker/model/lora_adapter.h"

namespace llmserve::worker::cpu {

// s[t * rank + r] = A[r] . xs[t] (module.in floats each) for ranks [r_begin, r_end) and the
// `num_tokens` inputs `xs`.
void LoraShrink(const LoraModule& module, int64_t rank, int64_t r_begin, int64_t r_end,
                const float* const* xs, int64_t num_tokens, float* s);

// ys[t][row_offset + c] += sum over r of s[t * rank + r] * B^T[r, c], for columns
// [c_begin, c_end) of the module's `out` and the `num_tokens` outputs `ys` (the fused
// projection's rows).
void LoraExpand(const LoraModule& module, int64_t rank, const float* s, int64_t num_tokens,
                float* const* ys, int64_t c_begin, int64_t c_end);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_LORA_KERNELS_H_
