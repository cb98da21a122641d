// A prompt's block hashes as the router needs them (PrefixIndex's routing hashes, one per full
// block of the worker's block size, salted per tenant), computed once per block size and reused
// by every routing attempt of the request: a retry does not hash a megabyte prompt again.
//
// Not thread-safe: one request's attempts run one after another.

#ifndef LLMSERVE_GATEWAY_ROUTER_PROMPT_ROUTING_HASHES_H_
#define LLMSERVE_GATEWAY_ROUTER_PROMPT_ROUTING_HASHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/prefix_cache/block_hash.h"

namespace llmserve::gateway {

class PromptRoutingHashes {
 public:
  // `tokens` must outlive this object. A prompt run by LoRA adapter `lora_adapter` hashes as the
  // worker caches it (common::LoraCacheSalt), and routes only to workers that have the adapter.
  PromptRoutingHashes(absl::Span<const int32_t> tokens, absl::string_view cache_salt,
                      absl::string_view lora_adapter = "")
      : tokens_(tokens),
        cache_salt_(common::LoraCacheSalt(cache_salt, lora_adapter)),
        lora_adapter_(lora_adapter) {}

  const std::string& lora_adapter() const { return lora_adapter_; }

  // The routing hash of each full block of `block_size` tokens (none when block_size <= 0).
  absl::Span<const uint64_t> ForBlockSize(int32_t block_size);

  // How many times the prompt was hashed (once per distinct block size asked for).
  int hash_passes() const { return hash_passes_; }

 private:
  const absl::Span<const int32_t> tokens_;
  const std::string cache_salt_;
  const std::string lora_adapter_;
  absl::flat_hash_map<int32_t, std::vector<uint64_t>> by_block_size_;
  int hash_passes_ = 0;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_PROMPT_ROUTING_HASHES_H_
