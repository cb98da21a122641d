#include "common/base/cgroup_limits.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/base/read_file.h"

namespace llmserve::common {
namespace {

// A cgroup or proc file (a line or a few), or nullopt when it cannot be read.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileUpTo(path, 64 * 1024, "cgroup file");
  if (!text.ok()) return std::nullopt;
  return *std::move(text);
}

std::optional<int64_t> ReadInt(const std::string& path) {
  std::optional<std::string> text = ReadSmallFile(path);
  int64_t value = 0;
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) return std::nullopt;
  return value;
}

// v1 reports "unlimited" as a huge number (PAGE_COUNTER_MAX pages, about 2^63).
constexpr int64_t kV1Unlimited = int64_t{1} << 60;

}  // namespace

CgroupLimits ReadCgroupLimits(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  CgroupLimits limits;
  // Lines "ID:CONTROLLERS:PATH"; v2 is "0::PATH". Without a cgroup namespace the process's group is
  // PATH under the root; with one (containers) PATH is "/" and the files are at the root.
  std::string v2_path, v1_memory_path, v1_cpu_path;
  if (std::optional<std::string> text = ReadSmallFile(proc_self_cgroup)) {
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (parts.size() != 3) continue;
      if (parts[0] == "0" && parts[1].empty()) v2_path = parts[2];
      for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
        if (controller == "memory") v1_memory_path = parts[2];
        if (controller == "cpu") v1_cpu_path = parts[2];
      }
    }
  }
  // The process's own group first, then the root (a namespaced container's own group).
  auto first_existing = [&](const std::string& group, const std::string& file) {
    for (const std::string& dir : {cgroup_root + group, cgroup_root}) {
      const std::string path = dir + "/" + file;
      if (ReadSmallFile(path).has_value()) return path;
    }
    return std::string();
  };
  if (std::string max = first_existing(v2_path, "memory.max"); !max.empty()) {
    limits.memory_limit_bytes = ReadInt(max);  // "max" reads as nullopt: unlimited
    const std::string dir = max.substr(0, max.size() - std::string("/memory.max").size());
    limits.memory_usage_bytes = ReadInt(dir + "/memory.current");
  } else if (std::string limit =
                 first_existing("/memory" + v1_memory_path, "memory.limit_in_bytes");
             !limit.empty()) {
    limits.memory_limit_bytes = ReadInt(limit);
    if (limits.memory_limit_bytes && *limits.memory_limit_bytes >= kV1Unlimited) {
      limits.memory_limit_bytes.reset();
    }
    const std::string dir =
        limit.substr(0, limit.size() - std::string("/memory.limit_in_bytes").size());
    limits.memory_usage_bytes = ReadInt(dir + "/memory.usage_in_bytes");
  }
  if (std::string cpu_max = first_existing(v2_path, "cpu.max"); !cpu_max.empty()) {
    // "QUOTA PERIOD" or "max PERIOD".
    std::vector<std::string> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(*ReadSmallFile(cpu_max)), ' ');
    double quota = 0, period = 0;
    if (fields.size() == 2 && absl::SimpleAtod(fields[0], &quota) &&
        absl::SimpleAtod(fields[1], &period) && quota > 0 && period > 0) {
      limits.cpu_quota = quota / period;
    }
  } else if (std::string quota_file = first_existing("/cpu" + v1_cpu_path, "cpu.cfs_quota_us");
             !quota_file.empty()) {
    const std::string dir =
        quota_file.substr(0, quota_file.size() - std::string("/cpu.cfs_quota_us").size());
    const std::optional<int64_t> quota = ReadInt(quota_file);  // -1: unlimited
    const std::optional<int64_t> period = ReadInt(dir + "/cpu.cfs_period_us");
    if (quota && period && *quota > 0 && *period > 0) {
      limits.cpu_quota = static_cast<double>(*quota) / static_cast<double>(*period);
    }
  }
  return limits;
}

int64_t MemoryAvailableToProcess(int64_t mem_available, const CgroupLimits& limits) {
  if (!limits.memory_limit_bytes) return mem_available;
  const int64_t room =
      std::max<int64_t>(0, *limits.memory_limit_bytes - limits.memory_usage_bytes.value_or(0));
  return std::min(mem_available, room);
}

int UsableCpus(int cpus, const CgroupLimits& limits) {
  int usable = std::max(1, cpus);
  if (limits.cpu_quota) {
    usable = std::min(usable, static_cast<int>(std::ceil(*limits.cpu_quota - 1e-9)));
  }
  return std::max(1, usable);
}

int UsableCpusOfThisProcess() {
  cpu_set_t set;
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  return UsableCpus(cpus, ReadCgroupLimits());
}

}  // namespace llmserve::common
