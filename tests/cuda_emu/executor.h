// The CUDA emulator's executor: runs a kernel launch on the calling OS thread, blocks one after
// another, the threads of a block as fibers (fiber.h) that meet at __syncthreads and at warp
// operations exactly as CUDA defines them; and the device-side built-ins that cuda_emu.h maps the
// kernel language onto.
//
// What it checks, each a launch error or a kernel fault (reported on stderr and returned by the
// next synchronising call, as a fault is on a GPU) instead of a wrong answer or a hang:
//  - the launch configuration (threads per block <= 1024, grid limits, dynamic shared memory
//    within 48 KiB or what cudaFuncSetAttribute allowed for that kernel, at most the device's
//    opt-in limit);
//  - a barrier or warp operation that not all the threads that must reach it reach (a deadlock
//    on a GPU): which threads wait where, and which never came;
//  - a shuffle that reads a lane outside its mask or one that has exited (an undefined value),
//    a warp operation whose mask leaves out the calling lane, a width that is not a power of two.
//
// Threads of a block run in turn until they wait, warp by warp: the lanes of a warp take turns
// at its warp operations, and the next warp runs only when every lane of this one waits at a
// barrier or has exited. Blocks with an odd linear index run their warps and lanes in reverse
// order, so that a missing barrier finds the reader before the writer in one block or another.
// Under ThreadSanitizer __syncthreads and __syncwarp are the only ordering between threads (a
// shuffle orders no memory), so an access pair that no barrier orders is a reported race.
//
// Thread-safe: launches from several OS threads run one at a time.

#ifndef LLMSERVE_TESTS_CUDA_EMU_EXECUTOR_H_
#define LLMSERVE_TESTS_CUDA_EMU_EXECUTOR_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"

namespace llmserve::cuda_emu {

// The device limits the emulator enforces (an H100 SXM's).
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr size_t kDefaultSharedBytes = 48 * 1024;
inline constexpr size_t kMaxSharedBytesOptin = 227 * 1024;

// The built-in variables of the running CUDA thread and its block.
struct ThreadBuiltins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// Points at the running CUDA thread's built-ins while a kernel runs on this OS thread.
inline thread_local const ThreadBuiltins* t_builtins = nullptr;

struct LaunchConfig {
  const char* kernel_name;  // as written at the launch site
  const void* kernel;       // the function, the key of cudaFuncSetAttribute
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
};

// Runs `thread_body` once per CUDA thread of the launch (cuda_emu.h's Launch calls it). A bad
// configuration leaves a launch error for cudaGetLastError; a fault ends the launch and leaves
// the error for the next synchronising call.
void RunKernel(const LaunchConfig& config, absl::FunctionRef<void()> thread_body);

// Device built-ins (cuda_emu.h wraps them in CUDA's names).
void SyncThreads();
enum class WarpOp { kSync, kShuffleIndex, kShuffleUp, kShuffleDown, kShuffleXor };
// The value of `value` in the source lane that `op` and `arg` name (kSync: `value` itself).
uint64_t WarpExchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
// The launch's dynamic shared memory (extern __shared__), filled with 0xff bytes (a NaN in every
// float) before each block so that a read of what no thread wrote shows.
void* DynamicShared();

// Errors for the fake runtime (runtime.cc): the launch-configuration error of the last launch
// (cleared on reading), the fault of a kernel (cleared on reading).
cudaError_t TakeLaunchError();
cudaError_t TakeFault();
// The message of the last launch error or fault, for the emulator's own tests.
std::string LastDiagnostic();
// Records the dynamic shared memory cudaFuncSetAttribute allowed for `kernel`.
void SetMaxDynamicShared(const void* kernel, size_t bytes);

}  // namespace llmserve::cuda_emu

#endif  // LLMSERVE_TESTS_CUDA_EMU_EXECUTOR_H_
