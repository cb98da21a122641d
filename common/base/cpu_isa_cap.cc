#include "common/base/cpu_isa_cap.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace llmserve::common {
namespace {

struct Cap {
  CpuIsaLevel level = CpuIsaLevel::kAvx512;
  std::string value;  // as set
  bool valid = true;
};

const Cap& TheCap() {
  static const Cap cap = [] {
    Cap c;
    const char* value = std::getenv("LLMSERVE_CPU_ISA");
    if (value == nullptr) return c;
    c.value = value;
    if (c.value.empty() || c.value == "avx512") {
      c.level = CpuIsaLevel::kAvx512;
    } else if (c.value == "avxvnni") {
      c.level = CpuIsaLevel::kAvxVnni;
    } else if (c.value == "avx2") {
      c.level = CpuIsaLevel::kAvx2;
    } else if (c.value == "baseline") {
      c.level = CpuIsaLevel::kBaseline;
    } else {
      c.valid = false;  // CheckCpuIsaCap reports it; until then, no cap
    }
    return c;
  }();
  return cap;
}

}  // namespace

bool CpuIsaAllows(CpuIsaLevel level) { return TheCap().level >= level; }

absl::Status CheckCpuIsaCap() {
  if (TheCap().valid) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("LLMSERVE_CPU_ISA=", TheCap().value,
                   ": expected avx512, avxvnni, avx2 or baseline (the highest instruction set the "
                   "CPU kernels may use)"));
}

std::string CpuIsaCapValue() { return TheCap().value; }

}  // namespace llmserve::common
