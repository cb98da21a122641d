// GBNF expressions for the decimal numbers in a range, so that JSON Schema minimum / maximum
// are exact in the grammar rather than checked after the fact.
//
// Thread-safety: pure functions.
#ifndef LLMSERVE_WORKER_STRUCTURED_NUMBER_RANGE_H_
#define LLMSERVE_WORKER_STRUCTURED_NUMBER_RANGE_H_

#include <cstdint>
#include <optional>
#include <string>

namespace llmserve::worker::structured {

// Integers in [lo, hi] (nullopt = unbounded) in canonical form (no leading zeros, no "-0").
// Requires lo <= hi when both are set.
std::string IntegerRangeGbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

struct RealBound {
  int64_t value = 0;
  bool exclusive = false;
};
// Decimal numbers (no exponent) x with lo <(=) x <(=) hi; empty string when no number fits.
std::string RealRangeGbnf(std::optional<RealBound> lo, std::optional<RealBound> hi);

}  // namespace llmserve::worker::structured

#endif  // LLMSERVE_WORKER_STRUCTURED_NUMBER_RANGE_H_
