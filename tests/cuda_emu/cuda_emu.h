// The CUDA kernel language on the host, for the CUDA emulator (docs/cuda.md, "The CPU
// emulator"). Force-included (-include) into the backend's .cu files after
// rewrite_launches.py turned their `kernel<<<grid, block, shared, stream>>>(args)` launches into
// Launch() calls, so that the files compile as plain C++ and run on executor.h.
//
// What nvcc puts in front of every .cu file comes first (cuda_runtime.h, with CUDA's own
// __half and __nv_bfloat16 and their conversions, which compile for the host); then the
// execution-space keywords become nothing, `__shared__` becomes `static` (blocks run one after
// another, so one copy is the block's), and the built-in variables, barriers, warp operations and
// atomics map onto the executor.

#ifndef LLMSERVE_TESTS_CUDA_EMU_CUDA_EMU_H_
#define LLMSERVE_TESTS_CUDA_EMU_CUDA_EMU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/cuda_emu/executor.h"

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__ static
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict

#define threadIdx (::llmserve::cuda_emu::t_builtins->thread_idx)
#define blockIdx (::llmserve::cuda_emu::t_builtins->block_idx)
#define blockDim (::llmserve::cuda_emu::t_builtins->block_dim)
#define gridDim (::llmserve::cuda_emu::t_builtins->grid_dim)
#define warpSize 32

namespace llmserve::cuda_emu {

template <typename T>
uint64_t ToBits(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>,
                "warp shuffles move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// What a rewritten launch calls: copies the arguments into the kernel's parameter types once (as
// cudaLaunchKernel does) and runs every thread of the grid on them.
template <typename... Params, typename... Args>
void Launch(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
  const std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  RunKernel({kernel_name, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream},
            [&] { std::apply(kernel, params); });
}

}  // namespace llmserve::cuda_emu

// The typed overload that cuda_runtime.h gives nvcc's translation units only.
template <typename... Params>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(Params...), cudaFuncAttribute attribute,
                                        int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

inline void __syncthreads() { ::llmserve::cuda_emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::llmserve::cuda_emu::WarpExchange(::llmserve::cuda_emu::WarpOp::kSync, mask, 0, 0, 32);
}
// __threadfence*: the executor switches threads only at barriers and warp operations, so every
// write is visible to every thread that runs after it.
inline void __threadfence() {}
inline void __threadfence_block() {}

#define LLMSERVE_EMU_SHUFFLE(name, op, arg_type)                                   \
  template <typename T>                                                            \
  inline T name(unsigned mask, T var, arg_type arg, int width = 32) {              \
    return ::llmserve::cuda_emu::FromBits<T>(::llmserve::cuda_emu::WarpExchange(   \
        ::llmserve::cuda_emu::WarpOp::op, mask, ::llmserve::cuda_emu::ToBits(var), \
        static_cast<int>(arg), width));                                            \
  }
LLMSERVE_EMU_SHUFFLE(__shfl_sync, kShuffleIndex, int)
LLMSERVE_EMU_SHUFFLE(__shfl_up_sync, kShuffleUp, unsigned)
LLMSERVE_EMU_SHUFFLE(__shfl_down_sync, kShuffleDown, unsigned)
LLMSERVE_EMU_SHUFFLE(__shfl_xor_sync, kShuffleXor, int)
#undef LLMSERVE_EMU_SHUFFLE

// Atomics: real atomic operations, so that ThreadSanitizer sees them as such.
template <typename T>
inline T atomicAdd(T* address, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    T old, desired;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    do {
      desired = old + value;
    } while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
    return old;
  } else {
    return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
  }
}
template <typename T>
inline T atomicSub(T* address, T value) {
  return __atomic_fetch_sub(address, value, __ATOMIC_SEQ_CST);
}
template <typename T>
inline T atomicExch(T* address, T value) {
  return __atomic_exchange_n(address, value, __ATOMIC_SEQ_CST);
}
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
template <typename T>
inline T atomicMax(T* address, T value) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (old < value && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <typename T>
inline T atomicMin(T* address, T value) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (old > value && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_SEQ_CST)) {
  }
  return old;
}

// Device math that the host's <cmath> lacks.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// CUDA's integer and float min/max overloads in the global namespace.
#define LLMSERVE_EMU_MINMAX(type)                           \
  inline type min(type a, type b) { return b < a ? b : a; } \
  inline type max(type a, type b) { return a < b ? b : a; }
LLMSERVE_EMU_MINMAX(int)
LLMSERVE_EMU_MINMAX(unsigned)
LLMSERVE_EMU_MINMAX(long)
LLMSERVE_EMU_MINMAX(unsigned long)
LLMSERVE_EMU_MINMAX(long long)
LLMSERVE_EMU_MINMAX(unsigned long long)
#undef LLMSERVE_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

#endif  // LLMSERVE_TESTS_CUDA_EMU_CUDA_EMU_H_
