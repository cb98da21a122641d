// The prefill attention kernel template (see attention.h); instantiated by attention_*.cu.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_PREFILL_ATTENTION_CUH_
#define LLMSERVE_WORKER_ENGINE_CUDA_PREFILL_ATTENTION_CUH_

#include <cmath>

#include "worker/engine/cuda/attention.h"
#include "worker/engine/cuda/device_math.cuh"

namespace llmserve::worker::cuda {

inline constexpr int kPrefillThreads = 2 * kPrefillTileQ;  // two threads per query row
inline constexpr int kPrefillTileK = 32;

// Dynamic shared memory (floats): Q [kPrefillTileQ][D + 1], K [kPrefillTileK][D + 1],
// V [kPrefillTileK][D], P [kPrefillTileQ][kPrefillTileK + 1]. The +1 paddings keep the rows
// that a warp reads at once in different banks.
inline size_t PrefillSharedBytes(int head_dim) {
  return sizeof(float) *
         (size_t(kPrefillTileQ) * (head_dim + 1) + size_t(kPrefillTileK) * (head_dim + 1) +
          size_t(kPrefillTileK) * head_dim + size_t(kPrefillTileQ) * (kPrefillTileK + 1));
}

// grid (num_tiles, num_heads), kPrefillThreads threads. Thread (r, half) = (tid / 2, tid % 2)
// owns query row r: the scores of half the keys of each key tile, and the output elements
// d = 2 * dd + half.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillAttentionKernel(PrefillAttentionParams p) {
  constexpr int D = kHeadDim;
  constexpr int kQStride = D + 1, kKStride = D + 1, kPStride = kPrefillTileK + 1;
  constexpr int kKeysPerThread = kPrefillTileK / 2;
  constexpr int kOutPerThread = D / 2;
  extern __shared__ __align__(16) float shared_f[];
  float* q_s = shared_f;
  float* k_s = q_s + kPrefillTileQ * kQStride;
  float* v_s = k_s + kPrefillTileK * kKStride;
  float* p_s = v_s + kPrefillTileK * D;

  const PagedAttentionCommon& c = p.c;
  const int tile = blockIdx.x, head = blockIdx.y;
  const int seq = p.tiles[3 * tile], first = p.tiles[3 * tile + 1], count = p.tiles[3 * tile + 2];
  const int kv_head = head / (c.num_heads / c.num_kv_heads);
  const int tid = threadIdx.x, r = tid / 2, half = tid % 2;
  const int q_pos = r < count ? c.positions[first + r] : -1;  // -1: a padding row
  const int last_pos = c.positions[first + count - 1];

  for (int idx = tid; idx < kPrefillTileQ * D; idx += blockDim.x) {
    const int row = idx / D, d = idx % D;
    q_s[row * kQStride + d] =
        row < count ? c.q[int64_t{first + row} * c.q_stride + int64_t{head} * D + d] * c.scale
                    : 0.0f;
  }
  const int32_t* blocks = c.block_ids + c.block_table_start[seq];
  const T* k_cache = static_cast<const T*>(c.k_cache);
  const T* v_cache = static_cast<const T*>(c.v_cache);

  float acc[kOutPerThread];
#pragma unroll
  for (int dd = 0; dd < kOutPerThread; ++dd) acc[dd] = 0.0f;
  float row_max = -INFINITY, row_sum = 0.0f;

  for (int k0 = 0; k0 <= last_pos; k0 += kPrefillTileK) {
    const int n = min(kPrefillTileK, last_pos + 1 - k0);
    __syncthreads();  // the previous tile is no longer read (and Q is visible on the first)
    for (int idx = tid; idx < kPrefillTileK * D; idx += blockDim.x) {
      const int j = idx / D, d = idx % D;
      float key = 0.0f, value = 0.0f;
      if (j < n) {
        const int pos = k0 + j;
        const int64_t block = blocks[pos / c.block_size];
        const int64_t offset =
            ((block * c.num_kv_heads + kv_head) * c.block_size + pos % c.block_size) * int64_t{D} +
            d;
        key = ToFloat(k_cache[offset]);
        value = ToFloat(v_cache[offset]);
      }
      k_s[j * kKStride + d] = key;
      v_s[j * D + d] = value;
    }
    __syncthreads();

    float s[kKeysPerThread];
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kKeysPerThread; ++jj) {
      const int j = half * kKeysPerThread + jj;
      float dot = -INFINITY;
      if (j < n && k0 + j <= q_pos) {  // causal: keys up to the query's own position
        dot = 0.0f;
#pragma unroll 16
        for (int d = 0; d < D; ++d) dot += q_s[r * kQStride + d] * k_s[j * kKStride + d];
      }
      s[jj] = dot;
      tile_max = fmaxf(tile_max, dot);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(row_max, tile_max);
    // A padding row sees no key at all: keep its exponents finite (all zero).
    const float base = new_max == -INFINITY ? 0.0f : new_max;
    const float correction = expf(row_max - base);
    float tile_sum = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kKeysPerThread; ++jj) {
      const float e = expf(s[jj] - base);
      p_s[r * kPStride + half * kKeysPerThread + jj] = e;
      tile_sum += e;
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    row_sum = row_sum * correction + tile_sum;
    row_max = new_max;
#pragma unroll
    for (int dd = 0; dd < kOutPerThread; ++dd) acc[dd] *= correction;
    __syncthreads();  // P of both halves is visible

    for (int j = 0; j < n; ++j) {
      const float pj = p_s[r * kPStride + j];
#pragma unroll
      for (int dd = 0; dd < kOutPerThread; ++dd) acc[dd] += pj * v_s[j * D + 2 * dd + half];
    }
  }

  if (r < count) {
    T* out = static_cast<T*>(c.out) + int64_t{first + r} * c.out_stride + int64_t{head} * D;
    const float inv_sum = 1.0f / row_sum;
#pragma unroll
    for (int dd = 0; dd < kOutPerThread; ++dd) out[2 * dd + half] = FromFloat<T>(acc[dd] * inv_sum);
  }
}

template <DeviceDType kDType, int kHeadDim>
cudaError_t PrefillAttention(const PrefillAttentionParams& p, cudaStream_t stream) {
  using T = typename DeviceType<kDType>::T;
  if (p.num_tiles == 0) return cudaSuccess;
  const size_t shared_bytes = PrefillSharedBytes(kHeadDim);
  if (shared_bytes > 48 * 1024) {
    const cudaError_t error =
        cudaFuncSetAttribute(PrefillAttentionKernel<T, kHeadDim>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes));
    if (error != cudaSuccess) return error;
  }
  const dim3 grid(p.num_tiles, p.c.num_heads);
  PrefillAttentionKernel<T, kHeadDim><<<grid, kPrefillThreads, shared_bytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_PREFILL_ATTENTION_CUH_
