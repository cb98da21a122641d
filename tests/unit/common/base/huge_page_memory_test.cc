#include "common/base/huge_page_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/scoped_temp_dir.h"

namespace llmserve {
namespace {

bool AllBytesAre(const void* p, size_t n, unsigned char value) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

// The kB of huge pages backing the mapping that holds `p`, from /proc/self/smaps; -1 if not found.
int64_t AnonHugePagesKb(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address && address < end;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stoll(line.substr(std::strlen("AnonHugePages:")));
    }
  }
  return -1;
}

std::string FileContents(const std::string& path) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

int64_t VmStat(const std::string& name) {
  std::istringstream vmstat(FileContents("/proc/vmstat"));
  std::string key;
  int64_t value = 0;
  while (vmstat >> key >> value) {
    if (key == name) return value;
  }
  return 0;
}

TEST(HugePageMemoryTest, BuffersAreAlignedZeroedAndDisjoint) {
  const HugePageMemoryStats before = GetHugePageMemoryStats();
  const std::vector<size_t> sizes = {1, 100, 4096, 300 << 10, 5 << 20, 100};
  std::vector<void*> buffers;
  for (size_t i = 0; i < sizes.size(); ++i) {
    void* p = AllocateHugePageMemory(sizes[i]);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << sizes[i];
    EXPECT_TRUE(AllBytesAre(p, sizes[i], 0)) << sizes[i];
    std::memset(p, static_cast<int>(i + 1), sizes[i]);
    buffers.push_back(p);
  }
  EXPECT_EQ(GetHugePageMemoryStats().buffers, before.buffers + static_cast<int64_t>(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(AllBytesAre(buffers[i], sizes[i], static_cast<unsigned char>(i + 1))) << i;
  }
  for (void* p : buffers) FreeHugePageMemory(p);
  const HugePageMemoryStats after = GetHugePageMemoryStats();
  EXPECT_EQ(after.buffers, before.buffers);
  EXPECT_EQ(after.chunks, before.chunks);
}

TEST(HugePageMemoryTest, SmallBuffersShareAChunkThatTheirLastFreeUnmaps) {
  const HugePageMemoryStats before = GetHugePageMemoryStats();
  std::vector<void*> buffers;
  for (int i = 0; i < 8; ++i) buffers.push_back(AllocateHugePageMemory(300 << 10));
  // 2.4 MiB in all: one chunk, or two where an earlier chunk's tail took the first few.
  const HugePageMemoryStats during = GetHugePageMemoryStats();
  EXPECT_LE(during.chunks, before.chunks + 1);
  EXPECT_EQ(during.buffers, before.buffers + 8);
  for (void* p : buffers) FreeHugePageMemory(p);
  EXPECT_EQ(GetHugePageMemoryStats().chunks, before.chunks);
  EXPECT_EQ(GetHugePageMemoryStats().mapped_bytes, before.mapped_bytes);
}

TEST(HugePageMemoryTest, ALargeBufferGetsAMappingOfItsOwnRoundedToHugePages) {
  const HugePageMemoryStats before = GetHugePageMemoryStats();
  const size_t bytes = kHugePageChunkBytes / 2 + 1;
  void* p = AllocateHugePageMemory(bytes);
  ASSERT_NE(p, nullptr);
  const HugePageMemoryStats during = GetHugePageMemoryStats();
  EXPECT_EQ(during.chunks, before.chunks + 1);
  // The buffer and its 64-byte header, in whole huge pages.
  EXPECT_EQ(during.mapped_bytes - before.mapped_bytes, static_cast<int64_t>(17 * kHugePageBytes));
  // A small buffer after it still comes from a shared chunk, not from the large one's tail.
  void* small = AllocateHugePageMemory(1000);
  EXPECT_TRUE(reinterpret_cast<uintptr_t>(small) < reinterpret_cast<uintptr_t>(p) ||
              reinterpret_cast<uintptr_t>(small) >= reinterpret_cast<uintptr_t>(p) + bytes);
  FreeHugePageMemory(small);
  FreeHugePageMemory(p);
  EXPECT_EQ(GetHugePageMemoryStats().mapped_bytes, before.mapped_bytes);
}

TEST(HugePageMemoryTest, FreeingABufferKeepsItsNeighboursPagesAndContents) {
  // Neighbours share the pages at the buffer's edges; only its whole pages go back to the system.
  void* keep_before = AllocateHugePageMemory(5000);
  void* freed = AllocateHugePageMemory(3 * 4096 + 100);
  void* keep_after = AllocateHugePageMemory(5000);
  std::memset(keep_before, 0xab, 5000);
  std::memset(freed, 0xcd, 3 * 4096 + 100);
  std::memset(keep_after, 0xef, 5000);
  FreeHugePageMemory(freed);
  EXPECT_TRUE(AllBytesAre(keep_before, 5000, 0xab));
  EXPECT_TRUE(AllBytesAre(keep_after, 5000, 0xef));
  FreeHugePageMemory(keep_before);
  FreeHugePageMemory(keep_after);
}

TEST(HugePageMemoryTest, AnImpossibleSizeIsNullNotAWrappedSmallBuffer) {
  EXPECT_EQ(AllocateHugePageMemory(std::numeric_limits<size_t>::max()), nullptr);
  EXPECT_EQ(AllocateHugePageMemory(std::numeric_limits<size_t>::max() - 100), nullptr);
  EXPECT_EQ(AllocateHugePageMemory(size_t{1} << 62), nullptr);
}

TEST(HugePageMemoryTest, NullIsIgnoredAndAForeignPointerIsABug) {
  FreeHugePageMemory(nullptr);
  int on_stack = 0;
  EXPECT_DEATH(FreeHugePageMemory(&on_stack), "did not give");
}

TEST(HugePageMemoryTest, TheModeIsTheBracketedWordOfTheKernelsSetting) {
  testing::ScopedTempDir dir;
  std::ofstream(dir.File("enabled")) << "always [madvise] never\n";
  EXPECT_EQ(TransparentHugePagesMode(dir.File("enabled")), "madvise");
  std::ofstream(dir.File("never")) << "always madvise [never]\n";
  EXPECT_EQ(TransparentHugePagesMode(dir.File("never")), "never");
  std::ofstream(dir.File("garbled")) << "always madvise never\n";
  EXPECT_EQ(TransparentHugePagesMode(dir.File("garbled")), "");
  EXPECT_EQ(TransparentHugePagesMode(dir.File("missing")), "");
}

TEST(HugePageMemoryTest, ChunksAreBackedByHugePagesWhereTheKernelOffersThem) {
  const std::string enabled = TransparentHugePagesMode();
  if (enabled != "always" && enabled != "madvise") {
    GTEST_SKIP() << "transparent huge pages are off on this machine: '" << enabled << "'";
  }
  const int64_t fallbacks_before = VmStat("thp_fault_fallback");
  const size_t bytes = 8 << 20;
  void* p = AllocateHugePageMemory(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, bytes);
  const int64_t huge_kb = AnonHugePagesKb(p);
  if (huge_kb == 0 && VmStat("thp_fault_fallback") > fallbacks_before) {
    FreeHugePageMemory(p);
    GTEST_SKIP() << "the kernel had no free huge page (thp_fault_fallback rose)";
  }
  // At least the 2 MiB extents wholly inside the buffer.
  EXPECT_GE(huge_kb, 3 * 2048) << "THP: " << enabled;
  FreeHugePageMemory(p);
}

}  // namespace
}  // namespace llmserve
