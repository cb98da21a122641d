// Memory for the large buffers a decode step streams through (model weights, the KV cache), on
// transparent huge pages where the kernel offers them (THP "always" or "madvise").
//
// Decoding one token reads every weight byte once. In 4 KiB pages that is a TLB miss and a page
// walk every 4 KiB of the stream; on 2 MiB pages an int8 model decoded a fifth faster on the same
// machine (docs/engine.md has the figures). The kernel backs a 2 MiB extent with a huge page only
// when the whole aligned extent lies in one madvise'd mapping, and most projections are smaller
// than that (a 576 × 576 int8 matrix is 324 KiB), so buffers share mappings: they are carved one
// after another out of 2 MiB-aligned chunks of kChunkBytes (a buffer of half that or more gets a
// mapping of its own), and a chunk is unmapped when its last buffer is freed. Carved space is never
// handed out twice, so every buffer starts zeroed; a freed buffer's whole pages go back to the
// system at once (MADV_DONTNEED), so load-time temporaries leave no resident holes behind. A
// 64-byte header before each buffer names the heap that releases it: the CUDA backend plugin
// links its own copy of this file, and a Tensor made on one side may be freed on the other.
//
// Thread-safe: a mutex guards the chunk table. Allocating and freeing make system calls under it:
// they belong to loading and unloading, never to the decode path.

#ifndef LLMSERVE_COMMON_BASE_HUGE_PAGE_MEMORY_H_
#define LLMSERVE_COMMON_BASE_HUGE_PAGE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace llmserve {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kHugePageChunkBytes = size_t{64} << 20;

// `bytes` (> 0) of zeroed memory aligned to 64 bytes, on a mapping advised for huge pages; nullptr
// when the system cannot map it.
void* AllocateHugePageMemory(size_t bytes);

// Frees a buffer from AllocateHugePageMemory; null is ignored. Anything else is a bug (CHECKed).
void FreeHugePageMemory(void* p);

struct HugePageMemoryStats {
  int64_t chunks = 0;        // mappings held
  int64_t buffers = 0;       // buffers not yet freed
  int64_t mapped_bytes = 0;  // the chunks' size (virtual; resident only where touched)
};
HugePageMemoryStats GetHugePageMemoryStats();

// The kernel's transparent huge page mode, the bracketed word of `path` ("always", "madvise" or
// "never"); empty when the file cannot be read (no THP support) or names none.
std::string TransparentHugePagesMode(
    const std::string& path = "/sys/kernel/mm/transparent_hugepage/enabled");

// Deleter for std::unique_ptr of a buffer from AllocateHugePageMemory.
struct HugePageMemoryDeleter {
  void operator()(void* p) const { FreeHugePageMemory(p); }
};

}  // namespace llmserve

#endif  // LLMSERVE_COMMON_BASE_HUGE_PAGE_MEMORY_H_
