#include "common/base/huge_page_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <limits>
#include <map>

#include "absl/synchronization/mutex.h"
#include "common/base/logging.h"
#include "common/base/read_file.h"

namespace llmserve {
namespace {

constexpr size_t kBufferAlignment = 64;
constexpr uintptr_t kSmallPageBytes = 4096;

// Each buffer is preceded by one of these (padded to kBufferAlignment). A shared library linked
// with its own copy of this file (the CUDA backend plugin, dlopened) has its own heap, and a
// buffer may be freed by the other copy's code (a Tensor made by one and destroyed by the other),
// so the header says which heap's code releases it.
struct BufferHeader {
  uint64_t magic;
  void (*release)(void* buffer);
};
static_assert(sizeof(BufferHeader) <= kBufferAlignment);
constexpr uint64_t kHeaderMagic = 0x6c6c6d7365727665;  // "llmserve"

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A mapping buffers are carved from (its base address is its key in Heap::chunks_).
struct Chunk {
  size_t size = 0;
  size_t used = 0;
  int64_t live_buffers = 0;
};

// Maps `size` (a multiple of kHugePageBytes) bytes at a kHugePageBytes boundary, advised for huge
// pages; 0 on failure. mmap aligns only to 4 KiB, so it maps one huge page more and trims.
uintptr_t MapAligned(size_t size) {
  const size_t padded = size + kHugePageBytes;
  void* raw = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return 0;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = RoundUp(start, kHugePageBytes);
  if (base > start) munmap(raw, base - start);
  const uintptr_t end = start + padded;
  if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  // Where THP is off ("never") the advice changes nothing: the buffer is then ordinary memory.
  madvise(reinterpret_cast<void*>(base), size, MADV_HUGEPAGE);
  return base;
}

class Heap {
 public:
  // The carved region starts with the BufferHeader; the buffer follows it.
  void* Allocate(size_t buffer_bytes, void (*release)(void*)) {
    // No mapping is that large; the rounding below would wrap.
    if (buffer_bytes > std::numeric_limits<size_t>::max() / 2) return nullptr;
    const size_t bytes =
        kBufferAlignment + RoundUp(buffer_bytes == 0 ? 1 : buffer_bytes, kBufferAlignment);
    absl::MutexLock lock(&mutex_);
    uintptr_t base = current_;
    Chunk* chunk = base == 0 ? nullptr : &chunks_.at(base);
    if (chunk == nullptr || chunk->size - chunk->used < bytes) {
      const bool own_mapping = bytes >= kHugePageChunkBytes / 2;
      const size_t size = own_mapping ? RoundUp(bytes, kHugePageBytes) : kHugePageChunkBytes;
      base = MapAligned(size);
      if (base == 0) return nullptr;
      chunk = &chunks_[base];
      chunk->size = size;
      // A buffer with its own mapping leaves the current chunk's free tail for the next ones.
      if (!own_mapping) current_ = base;
    }
    const uintptr_t p = base + chunk->used;
    chunk->used += bytes;
    ++chunk->live_buffers;
    buffers_[p] = bytes;
    *reinterpret_cast<BufferHeader*>(p) = {.magic = kHeaderMagic, .release = release};
    return reinterpret_cast<void*>(p + kBufferAlignment);
  }

  void Free(void* user_pointer) {
    const auto p = reinterpret_cast<uintptr_t>(user_pointer) - kBufferAlignment;
    absl::MutexLock lock(&mutex_);
    const auto buffer = buffers_.find(p);
    LLMSERVE_CHECK(buffer != buffers_.end()) << "FreeHugePageMemory of a pointer it did not give";
    const size_t bytes = buffer->second;
    buffers_.erase(buffer);
    auto chunk = std::prev(chunks_.upper_bound(p));
    // The buffer's whole pages are its own (neighbours start and end in the pages at its edges).
    const uintptr_t first_page = RoundUp(p, kSmallPageBytes);
    const uintptr_t end_page = (p + bytes) / kSmallPageBytes * kSmallPageBytes;
    if (--chunk->second.live_buffers == 0) {
      munmap(reinterpret_cast<void*>(chunk->first), chunk->second.size);
      if (chunk->first == current_) current_ = 0;
      chunks_.erase(chunk);
    } else if (end_page > first_page) {
      madvise(reinterpret_cast<void*>(first_page), end_page - first_page, MADV_DONTNEED);
    }
  }

  HugePageMemoryStats Stats() {
    absl::MutexLock lock(&mutex_);
    HugePageMemoryStats stats;
    stats.chunks = static_cast<int64_t>(chunks_.size());
    stats.buffers = static_cast<int64_t>(buffers_.size());
    for (const auto& [base, chunk] : chunks_) stats.mapped_bytes += chunk.size;
    return stats;
  }

 private:
  absl::Mutex mutex_;
  // By base address, so that a buffer's chunk is the last one at or below it.
  std::map<uintptr_t, Chunk> chunks_ ABSL_GUARDED_BY(mutex_);
  std::map<uintptr_t, size_t> buffers_ ABSL_GUARDED_BY(mutex_);
  // Base of the chunk new buffers are carved from; 0 when none.
  uintptr_t current_ ABSL_GUARDED_BY(mutex_) = 0;
};

Heap& TheHeap() {
  // Never destroyed: buffers may be freed by other static objects' destructors at exit.
  static Heap* const heap = new Heap;
  return *heap;
}

void ReleaseToThisCopysHeap(void* buffer) { TheHeap().Free(buffer); }

}  // namespace

void* AllocateHugePageMemory(size_t bytes) {
  return TheHeap().Allocate(bytes, &ReleaseToThisCopysHeap);
}

void FreeHugePageMemory(void* p) {
  if (p == nullptr) return;
  const auto* header =
      reinterpret_cast<const BufferHeader*>(static_cast<unsigned char*>(p) - kBufferAlignment);
  LLMSERVE_CHECK(header->magic == kHeaderMagic)
      << "FreeHugePageMemory of a pointer it did not give";
  header->release(p);
}

HugePageMemoryStats GetHugePageMemoryStats() { return TheHeap().Stats(); }

std::string TransparentHugePagesMode(const std::string& path) {
  const absl::StatusOr<std::string> read = common::ReadFileUpTo(path, 4096, "THP setting");
  if (!read.ok()) return "";
  const std::string& text = *read;
  const size_t open = text.find('['), close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return text.substr(open + 1, close - open - 1);
}

}  // namespace llmserve
