// The CUDA emulator's own semantics, in CUDA source that goes through the same rewrite and
// forced include as the backend's .cu files (tests/cuda_emu/CMakeLists.txt): barriers over the live
// threads of a block, warp shuffles with CUDA's width and out-of-segment rules, faults for
// deadlocks and undefined shuffles, and the launch-configuration checks.

#include <cuda_runtime_api.h>

#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_emu/executor.h"

namespace llmserve::cuda_emu {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// Each thread writes its index, then reads its neighbour's: right only after the barrier.
__global__ void NeighbourKernel(int* out, bool barrier) {
  __shared__ int values[256];
  const int tid = threadIdx.x;
  values[tid] = tid + 1000 * blockIdx.x;
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + tid] = values[(tid + 1) % blockDim.x];
}

std::vector<int> RunNeighbour(bool barrier) {
  std::vector<int> out(2 * 256, -1);
  NeighbourKernel<<<2, 256>>>(out.data(), barrier);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out;
}

TEST(EmulatorTest, BarrierMakesEveryWriteVisible) {
  const std::vector<int> out = RunNeighbour(true);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 256; ++t) ASSERT_EQ(out[b * 256 + t], (t + 1) % 256 + 1000 * b);
  }
}

TEST(EmulatorTest, MissingBarrierGivesWrongAnswers) {
  const std::vector<int> out = RunNeighbour(false);
  int wrong = 0;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 256; ++t) wrong += out[b * 256 + t] != (t + 1) % 256 + 1000 * b;
  }
  EXPECT_GT(wrong, 0) << "threads of a block must not run one after another to completion";
}

// Threads that return early leave the barrier; the rest meet there and go on.
__global__ void EarlyExitKernel(int* out) {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  if (threadIdx.x % 3 == 0) return;
  atomicAdd(&total, 1);
  __syncthreads();
  out[threadIdx.x] = total;
}

TEST(EmulatorTest, ReturnedThreadsLeaveTheBarrier) {
  std::vector<int> out(96, -1);
  EarlyExitKernel<<<1, 96>>>(out.data());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int t = 0; t < 96; ++t) EXPECT_EQ(out[t], t % 3 == 0 ? -1 : 64) << t;
}

__global__ void ShuffleKernel(int* out, int width) {
  const int lane = threadIdx.x % 32;
  const int v = 100 + threadIdx.x;
  int* row = out + threadIdx.x * 4;
  row[0] = __shfl_xor_sync(kFull, v, 5, width);
  row[1] = __shfl_down_sync(kFull, v, 3, width);
  row[2] = __shfl_up_sync(kFull, v, 2, width);
  row[3] = __shfl_sync(kFull, v, lane + 3, width);
}

TEST(EmulatorTest, ShufflesFollowCudasSegmentRules) {
  for (const int width : {32, 16, 8}) {
    std::vector<int> out(64 * 4, -1);
    ShuffleKernel<<<1, 64>>>(out.data(), width);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, warp_base = t - lane, first = lane / width * width;
      const int last = first + width - 1;
      const int xor_source = (lane ^ 5) <= last ? lane ^ 5 : lane;
      const int down_source = lane + 3 <= last ? lane + 3 : lane;
      const int up_source = lane - 2 >= first ? lane - 2 : lane;
      const int index_source = first + (lane + 3) % width;
      EXPECT_EQ(out[t * 4 + 0], 100 + warp_base + xor_source) << "xor, width " << width;
      EXPECT_EQ(out[t * 4 + 1], 100 + warp_base + down_source) << "down, width " << width;
      EXPECT_EQ(out[t * 4 + 2], 100 + warp_base + up_source) << "up, width " << width;
      EXPECT_EQ(out[t * 4 + 3], 100 + warp_base + index_source) << "index, width " << width;
    }
  }
}

// Lane 0 waits in a shuffle for lane 1, which waits at the barrier for lane 0: a hang on a GPU.
__global__ void DeadlockKernel(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x == 0) v = __shfl_xor_sync(kFull, v, 1);
  __syncthreads();
  out[threadIdx.x] = v;
}

TEST(EmulatorTest, DeadlockIsAFaultThatNamesTheWaiters) {
  std::vector<float> out(64);
  DeadlockKernel<<<1, 64>>>(out.data());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  const std::string diagnostic = LastDiagnostic();
  EXPECT_NE(diagnostic.find("deadlock: 63 of 64 live threads wait at __syncthreads"),
            std::string::npos)
      << diagnostic;
  EXPECT_NE(diagnostic.find("thread (0,0,0) (warp 0 lane 0) waits in __shfl_xor_sync"),
            std::string::npos)
      << diagnostic;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "a fault is reported once";
}

// Lanes 16..31 have returned; lanes 0..15 read them through a full-mask shuffle.
__global__ void ExitedLaneKernel(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(kFull, 1.0f, 16);
}

TEST(EmulatorTest, ShuffleFromAnExitedLaneIsAFault) {
  std::vector<float> out(32);
  ExitedLaneKernel<<<1, 32>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastDiagnostic().find("reads lane 16, which has exited"), std::string::npos)
      << LastDiagnostic();
}

__global__ void SumKernel(const float* in, float* out) {
  extern __shared__ float partial[];
  const int tid = threadIdx.x;
  partial[tid] = in[blockIdx.x * blockDim.x + tid];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    __syncthreads();
  }
  if (tid == 0) atomicAdd(out, partial[0]);
}

TEST(EmulatorTest, DynamicSharedMemoryAndAtomics) {
  std::vector<float> in(8 * 128);
  std::iota(in.begin(), in.end(), 0.0f);
  float out = 0;
  SumKernel<<<8, 128, 128 * sizeof(float)>>>(in.data(), &out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out, 1023.0f * 1024 / 2);
}

__global__ void EmptyKernel() {}

TEST(EmulatorTest, LaunchLimitsAreChecked) {
  EmptyKernel<<<1, 1025>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EmptyKernel<<<1, 1024>>>();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // Past 48 KiB of dynamic shared memory only after cudaFuncSetAttribute allowed it.
  EmptyKernel<<<1, 32, 64 * 1024>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_NE(LastDiagnostic().find("65536 bytes of dynamic shared memory asked, 49152 allowed"),
            std::string::npos)
      << LastDiagnostic();
  ASSERT_EQ(
      cudaFuncSetAttribute(EmptyKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
      cudaSuccess);
  EmptyKernel<<<1, 32, 64 * 1024>>>();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(
      cudaFuncSetAttribute(EmptyKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
      cudaErrorInvalidValue);
}

}  // namespace
}  // namespace llmserve::cuda_emu
