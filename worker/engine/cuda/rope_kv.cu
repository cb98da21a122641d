#include "worker/engine/cuda/device_math.cuh"
#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {
namespace {

// One block per token. Work items: (head, i) rotation pairs for the Q and K heads, then the V
// elements.
template <typename T>
__global__ void RopeKvKernel(RopeKvParams p) {
  const int32_t t = blockIdx.x;
  const int32_t d = p.head_dim, half = d / 2;
  const int32_t q_width = p.num_heads * d, kv_width = p.num_kv_heads * d;
  float* row = p.qkv + int64_t{t} * (q_width + 2 * kv_width);
  const int32_t position = p.positions[t];
  const int32_t* blocks = p.block_ids + p.block_table_start[p.token_seq[t]];
  const int64_t block = blocks[position / p.block_size];
  const int32_t slot = position % p.block_size;
  T* k_cache = static_cast<T*>(p.k_cache);
  T* v_cache = static_cast<T*>(p.v_cache);
  // Offset of (this slot, kv head 0) in the layer's cache; kv head h adds h * block_size * d.
  const int64_t slot_offset = (block * p.num_kv_heads * p.block_size + slot) * d;
  const int64_t head_stride = int64_t{p.block_size} * d;

  const int32_t num_pairs = (p.num_heads + p.num_kv_heads) * half;
  for (int32_t item = threadIdx.x; item < num_pairs; item += blockDim.x) {
    const int32_t head = item / half, i = item % half;
    const int32_t a_index = head * d + i, b_index = a_index + half;
    float a = row[a_index], b = row[b_index];
    if (p.qkv_bias != nullptr) {
      a += p.qkv_bias[a_index];
      b += p.qkv_bias[b_index];
    }
    if (p.inv_freq != nullptr) {
      // Double angle as the CPU backend: positions of 1e5 radians lose their fraction in float.
      double sin_value, cos_value;
      sincos(static_cast<double>(position) * p.inv_freq[i], &sin_value, &cos_value);
      const float c = static_cast<float>(cos_value), s = static_cast<float>(sin_value);
      const float rotated_a = a * c - b * s, rotated_b = b * c + a * s;
      a = rotated_a;
      b = rotated_b;
    }
    if (head < p.num_heads) {
      row[a_index] = a;
      row[b_index] = b;
    } else {
      T* k = k_cache + slot_offset + (head - p.num_heads) * head_stride;
      k[i] = FromFloat<T>(a);
      k[i + half] = FromFloat<T>(b);
    }
  }
  const float* v_row = row + q_width + kv_width;
  const float* v_bias = p.qkv_bias == nullptr ? nullptr : p.qkv_bias + q_width + kv_width;
  for (int32_t item = threadIdx.x; item < kv_width; item += blockDim.x) {
    const int32_t head = item / d, i = item % d;
    float v = v_row[item];
    if (v_bias != nullptr) v += v_bias[item];
    v_cache[slot_offset + head * head_stride + i] = FromFloat<T>(v);
  }
}

}  // namespace

cudaError_t LaunchRopeKv(DeviceDType dtype, const RopeKvParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  if (dtype == DeviceDType::kBF16) {
    RopeKvKernel<__nv_bfloat16><<<p.num_tokens, 128, 0, stream>>>(p);
  } else {
    RopeKvKernel<__half><<<p.num_tokens, 128, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace llmserve::worker::cuda
