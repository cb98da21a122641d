// Histogram bucket boundaries shared by the gateway's and the worker's metrics, so that
// dashboards can compare the two.
//
// Thread-safe: constants.

#ifndef LLMSERVE_COMMON_METRICS_BUCKETS_H_
#define LLMSERVE_COMMON_METRICS_BUCKETS_H_

#include "prometheus/histogram.h"

namespace llmserve::common {

// Request-level latencies (TTFT, end to end, queue time), in seconds: 1 ms to 10 minutes, as
// vLLM's, so an idle CPU worker and a loaded one both land in the middle.
inline prometheus::Histogram::BucketBoundaries RequestLatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0};
}

// Per-token and per-step latencies, in seconds: 1 ms to 20 s.
inline prometheus::Histogram::BucketBoundaries TokenLatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
          0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1.0,   2.5,  5.0,  10.0, 20.0};
}

// Token counts (prompt, generated, per step): powers of two up to 128k.
inline prometheus::Histogram::BucketBoundaries TokenCountBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double b = 1; b <= 131072; b *= 2) buckets.push_back(b);
  return buckets;
}

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_METRICS_BUCKETS_H_
