#include "worker/engine/cpu/cpu_features.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/cpu_isa_cap.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace llmserve::worker::cpu {
namespace {

using common::CpuIsaAllows;
using common::CpuIsaLevel;

#if defined(__x86_64__)

// What the CPU has, whatever the setting.
bool CpuHasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

// F16C from CPUID leaf 1, not __builtin_cpu_supports("f16c"): clang 14 does not know that feature
// name (the sanitizer and fuzz builds use clang).
bool CpuHasAvx2FmaF16c() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// Bit `bit` of CPUID leaf 7, subleaf `subleaf`: `eax` or ECX (AVX512-VNNI, AVX512-VBMI, ...).
// From CPUID rather than __builtin_cpu_supports, which knows "avxvnni" only from GCC 11 and clang
// 13 on. The OS's saving of the vector state is checked with AVX2 and AVX-512 (same registers).
bool Leaf7Bit(unsigned int subleaf, bool in_eax, int bit) {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, subleaf, &eax, &ebx, &ecx, &edx) == 0) return false;
  return ((in_eax ? eax : ecx) & (1u << bit)) != 0;
}

#else

bool CpuHasAvx512() { return false; }
bool CpuHasAvx2FmaF16c() { return false; }
bool Leaf7Bit(unsigned int, bool, int) { return false; }

#endif

}  // namespace

bool HasAvx512() {
  static const bool has = CpuIsaAllows(CpuIsaLevel::kAvx512) && CpuHasAvx512();
  return has;
}

bool HasAvx512Bf16() {
#if defined(__x86_64__)
  static const bool has = HasAvx512() && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool HasAvx2FmaF16c() {
  static const bool has = CpuIsaAllows(CpuIsaLevel::kAvx2) && CpuHasAvx2FmaF16c();
  return has;
}

bool HasAvxVnni() {
  static const bool has =
      CpuIsaAllows(CpuIsaLevel::kAvxVnni) && HasAvx2FmaF16c() && Leaf7Bit(1, /*in_eax=*/true, 4);
  return has;
}

bool HasAvx512Vnni() {
  static const bool has = HasAvx512() && Leaf7Bit(0, /*in_eax=*/false, 11);
  return has;
}

bool HasAvx512Vbmi() {
  static const bool has = HasAvx512Vnni() && Leaf7Bit(0, /*in_eax=*/false, 1);
  return has;
}

std::vector<std::string> VectorIsas() {
  std::vector<std::string> isas;
  if (HasAvx512()) isas.push_back("avx512");
  if (HasAvx2FmaF16c()) isas.push_back("avx2");
  return isas;
}

std::string CpuIsaSummary() {
  std::string summary;
  std::vector<std::string> extensions;
  if (HasAvx512()) {
    summary = "avx512";
    if (HasAvx512Vnni()) extensions.push_back("vnni");
    if (HasAvx512Vbmi()) extensions.push_back("vbmi");
    if (HasAvx512Bf16()) extensions.push_back("bf16");
  } else if (HasAvx2FmaF16c()) {
    summary = "avx2";
    if (HasAvxVnni()) extensions.push_back("avx-vnni");
  } else {
    summary = "baseline";
  }
  if (!extensions.empty()) absl::StrAppend(&summary, " (", absl::StrJoin(extensions, ", "), ")");
  const bool capped = (!HasAvx512() && CpuHasAvx512()) ||
                      (!HasAvx2FmaF16c() && CpuHasAvx2FmaF16c()) ||
                      (!HasAvxVnni() && CpuHasAvx2FmaF16c() && Leaf7Bit(1, true, 4));
  if (capped) absl::StrAppend(&summary, " capped by LLMSERVE_CPU_ISA=", common::CpuIsaCapValue());
  return summary;
}

}  // namespace llmserve::worker::cpu
