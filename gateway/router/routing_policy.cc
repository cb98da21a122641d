#include "gateway/router/routing_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

// The least-loaded candidate; among equals, the turn of the one after the last chosen.
size_t LeastLoaded(const std::vector<RoutingCandidate>& candidates, uint64_t* turn) {
  const size_t start = static_cast<size_t>(*turn % candidates.size());
  size_t best = start;
  bool tied = false;
  for (size_t k = 1; k < candidates.size(); ++k) {
    const size_t i = (start + k) % candidates.size();
    const double score = LoadScore(candidates[i]);
    if (score < LoadScore(candidates[best])) {
      best = i;
      tied = false;
    } else if (score == LoadScore(candidates[best])) {
      tied = true;
    }
  }
  if (tied) ++*turn;
  return best;
}

}  // namespace

absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(absl::string_view name) {
  if (name == "round_robin") return RoutingPolicy::kRoundRobin;
  if (name == "least_load") return RoutingPolicy::kLeastLoad;
  if (name == "prefix") return RoutingPolicy::kPrefix;
  return absl::InvalidArgumentError(
      absl::StrCat("routing policy \"", name, "\" is not one of round_robin, least_load, prefix"));
}

absl::string_view RoutingPolicyName(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kRoundRobin:
      return "round_robin";
    case RoutingPolicy::kLeastLoad:
      return "least_load";
    case RoutingPolicy::kPrefix:
      return "prefix";
  }
  return "unknown";
}

double LoadScore(const RoutingCandidate& candidate) {
  const double kv_usage =
      candidate.kv_blocks_total <= 0
          ? 0
          : 1.0 - static_cast<double>(candidate.kv_blocks_free) / candidate.kv_blocks_total;
  const int32_t unreported =
      std::max<int32_t>(0, candidate.in_flight - candidate.running - candidate.waiting);
  return candidate.running + 2.0 * candidate.waiting + 8.0 * kv_usage + unreported;
}

std::optional<RoutingDecision> ChooseWorker(const std::vector<RoutingCandidate>& candidates,
                                            const RoutingOptions& options,
                                            uint64_t* round_robin_counter) {
  if (candidates.empty()) return std::nullopt;
  switch (options.policy) {
    case RoutingPolicy::kRoundRobin:
      return RoutingDecision{.index = (*round_robin_counter)++ % candidates.size(),
                             .reason = "round_robin"};
    case RoutingPolicy::kLeastLoad:
      return RoutingDecision{.index = LeastLoaded(candidates, round_robin_counter),
                             .reason = "least_load"};
    case RoutingPolicy::kPrefix:
      break;
  }
  const size_t least = LeastLoaded(candidates, round_robin_counter);
  size_t holder = least;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int32_t matched = candidates[i].matched_blocks;
    const int32_t best = candidates[holder].matched_blocks;
    if (matched > best ||
        (matched == best && LoadScore(candidates[i]) < LoadScore(candidates[holder]))) {
      holder = i;
    }
  }
  if (candidates[holder].matched_blocks == 0) {
    return RoutingDecision{.index = least, .reason = "prefix_miss"};
  }
  if (LoadScore(candidates[holder]) > LoadScore(candidates[least]) + options.prefix_load_bound) {
    return RoutingDecision{.index = least, .reason = "prefix_overloaded"};
  }
  return RoutingDecision{.index = holder, .reason = "prefix_hit"};
}

}  // namespace llmserve::gateway
