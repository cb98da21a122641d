// The memory and CPU a process may use inside a container: Linux cgroup limits (v2, or v1), which
// /proc/meminfo and the CPU count do not show. A pod limited to 8 GiB on a 512 GiB node that sized
// its KV cache from MemAvailable would be OOM-killed; one limited to 2 CPUs that started 64 kernel
// threads would be throttled.
//
// Reading never fails: a file that is missing or unreadable means "no limit known".

#ifndef LLMSERVE_COMMON_BASE_CGROUP_LIMITS_H_
#define LLMSERVE_COMMON_BASE_CGROUP_LIMITS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace llmserve::common {

struct CgroupLimits {
  // memory.max (v2) or memory.limit_in_bytes (v1); nullopt when unlimited or unknown.
  std::optional<int64_t> memory_limit_bytes;
  // memory.current (v2) or memory.usage_in_bytes (v1).
  std::optional<int64_t> memory_usage_bytes;
  // cpu.max quota / period (v2) or cfs_quota_us / cfs_period_us (v1), e.g. 2.5; nullopt when
  // unlimited or unknown.
  std::optional<double> cpu_quota;
};

// The limits of this process's cgroup: its path comes from `proc_self_cgroup` and the files from
// under `cgroup_root` (parameters so that tests can give fakes).
CgroupLimits ReadCgroupLimits(const std::string& cgroup_root = "/sys/fs/cgroup",
                              const std::string& proc_self_cgroup = "/proc/self/cgroup");

// What may still be allocated: `mem_available` (from /proc/meminfo) capped by the room left under
// the cgroup's memory limit.
int64_t MemoryAvailableToProcess(int64_t mem_available, const CgroupLimits& limits);

// Threads worth running: `cpus` (the CPUs this process may run on) capped by the CPU quota,
// rounded up, at least 1.
int UsableCpus(int cpus, const CgroupLimits& limits);

// UsableCpus of sched_getaffinity's count and this process's cgroup limits.
int UsableCpusOfThisProcess();

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_CGROUP_LIMITS_H_
