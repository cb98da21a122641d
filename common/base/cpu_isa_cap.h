// LLMSERVE_CPU_ISA: the highest instruction-set level the process's run-time-dispatched vector
// code may use (as oneDNN's ONEDNN_MAX_CPU_ISA): "avx512" (the default: whatever the CPU has),
// "avxvnni" (no AVX-512), "avx2" (AVX2, FMA and F16C alone), "baseline" (the x86-64 baseline, SSE2:
// no AVX code). Every dispatcher asks CpuIsaAllows besides the CPU's own features
// (worker/engine/cpu/cpu_features.h, the dtype conversions), so that a cap runs an older CPU's
// paths, all of them, on a newer one. OpenBLAS picks its own kernels (OPENBLAS_CORETYPE).
//
// Thread-safe: the variable is read once.

#ifndef LLMSERVE_COMMON_BASE_CPU_ISA_CAP_H_
#define LLMSERVE_COMMON_BASE_CPU_ISA_CAP_H_

#include <string>

#include "absl/status/status.h"

namespace llmserve::common {

// Lowest first.
enum class CpuIsaLevel { kBaseline, kAvx2, kAvxVnni, kAvx512 };

// Whether LLMSERVE_CPU_ISA allows code of `level` (unset, empty or not a level: every level).
bool CpuIsaAllows(CpuIsaLevel level);

// INVALID_ARGUMENT naming LLMSERVE_CPU_ISA and the accepted values when it holds another one.
absl::Status CheckCpuIsaCap();

// The variable as set; empty when unset.
std::string CpuIsaCapValue();

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_CPU_ISA_CAP_H_
