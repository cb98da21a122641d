// The instruction-set levels the CPU backend's kernels are compiled for, checked once at run time
// (the build never assumes the CPU it runs on). x86-64 only; elsewhere all false.
//
// LLMSERVE_CPU_ISA caps them, for the whole process (common/base/cpu_isa_cap.h): "avx512" (the
// default: whatever the CPU has), "avxvnni" (no AVX-512), "avx2" (AVX2, FMA and F16C alone: what
// Haswell to Zen 3 have), "baseline" (no vector kernels; the portable code). On an AVX-512 machine
// it runs the paths an older CPU takes, to measure or check them; a cap above what the CPU has
// changes nothing.
//
// Thread-safe.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_CPU_FEATURES_H_
#define LLMSERVE_WORKER_ENGINE_CPU_CPU_FEATURES_H_

#include <string>
#include <vector>

namespace llmserve::worker::cpu {

// AVX-512 F, BW and VL.
bool HasAvx512();
// HasAvx512() and AVX512-BF16 (the bf16 dot product).
bool HasAvx512Bf16();
// AVX2, FMA and F16C.
bool HasAvx2FmaF16c();
// HasAvx2FmaF16c() and AVX-VNNI (the VEX-encoded vpdpbusd on 256-bit vectors).
bool HasAvxVnni();
// HasAvx512() and AVX512-VNNI (vpdpbusd; the integer-dot kernels use its 256-bit form).
bool HasAvx512Vnni();
// HasAvx512Vnni() and AVX512-VBMI (byte permutes across a 512-bit vector: vpermt2b).
bool HasAvx512Vbmi();

// The vector instruction sets the kernels have variants for that this CPU runs, best first:
// "avx512" (HasAvx512), "avx2" (HasAvx2FmaF16c). Empty on a CPU with neither.
std::vector<std::string> VectorIsas();

// What the kernels use, for logs and benchmark output: "avx512 (vnni, vbmi, bf16)", "avx2",
// "baseline"; with " capped by LLMSERVE_CPU_ISA=..." when the setting removed something.
std::string CpuIsaSummary();

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_CPU_FEATURES_H_
