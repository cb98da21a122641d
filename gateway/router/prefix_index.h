// What each worker holds in its prefix cache, as the gateway learns it from the workers'
// WatchLoad streams: per worker, the set of routing hashes of cached KV blocks.
//
// Block hashes are chained (a block's hash covers every token before it), so a worker that holds
// the i-th hash of a prompt holds a block whose whole prefix matches. The number of leading
// prompt hashes a worker holds is the number of prompt blocks it can skip: what prefix-affinity
// routing maximizes.
//
// Not thread-safe: the router's owner serializes access.

#ifndef LLMSERVE_GATEWAY_ROUTER_PREFIX_INDEX_H_
#define LLMSERVE_GATEWAY_ROUTER_PREFIX_INDEX_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

class PrefixIndex {
 public:
  // Applies one load report of `worker`: a reset report replaces what was known, then the
  // events apply in order (stored adds, evicted removes, cleared empties).
  void Apply(const std::string& worker, const worker::v1::LoadReport& report);

  // Forgets a worker (gone, or its stream broke: a new stream starts with a snapshot).
  void Remove(const std::string& worker);

  // How many leading `prompt_hashes` the worker holds (0 for an unknown worker).
  int MatchedBlocks(const std::string& worker, absl::Span<const uint64_t> prompt_hashes) const;

  // Cached blocks known for the worker.
  size_t NumBlocks(const std::string& worker) const;

 private:
  absl::flat_hash_map<std::string, absl::flat_hash_set<uint64_t>> blocks_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_PREFIX_INDEX_H_
