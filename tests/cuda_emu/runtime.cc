// The CUDA runtime API as the emulator's tests need it, over host memory: one H100-like device,
// allocations from the host heap, copies and sets done at once, streams and events that order
// nothing (every call finishes before it returns, kernel launches included). The declarations
// are CUDA's own (cuda_runtime_api.h), so a signature that drifts fails to compile.
//
// Errors behave as on a GPU where the tests can see it: a bad launch configuration is returned
// by cudaGetLastError; a fault inside a kernel by the next synchronising call (cudaMemcpy,
// cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize) or cudaGetLastError.
// Unlike a GPU the fault is not sticky: it is reported once, so one failing test does not fail
// the tests after it.
//
// Thread-safe.

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "tests/cuda_emu/executor.h"

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point time;
};

namespace {

namespace emu = ::llmserve::cuda_emu;

constexpr size_t kTotalMemory = size_t{80} << 30;

std::mutex g_mutex;
std::unordered_map<void*, size_t>& Allocations() {
  static auto* allocations = new std::unordered_map<void*, size_t>();
  return *allocations;
}
size_t g_allocated = 0;  // guarded by g_mutex

cudaError_t Allocate(void** ptr, size_t size) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (size > kTotalMemory - g_allocated) return cudaErrorMemoryAllocation;
  // 256-byte aligned, as cudaMalloc's.
  void* p = std::aligned_alloc(256, (std::max<size_t>(size, 1) + 255) / 256 * 256);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  Allocations()[p] = size;
  g_allocated += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t Free(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = Allocations().find(ptr);
  if (it == Allocations().end()) return cudaErrorInvalidValue;
  g_allocated -= it->second;
  Allocations().erase(it);
  std::free(ptr);
  return cudaSuccess;
}

// The error of a call that waits for the device: a fault of an earlier kernel, else success.
cudaError_t Synchronize() { return emu::TakeFault(); }

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "llmserve CUDA emulator (H100-like)", sizeof(prop->name) - 1);
  prop->totalGlobalMem = kTotalMemory;
  prop->sharedMemPerBlock = emu::kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = emu::kMaxSharedBytesOptin;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = emu::kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  std::lock_guard<std::mutex> lock(g_mutex);
  *free = kTotalMemory - g_allocated;
  *total = kTotalMemory;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) { return Allocate(ptr, size); }
cudaError_t cudaFree(void* ptr) { return Free(ptr); }
cudaError_t cudaMallocHost(void** ptr, size_t size) { return Allocate(ptr, size); }
cudaError_t cudaFreeHost(void* ptr) { return Free(ptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  const cudaError_t fault = Synchronize();
  if (fault != cudaSuccess) return fault;
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind,
                            cudaStream_t) {
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new CUstream_st{0};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return Synchronize(); }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return Synchronize(); }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st{};
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st{};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return Synchronize(); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t launch = emu::TakeLaunchError();
  return launch != cudaSuccess ? launch : emu::TakeFault();
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || size_t(value) > emu::kMaxSharedBytesOptin) return cudaErrorInvalidValue;
  emu::SetMaxDynamicShared(func, size_t(value));
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define LLMSERVE_EMU_ERROR(name, text) \
  case name:                           \
    return #name;
#include "tests/cuda_emu/errors.inc"
#undef LLMSERVE_EMU_ERROR
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define LLMSERVE_EMU_ERROR(name, text) \
  case name:                           \
    return text;
#include "tests/cuda_emu/errors.inc"
#undef LLMSERVE_EMU_ERROR
    default:
      return "unknown error";
  }
}

}  // extern "C"
