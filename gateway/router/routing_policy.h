// Which worker serves a request: the gateway's routing policies as pure functions over a
// snapshot of the candidates (healthy, not draining, serving the model), so they are tested
// without any network.
//
//   round_robin  each candidate in turn;
//   least_load   the lowest load score (below);
//   prefix       the candidate holding the longest cached prefix of the prompt, unless its load
//                score exceeds the least-loaded candidate's by more than `prefix_load_bound`
//                (a popular prefix must not pile every request onto one worker), then
//                least_load. Ties go to the less loaded candidate.
// Among equally loaded candidates, least_load (and prefix without a hit) takes each in turn, so a
// burst that arrives between two load reports does not all go to the same idle worker.
//
// Load score, in "requests": running + 2 * waiting + 8 * KV usage + the requests this gateway has
// in flight there beyond running + waiting (sent since the last report, not in it yet). Waiting
// requests count double because they add queueing delay before any work; a nearly full KV cache
// means preemptions soon.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_ROUTER_ROUTING_POLICY_H_
#define LLMSERVE_GATEWAY_ROUTER_ROUTING_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::gateway {

enum class RoutingPolicy { kRoundRobin, kLeastLoad, kPrefix };

// "round_robin", "least_load", "prefix"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(absl::string_view name);
absl::string_view RoutingPolicyName(RoutingPolicy policy);

struct RoutingCandidate {
  std::string worker;
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_free = 0;
  // Leading prompt blocks the worker holds in its prefix cache (PrefixIndex::MatchedBlocks).
  int32_t matched_blocks = 0;
  // Calls this gateway has open to the worker now.
  int32_t in_flight = 0;
};

double LoadScore(const RoutingCandidate& candidate);

struct RoutingDecision {
  // Index into the candidates.
  size_t index = 0;
  // For metrics (llmserve_gateway_routing_decisions_total{policy,reason}): "round_robin",
  // "least_load", "prefix_hit", "prefix_miss" (no candidate holds a block), "prefix_overloaded"
  // (the best holder was too busy).
  std::string reason;
};

struct RoutingOptions {
  RoutingPolicy policy = RoutingPolicy::kPrefix;
  // In load-score units; see above.
  double prefix_load_bound = 8;
};

// nullopt when there are no candidates. `round_robin_counter` is the caller's counter (advanced
// on every round-robin decision, and on every choice among equally loaded candidates).
std::optional<RoutingDecision> ChooseWorker(const std::vector<RoutingCandidate>& candidates,
                                            const RoutingOptions& options,
                                            uint64_t* round_robin_counter);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_ROUTING_POLICY_H_
