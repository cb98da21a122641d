// The decode attention kernel template (see attention.h); instantiated by attention_*.cu.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_DECODE_ATTENTION_CUH_
#define LLMSERVE_WORKER_ENGINE_CUDA_DECODE_ATTENTION_CUH_

#include <cmath>

#include "worker/engine/cuda/attention.h"
#include "worker/engine/cuda/device_math.cuh"

namespace llmserve::worker::cuda {

inline constexpr int kDecodeThreads = 128;
inline constexpr int kDecodeWarps = kDecodeThreads / 32;
// Keys per online-softmax step.
inline constexpr int kDecodeChunk = 128;

// Dynamic shared memory: q, acc [group * head_dim], scores [group * kDecodeChunk], running max,
// sum and correction [group] (floats), then the chunk's cache offsets [kDecodeChunk] (int64).
__host__ __device__ inline size_t DecodeFloatCount(int group, int head_dim) {
  return size_t(2) * group * head_dim + size_t(group) * kDecodeChunk + 3 * size_t(group);
}
inline size_t DecodeSharedBytes(int group, int head_dim) {
  const size_t float_bytes = (DecodeFloatCount(group, head_dim) * sizeof(float) + 15) / 16 * 16;
  return float_bytes + kDecodeChunk * sizeof(int64_t);
}

// grid (num decode tokens, num_kv_heads, num_splits), kDecodeThreads threads.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kDecodeThreads) DecodeAttentionKernel(DecodeAttentionParams p) {
  constexpr int D = kHeadDim;
  constexpr int kPerLane = D / 32;
  extern __shared__ __align__(16) unsigned char shared[];
  const PagedAttentionCommon& c = p.c;
  const int group = c.num_heads / c.num_kv_heads;
  float* q_s = reinterpret_cast<float*>(shared);
  float* acc_s = q_s + group * D;
  float* score_s = acc_s + group * D;
  float* max_s = score_s + group * kDecodeChunk;
  float* sum_s = max_s + group;
  float* corr_s = sum_s + group;
  int64_t* offset_s = reinterpret_cast<int64_t*>(
      shared + (DecodeFloatCount(group, D) * sizeof(float) + 15) / 16 * 16);

  const int i = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int num_splits = gridDim.z;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int t = p.tokens[i];
  const int seq = c.token_seq[t];
  const int len = c.positions[t] + 1;
  const int split_len = (len + num_splits - 1) / num_splits;
  const int begin = split * split_len;
  const int end = min(len, begin + split_len);
  const int head0 = kv_head * group;
  // Partial results of (token i, head head0 + g, this split).
  auto partial_index = [&](int g) {
    return (int64_t{i} * c.num_heads + head0 + g) * num_splits + split;
  };

  if (begin >= end) {  // a split past a short context (only when num_splits > 1)
    for (int idx = tid; idx < group * D; idx += blockDim.x) {
      p.partial_out[partial_index(idx / D) * D + idx % D] = 0.0f;
    }
    for (int g = tid; g < group; g += blockDim.x) {
      p.partial_max_sum[partial_index(g) * 2] = -INFINITY;
      p.partial_max_sum[partial_index(g) * 2 + 1] = 0.0f;
    }
    return;
  }

  // The group's query heads are contiguous: heads head0 .. head0 + group - 1.
  const float* q = c.q + int64_t{t} * c.q_stride + int64_t{head0} * D;
  for (int idx = tid; idx < group * D; idx += blockDim.x) {
    q_s[idx] = q[idx] * c.scale;
    acc_s[idx] = 0.0f;
  }
  for (int g = tid; g < group; g += blockDim.x) {
    max_s[g] = -INFINITY;
    sum_s[g] = 0.0f;
  }
  const int32_t* blocks = c.block_ids + c.block_table_start[seq];
  const T* k_cache = static_cast<const T*>(c.k_cache);
  const T* v_cache = static_cast<const T*>(c.v_cache);

