#include "worker/engine/cpu/cpu_features.h"

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
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}

#else

bool HasAvx512() { return false; }
bool HasAvx512Bf16() { return false; }
bool HasAvx2FmaF16c() { return false; }

#endif

}  // namespace llmserve::worker::cpu
