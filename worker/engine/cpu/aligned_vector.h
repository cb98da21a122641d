// A std::vector whose storage starts on a cache line: the vector kernels load activation rows
// whole, and a 64-byte load that straddles two lines costs twice (glibc's malloc aligns to 16).
//
// Thread-compatible, like std::vector.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_ALIGNED_VECTOR_H_
#define LLMSERVE_WORKER_ENGINE_CPU_ALIGNED_VECTOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace llmserve::worker::cpu {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}

  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }

  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_ALIGNED_VECTOR_H_
