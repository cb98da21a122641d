// A token under consideration by the sampling filters, its rank order, and the scratch list type
// they share (candidate_filters.h, vector_ops.h).
//
// Thread-safe: plain values.

#ifndef LLMSERVE_WORKER_SAMPLING_TOKEN_CANDIDATE_H_
#define LLMSERVE_WORKER_SAMPLING_TOKEN_CANDIDATE_H_

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace llmserve::worker {

// No default member initializers: CandidateList leaves new elements uninitialized.
struct TokenCandidate {
  float logit;
  int32_t token_id;
  // exp((logit - max_logit) / temperature): the unnormalized probability, 1 for the best token.
  float weight;
};

// An allocator whose construct() default-initializes, so that resize() of a scratch list does
// not zero elements about to be overwritten (for 128k candidates that was 15% of a step).
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using CandidateList = std::vector<TokenCandidate, DefaultInitAllocator<TokenCandidate>>;

// True when `a` ranks before `b`: higher logit, or equal logit and lower id.
inline bool RanksBefore(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token_id < b.token_id);
}

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_SAMPLING_TOKEN_CANDIDATE_H_
