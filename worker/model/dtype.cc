#include "worker/model/dtype.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/cpu_isa_cap.h"

namespace llmserve::worker {

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "': expected f32, f16 or bf16"));
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported tensor dtype '", name, "': weights must be F32, F16 or BF16"));
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: normalize it, since every half subnormal is a normal float.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs_bits >= 0x38800000u) {                       // normal half
    const uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);  // nearest even
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (abs_bits < 0x33000000u) return sign;  // below half the smallest subnormal: zero
  // Subnormal half: shift the mantissa (with its implicit 1) into place, rounding to even.
  const uint32_t exponent = abs_bits >> 23;
  const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  const uint32_t half_mantissa = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  uint32_t result = half_mantissa;
  if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

float BFloat16ToFloat(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

float LoadAsFloat(const unsigned char* src, DType from, size_t index) {
  if (from == DType::kF32) {
    float value;
    std::memcpy(&value, src + index * 4, 4);
    return value;
  }
  uint16_t half;
  std::memcpy(&half, src + index * 2, 2);
  return from == DType::kF16 ? HalfToFloat(half) : BFloat16ToFloat(half);
}

void StoreFromFloat(unsigned char* dst, DType to, size_t index, float value) {
  if (to == DType::kF32) {
    std::memcpy(dst + index * 4, &value, 4);
    return;
  }
  const uint16_t half = to == DType::kF16 ? FloatToHalf(value) : FloatToBFloat16(value);
  std::memcpy(dst + index * 2, &half, 2);
}

// bf16 is the top half of an f32: a shift, which the compiler vectorizes with the baseline ISA.
void BFloat16ToFloatRun(const unsigned char* in, unsigned char* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t half;
    std::memcpy(&half, in + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    std::memcpy(out + 4 * i, &bits, 4);
  }
}

#if defined(__x86_64__)
// F16C converts 8 halves per instruction; chosen at run time so that the build still runs on CPUs
// without it.
__attribute__((target("avx,f16c"))) void HalfToFloatRunF16c(const unsigned char* in,
                                                            unsigned char* out, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * i), _mm256_cvtph_ps(halves));
  }
  for (; i < count; ++i) StoreFromFloat(out, DType::kF32, i, LoadAsFloat(in, DType::kF16, i));
}

__attribute__((target("avx2"))) void BFloat16ToFloatRunAvx2(const unsigned char* in,
                                                            unsigned char* out, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m256i widened = _mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * i), widened);
  }
  BFloat16ToFloatRun(in + 2 * i, out + 4 * i, count - i);
}

// Both also follow LLMSERVE_CPU_ISA (cpu_isa_cap.h), as the engine's kernels do.
bool HasAvx2() {
  static const bool has =
      common::CpuIsaAllows(common::CpuIsaLevel::kAvx2) && __builtin_cpu_supports("avx2");
  return has;
}

bool HasF16c() {
  // CPUID leaf 1, not __builtin_cpu_supports("f16c"): clang 14 does not know that feature name
  // (the fuzz build uses clang).
  static const bool has = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return common::CpuIsaAllows(common::CpuIsaLevel::kAvx2) &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0 &&
           __builtin_cpu_supports("avx");
  }();
  return has;
}
#endif

}  // namespace

void ConvertElements(const void* src, DType from, void* dst, DType to, size_t count) {
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  if (from == to) {
    std::memcpy(out, in, count * DTypeSize(from));
    return;
  }
#if defined(__x86_64__)
  if (from == DType::kBF16 && to == DType::kF32 && HasAvx2()) {
    return BFloat16ToFloatRunAvx2(in, out, count);
  }
  if (from == DType::kF16 && to == DType::kF32 && HasF16c()) {
    return HalfToFloatRunF16c(in, out, count);
  }
#endif
  if (from == DType::kBF16 && to == DType::kF32) return BFloat16ToFloatRun(in, out, count);
  for (size_t i = 0; i < count; ++i) StoreFromFloat(out, to, i, LoadAsFloat(in, from, i));
}

}  // namespace llmserve::worker
