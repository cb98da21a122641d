// ReadCgroupLimits on fake cgroup trees (v2 with and without a namespace, v1, none), and the
// arithmetic that caps memory and threads with them.

#include "common/base/cgroup_limits.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::common {
namespace {

class CgroupLimitsTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(dir_.path()) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  CgroupLimits Read() {
    return ReadCgroupLimits(dir_.path() + "/cgroup", dir_.path() + "/proc_self_cgroup");
  }

  ::llmserve::testing::ScopedTempDir dir_{"cgroup_limits_test"};
};

TEST_F(CgroupLimitsTest, V2InsideANamespacedContainer) {
  Write("proc_self_cgroup", "0::/\n");
  Write("cgroup/memory.max", "8589934592\n");
  Write("cgroup/memory.current", "1073741824\n");
  Write("cgroup/cpu.max", "250000 100000\n");
  const CgroupLimits limits = Read();
  EXPECT_EQ(limits.memory_limit_bytes, int64_t{8} << 30);
  EXPECT_EQ(limits.memory_usage_bytes, int64_t{1} << 30);
  ASSERT_TRUE(limits.cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*limits.cpu_quota, 2.5);
  EXPECT_EQ(MemoryAvailableToProcess(int64_t{500} << 30, limits), int64_t{7} << 30);
  EXPECT_EQ(MemoryAvailableToProcess(int64_t{2} << 30, limits), int64_t{2} << 30);
  EXPECT_EQ(UsableCpus(64, limits), 3);
  EXPECT_EQ(UsableCpus(2, limits), 2);
}

TEST_F(CgroupLimitsTest, V2GroupOfTheProcessWithoutANamespace) {
  Write("proc_self_cgroup", "0::/kubepods/pod1/container\n");
  Write("cgroup/memory.max", "max\n");  // the root: must not be taken for the process's group
  Write("cgroup/kubepods/pod1/container/memory.max", "4294967296\n");
  Write("cgroup/kubepods/pod1/container/memory.current", "0\n");
  Write("cgroup/kubepods/pod1/container/cpu.max", "max 100000\n");
  const CgroupLimits limits = Read();
  EXPECT_EQ(limits.memory_limit_bytes, int64_t{4} << 30);
  EXPECT_FALSE(limits.cpu_quota.has_value());
  EXPECT_EQ(UsableCpus(16, limits), 16);
}

TEST_F(CgroupLimitsTest, V2Unlimited) {
  Write("proc_self_cgroup", "0::/\n");
  Write("cgroup/memory.max", "max\n");
  Write("cgroup/memory.current", "123\n");
  Write("cgroup/cpu.max", "max 100000\n");
  const CgroupLimits limits = Read();
  EXPECT_FALSE(limits.memory_limit_bytes.has_value());
  EXPECT_EQ(MemoryAvailableToProcess(1000, limits), 1000);
}

TEST_F(CgroupLimitsTest, V1Hybrid) {
  // As on hosts with both hierarchies: "0::/" is there, but the controllers are v1.
  Write("proc_self_cgroup", "4:memory:/job\n1:cpu,cpuacct:/job\n0::/\n");
  Write("cgroup/memory/job/memory.limit_in_bytes", "2147483648\n");
  Write("cgroup/memory/job/memory.usage_in_bytes", "1073741824\n");
  Write("cgroup/cpu/job/cpu.cfs_quota_us", "150000\n");
  Write("cgroup/cpu/job/cpu.cfs_period_us", "100000\n");
  const CgroupLimits limits = Read();
  EXPECT_EQ(limits.memory_limit_bytes, int64_t{2} << 30);
  EXPECT_EQ(MemoryAvailableToProcess(int64_t{100} << 30, limits), int64_t{1} << 30);
  EXPECT_EQ(UsableCpus(8, limits), 2);
}

TEST_F(CgroupLimitsTest, V1UnlimitedReadsAsNoLimit) {
  Write("proc_self_cgroup", "4:memory:/\n1:cpu:/\n");
  Write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  Write("cgroup/cpu/cpu.cfs_period_us", "100000\n");
  const CgroupLimits limits = Read();
  EXPECT_FALSE(limits.memory_limit_bytes.has_value());
  EXPECT_FALSE(limits.cpu_quota.has_value());
}

TEST_F(CgroupLimitsTest, NothingReadableMeansNoLimit) {
  const CgroupLimits limits = Read();
  EXPECT_FALSE(limits.memory_limit_bytes.has_value());
  EXPECT_FALSE(limits.cpu_quota.has_value());
  EXPECT_EQ(UsableCpus(0, limits), 1);
  // A usage over the limit leaves no room, never a negative one.
  EXPECT_EQ(MemoryAvailableToProcess(100, {.memory_limit_bytes = 10, .memory_usage_bytes = 20}), 0);
}

TEST_F(CgroupLimitsTest, ThisProcessHasAtLeastOneCpu) { EXPECT_GE(UsableCpusOfThisProcess(), 1); }

}  // namespace
}  // namespace llmserve::common
