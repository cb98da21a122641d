// Causal attention over a paged KV cache, for a packed batch of new tokens.
//
// Cache layout per layer, for K and V alike: [num_blocks, num_kv_heads, block_size, head_dim].
// Keeping a head's tokens of one block contiguous (rather than [block, slot, head, dim]) lets a
// query head stream through its keys with unit stride.
//
// Thread-safe for disjoint outputs: callers split (token, head) work items across threads.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_PAGED_ATTENTION_H_
#define LLMSERVE_WORKER_ENGINE_CPU_PAGED_ATTENTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace llmserve::worker::cpu {

struct PagedKvLayout {
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 0;

  // Offset in floats of (block, kv head, slot) within one layer's K or V array.
  int64_t Offset(int64_t block, int64_t kv_head, int64_t slot) const {
    return ((block * num_kv_heads + kv_head) * block_size + slot) * head_dim;
  }
};

// Copies one token's K and V (num_kv_heads * head_dim values each) into the cache slot of
// `position` in the sequence whose block table is `blocks`.
void WriteKv(const PagedKvLayout& layout, const int32_t* blocks, int64_t position, const float* k,
             const float* v, float* k_cache, float* v_cache);

// out[0, head_dim) = softmax(q · K[0..position]^T * scale) · V[0..position] for one query head
// reading kv head `kv_head`. `scores` holds at least position + 1 floats of scratch.
//
// Compiled for AVX-512 (head_dim <= 128: query and output held in registers, vectorized exp),
// AVX2 + FMA (head_dim a multiple of 8 up to 128: eight keys at once, vectorized exp; others a
// generic loop), and the x86-64 baseline; the best one this CPU runs is picked at run time.
void AttendOneHead(const PagedKvLayout& layout, const int32_t* blocks, int64_t position,
                   int64_t kv_head, const float* q, float scale, const float* k_cache,
                   const float* v_cache, float* scores, float* out);

// The variants this CPU runs, best first: "avx512", "avx2", "baseline".
std::vector<std::string> AttentionIsas();

// AttendOneHead with one of AttentionIsas(), so that tests check every variant the CPU runs.
// Returns false (and computes nothing) where that variant does not take this head_dim.
bool AttendOneHeadWithIsa(absl::string_view isa, const PagedKvLayout& layout, const int32_t* blocks,
                          int64_t position, int64_t kv_head, const float* q, float scale,
                          const float* k_cache, const float* v_cache, float* scores, float* out);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_PAGED_ATTENTION_H_
