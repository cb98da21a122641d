#include "worker/model/weights_memory.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/cgroup_limits.h"

namespace llmserve::worker {
namespace {

std::string FormatBytes(int64_t bytes) {
  if (bytes < (int64_t{1} << 20)) return absl::StrCat(bytes, " bytes");
  if (bytes < (int64_t{1} << 30)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

}  // namespace

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  int64_t bytes = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : INT64_MAX;
  const common::CgroupLimits limits = common::ReadCgroupLimits();
  if (limits.memory_limit_bytes) bytes = std::min(bytes, *limits.memory_limit_bytes);
  return bytes;
}

absl::Status CheckWeightsFitInMemory(const std::string& name, int64_t needed, DType dtype,
                                     int64_t memory_limit_bytes, absl::string_view why) {
  const int64_t limit = memory_limit_bytes > 0 ? memory_limit_bytes : PhysicalMemoryBytes();
  if (needed <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      name, ": the weights need ", FormatBytes(needed), " in ", DTypeName(dtype),
      why.empty() ? "" : absl::StrCat(" (", why, ")"), ", more than the ", FormatBytes(limit),
      " of memory this machine (or its cgroup) has; try a smaller --dtype or model"));
}

}  // namespace llmserve::worker