  for (int chunk0 = begin; chunk0 < end; chunk0 += kDecodeChunk) {
    const int n = min(kDecodeChunk, end - chunk0);
    for (int j = tid; j < n; j += blockDim.x) {
      const int pos = chunk0 + j;
      const int64_t block = blocks[pos / c.block_size];
      offset_s[j] =
          ((block * c.num_kv_heads + kv_head) * c.block_size + pos % c.block_size) * int64_t{D};
    }
    __syncthreads();  // offsets (and on the first chunk q_s, max_s, sum_s) are visible

    // Scores: a warp per key, each lane kPerLane consecutive elements of it.
    for (int j = warp; j < n; j += kDecodeWarps) {
      const T* key = k_cache + offset_s[j] + lane * kPerLane;
      float k[kPerLane];
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) k[e] = ToFloat(key[e]);
      for (int g = 0; g < group; ++g) {
        const float* qg = q_s + g * D + lane * kPerLane;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) dot += qg[e] * k[e];
        dot = WarpSum(dot);
        if (lane == 0) score_s[g * kDecodeChunk + j] = dot;
      }
    }
    __syncthreads();

    // Online softmax update: a warp per query head.
    for (int g = warp; g < group; g += kDecodeWarps) {
      float* s = score_s + g * kDecodeChunk;
      float chunk_max = -INFINITY;
      for (int j = lane; j < n; j += 32) chunk_max = fmaxf(chunk_max, s[j]);
      chunk_max = WarpMax(chunk_max);
      const float old_max = max_s[g];
      const float new_max = fmaxf(old_max, chunk_max);  // finite: the chunk has a key
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float e = expf(s[j] - new_max);
        s[j] = e;
        sum += e;
      }
      sum = WarpSum(sum);
      __syncwarp();
      if (lane == 0) {
        const float correction = expf(old_max - new_max);  // 0 on the first chunk
        sum_s[g] = sum_s[g] * correction + sum;
        max_s[g] = new_max;
        corr_s[g] = correction;
      }
    }
    __syncthreads();

    // acc = acc * correction + P · V, a thread per (head, element).
    for (int idx = tid; idx < group * D; idx += blockDim.x) {
      const int g = idx / D, d = idx % D;
      const float* s = score_s + g * kDecodeChunk;
      float a = 0.0f;
      for (int j = 0; j < n; ++j) a += s[j] * ToFloat(v_cache[offset_s[j] + d]);
      acc_s[idx] = acc_s[idx] * corr_s[g] + a;
    }
    __syncthreads();  // before the next chunk overwrites offsets and scores
  }

  for (int idx = tid; idx < group * D; idx += blockDim.x) {
    const int g = idx / D, d = idx % D;
    const float o = acc_s[idx] / sum_s[g];
    if (num_splits == 1) {
      T* out = static_cast<T*>(c.out) + int64_t{t} * c.out_stride + int64_t{head0 + g} * D;
      out[d] = FromFloat<T>(o);
    } else {
      p.partial_out[partial_index(g) * D + d] = o;
    }
  }
  if (num_splits > 1) {
    for (int g = tid; g < group; g += blockDim.x) {
      p.partial_max_sum[partial_index(g) * 2] = max_s[g];
      p.partial_max_sum[partial_index(g) * 2 + 1] = sum_s[g];
    }
  }
}

// Combines the splits: grid (num decode tokens, num_heads), head_dim threads.
template <typename T, int kHeadDim>
__global__ void DecodeReduceKernel(DecodeAttentionParams p) {
  constexpr int D = kHeadDim;
  const int i = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const int num_splits = p.num_splits;
  const int64_t base = (int64_t{i} * p.c.num_heads + head) * num_splits;
  const float* max_sum = p.partial_max_sum + base * 2;
  float global_max = -INFINITY;
  for (int s = 0; s < num_splits; ++s) {
    if (max_sum[2 * s + 1] > 0.0f) global_max = fmaxf(global_max, max_sum[2 * s]);
  }
  float total = 0.0f, o = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    if (max_sum[2 * s + 1] <= 0.0f) continue;
    const float w = max_sum[2 * s + 1] * expf(max_sum[2 * s] - global_max);
    total += w;
    o += w * p.partial_out[(base + s) * D + d];
  }
  const int t = p.tokens[i];
  T* out = static_cast<T*>(p.c.out) + int64_t{t} * p.c.out_stride + int64_t{head} * D;
  out[d] = FromFloat<T>(o / total);
}

template <DeviceDType kDType, int kHeadDim>
cudaError_t DecodeAttention(const DecodeAttentionParams& p, cudaStream_t stream) {
  using T = typename DeviceType<kDType>::T;
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.num_splits < 1 || p.num_splits > kMaxDecodeSplits) return cudaErrorInvalidValue;
  const int group = p.c.num_heads / p.c.num_kv_heads;
  const size_t shared_bytes = DecodeSharedBytes(group, kHeadDim);
  if (shared_bytes > 48 * 1024) {
    const cudaError_t error =
        cudaFuncSetAttribute(DecodeAttentionKernel<T, kHeadDim>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes));
    if (error != cudaSuccess) return error;
  }
  const dim3 grid(p.num_tokens, p.c.num_kv_heads, p.num_splits);
  DecodeAttentionKernel<T, kHeadDim><<<grid, kDecodeThreads, shared_bytes, stream>>>(p);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess || p.num_splits == 1) return error;
  DecodeReduceKernel<T, kHeadDim><<<dim3(p.num_tokens, p.c.num_heads), kHeadDim, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_DECODE_ATTENTION_CUH_
