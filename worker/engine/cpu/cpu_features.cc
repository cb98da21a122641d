#include "worker/engine/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace llmserve::worker::cpu {

#if defined(__x86_64__)

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

bool HasAvx512Bf16() {
  static const bool has = HasAvx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}

bool HasAvx2FmaF16c() {
  // F16C from CPUID leaf 1, not __builtin_cpu_supports("f16c"): clang 14 does not know that
  // feature name (the sanitizer and fuzz builds use clang).
  static const bool has = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}

namespace {

// Bit `bit` of ECX in CPUID leaf 7, subleaf 0 (AVX512-VNNI, AVX512-VBMI, ...).
bool Leaf7Subleaf0Ecx(int bit) {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << bit)) != 0;
}

}  // namespace

// From CPUID leaf 7 rather than __builtin_cpu_supports, which knows "avxvnni" only from GCC 11 and
// clang 13 on. The OS's saving of the vector state is already checked by HasAvx2FmaF16c and
// HasAvx512 (the registers are the same).
bool HasAvxVnni() {
  static const bool has = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return HasAvx2FmaF16c() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
           (eax & (1u << 4)) != 0;
  }();
  return has;
}

bool HasAvx512Vnni() {
  static const bool has = HasAvx512() && Leaf7Subleaf0Ecx(11);
  return has;
}

bool HasAvx512Vbmi() {
  static const bool has = HasAvx512Vnni() && Leaf7Subleaf0Ecx(1);
  return has;
}

#else

bool HasAvx512() { return false; }
bool HasAvxVnni() { return false; }
bool HasAvx512Vnni() { return false; }
bool HasAvx512Vbmi() { return false; }
bool HasAvx512Bf16() { return false; }
bool HasAvx2FmaF16c() { return false; }

#endif

std::vector<std::string> VectorIsas() {
  std::vector<std::string> isas;
  if (HasAvx512()) isas.push_back("avx512");
  if (HasAvx2FmaF16c()) isas.push_back("avx2");
  return isas;
}

}  // namespace llmserve::worker::cpu
