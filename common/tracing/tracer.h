// Makes spans and exports them in the background: the one tracing object of a process.
//
// Sampling is parent-based: a span whose parent context came from a caller follows the caller's
// decision (the sampled flag of its traceparent); a root span is sampled when its trace id falls
// under `sample_ratio` (OpenTelemetry's TraceIdRatioBased). An unsampled span is not recorded,
// but keeps its context, so that the services after it make the same decision.
//
// Ended spans go into a bounded queue; one thread sends them in batches (up to max_batch, at
// least every export_interval). The data path never waits for the exporter: a full queue drops
// the span (counted), an export that fails is retried up to twice with backoff and then dropped
// (counted). Destruction exports what is queued, for up to shutdown_flush.
//
// Thread-safe.

#ifndef LLMSERVE_COMMON_TRACING_TRACER_H_
#define LLMSERVE_COMMON_TRACING_TRACER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/log_throttle.h"
#include "common/tracing/otlp_http_exporter.h"
#include "common/tracing/span.h"
#include "common/tracing/trace_context.h"

namespace llmserve::common::tracing {

struct TracerOptions {
  double sample_ratio = 1.0;
  size_t max_queued_spans = 8192;
  size_t max_batch = 512;
  absl::Duration export_interval = absl::Seconds(1);
  absl::Duration retry_initial = absl::Milliseconds(500);
  absl::Duration shutdown_flush = absl::Seconds(5);
};

// What --otlp_traces_endpoint and friends configure, for both binaries.
struct TracingFlags {
  std::string endpoint;  // empty: tracing off
  std::string headers;   // "k=v,k=v"
  double sample_ratio = 1.0;
  bool gzip = true;
  // One export, from connecting to the answer.
  absl::Duration timeout = absl::Seconds(10);
  // Prompt and completion text in spans (gen_ai.input.messages / gen_ai.output.messages).
  bool content = false;
};

class Tracer {
 public:
  // With the OTLP/HTTP exporter of `flags` (INVALID_ARGUMENT naming the flag for a bad endpoint,
  // header list or ratio); `service` names the process in the resource (service.name).
  static absl::StatusOr<std::unique_ptr<Tracer>> Create(const TracingFlags& flags,
                                                        std::string service,
                                                        std::string service_version);
  // With any exporter (tests).
  static absl::StatusOr<std::unique_ptr<Tracer>> Start(std::unique_ptr<SpanExporter> exporter,
                                                       TracerOptions options);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A span named `name` starting at `start`, the child of `parent` (a caller's context or a
  // local span's) or the root of a new trace when there is none.
  Span StartSpan(std::string name, SpanKind kind, const std::optional<TraceContext>& parent,
                 absl::Time start = absl::Now());

  bool content() const { return content_; }
  std::string Describe() const { return exporter_->Describe(); }

  struct Stats {
    int64_t exported = 0;  // spans the receiver accepted
    int64_t dropped = 0;   // spans lost: queue full, export failed, left at shutdown
    int64_t export_failures = 0;
    int64_t queued = 0;
  };
  Stats stats() const;
  // Until everything ended so far is exported or dropped, or `deadline` (tests).
  bool WaitForFlush(absl::Time deadline);

 private:
  // What spans hand themselves to: shared, so that a span that ends after the tracer is gone
  // finds a closed queue rather than a dangling one.
  struct Queue {
    explicit Queue(size_t max_queued) : max_queued(max_queued) {}
    void Add(SpanData span) ABSL_LOCKS_EXCLUDED(mutex);
    const size_t max_queued;
    mutable absl::Mutex mutex;
    std::deque<SpanData> spans ABSL_GUARDED_BY(mutex);
    size_t in_flight ABSL_GUARDED_BY(mutex) = 0;
    bool closed ABSL_GUARDED_BY(mutex) = false;  // the export thread is gone
    bool stopping ABSL_GUARDED_BY(mutex) = false;
    absl::Time stop_deadline ABSL_GUARDED_BY(mutex) = absl::InfiniteFuture();
    Stats stats ABSL_GUARDED_BY(mutex);
  };

  Tracer(std::unique_ptr<SpanExporter> exporter, TracerOptions options);
  void ExportLoop();
  // Exports `batch`, retrying twice; counts the outcome.
  void ExportBatch(std::vector<SpanData>& batch);
  bool SampleRoot(const TraceId& trace_id) const;

  const std::unique_ptr<SpanExporter> exporter_;
  const TracerOptions options_;
  bool content_ = false;
  const std::shared_ptr<Queue> queue_;
  common::LogThrottle drop_log_{absl::Seconds(30)};
  std::thread thread_;
};

// A child of `parent` made by `tracer`; without a tracer, `parent` itself, so that a caller's
// context still reaches the next service unchanged (tracing off here, perhaps on there).
Span StartChildSpan(Tracer* tracer, const Span& parent, std::string name, SpanKind kind,
                    absl::Time start = absl::Now());

}  // namespace llmserve::common::tracing

#endif  // LLMSERVE_COMMON_TRACING_TRACER_H_
