// The CUDA backend's unmerged LoRA kernels (Punica's BGMV shape: each token gathers its own
// adapter's matrices): after a projection's GEMM, every (token, adapted module) pair adds
// B (A x) to its row of the projection's f32 output, in two launches: shrink (x down to `rank`
// values per pair) and expand (those values times B^T into the output columns). A batch mixes
// any adapters and the base model: a pair list names, per pair, its adapter's matrices.
//
// Nvcc-safe like kernels.h: only the CUDA runtime API.
//
// Thread-safe: launchers keep no state.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_LORA_KERNELS_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_LORA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {

// One adapted module of one token's projection.
struct LoraPair {
  const float* a;    // [rank, in] f32
  const float* b_t;  // [rank, out] f32, B transposed with the adapter's scaling folded in
  int32_t token;     // the row of x and y
  int32_t in;
  int32_t out;
  int32_t rank;
  int32_t row_offset;  // the module's first column in y's row
  int32_t s_offset;    // its `rank` shrink values in s
};

struct LoraShrinkParams {
  const LoraPair* pairs;  // [num_pairs]
  int32_t num_pairs;
  const void* x;  // [tokens, x_width] DeviceDType, the projection's input
  int32_t x_width;
  float* s;  // shrink values, at each pair's s_offset
};
// s[p.s_offset + r] = A[r] . x[p.token] for every pair p and r < p.rank: one block per pair, a
// warp per rank row, f32 sums.
cudaError_t LaunchLoraShrink(DeviceDType dtype, const LoraShrinkParams& p, cudaStream_t stream);

struct LoraExpandParams {
  const LoraPair* pairs;  // [num_pairs]
  int32_t num_pairs;
  const float* s;  // what shrink wrote
  float* y;        // [tokens, y_width] f32, the projection's output
  int32_t y_width;
  int32_t max_out;  // the largest `out` of the pairs (the grid's width)
};
// y[p.token, p.row_offset + c] += sum over r of s[p.s_offset + r] * B^T[r, c] for c < p.out.
// Pairs of one token write disjoint columns (their modules' rows of a fused projection), pairs of
// different tokens different rows: no two threads write one element.
cudaError_t LaunchLoraExpand(const LoraExpandParams& p, cudaStream_t stream);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_LORA_KERNELS_H_
