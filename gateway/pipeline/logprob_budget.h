// The per-request bound on logprob entries: what a request asking for logprobs may make the
// gateway hold and render. Each generated token carries its own logprob and top_logprobs
// alternatives, and a response that is not streamed is held whole until it is sent (the OpenAI
// JSON body, the gRPC Generate message), so a request's memory in the gateway grows with
// n * max_tokens * (top_logprobs + 1). Counted up front, from the request alone, so that a request
// over the bound is refused before any worker runs it (issue 28: one request of 672,000 entries
// took the gateway from 78 MB to 895 MB).
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_GATEWAY_PIPELINE_LOGPROB_BUDGET_H_
#define LLMSERVE_GATEWAY_PIPELINE_LOGPROB_BUDGET_H_

#include <cstdint>

#include "absl/status/status.h"
#include "llmserve/worker/v1/worker.pb.h"

namespace llmserve::gateway {

// The default of --max_logprob_entries: 2^18 entries, e.g. one choice of 12,483 tokens with 20
// alternatives each, or 16 choices of 780. docs/gateway.md gives what the largest accepted
// request costs in memory.
inline constexpr int64_t kDefaultMaxLogprobEntries = int64_t{1} << 18;
// The flag's range: at least one token's entry, at most what no gateway could hold anyway.
inline constexpr int64_t kMaxMaxLogprobEntries = int64_t{1} << 30;

// The logprob entries `n` choices of `request` may return: n * max_tokens * (top_logprobs + 1)
// when it asks for logprobs (return_logprobs or top_logprobs > 0), else 0. `request` is resolved
// (its max_tokens set, prompt_builder.h).
int64_t LogprobEntries(const worker::v1::GenerateRequest& request, int n);

// INVALID_ARGUMENT naming the fields, their values and the limit when `n` choices of `request`
// exceed `max_entries`; `max_tokens_defaulted` says the request left max_tokens unset (the
// message then says where the figure came from).
absl::Status CheckLogprobBudget(const worker::v1::GenerateRequest& request, int n,
                                bool max_tokens_defaulted, int64_t max_entries);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_PIPELINE_LOGPROB_BUDGET_H_
