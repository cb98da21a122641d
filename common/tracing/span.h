// A span of a trace: an operation with a start and an end, attributes, events and a status, as
// OpenTelemetry defines it. SpanData is what a finished span holds (and what the exporter
// encodes); Span is the handle code uses while the operation runs.
//
// A Span is cheap to copy (copies share the span) and thread-safe. A span that is not recorded
// (tracing off, or not sampled) still carries its trace context, so that the decision and the
// trace travel on to the next service; its methods then do nothing.

#ifndef LLMSERVE_COMMON_TRACING_SPAN_H_
#define LLMSERVE_COMMON_TRACING_SPAN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/tracing/trace_context.h"

namespace llmserve::common::tracing {

using AttributeValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

struct Attribute {
  std::string key;
  AttributeValue value;
};

// OTLP's SpanKind values.
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

struct SpanEvent {
  absl::Time time;
  std::string name;
  std::vector<Attribute> attributes;
};

struct SpanData {
  TraceContext context;     // its trace, its own span id, flags and tracestate
  SpanId parent_span_id{};  // all zero for a root span
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  absl::Time start;
  absl::Time end;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  // OTLP status: unset, or error with a message (instrumentation leaves OK to the application).
  bool error = false;
  std::string status_message;
};

class Span {
 public:
  // Where a recorded span goes when it ends (the tracer's queue).
  using Sink = std::function<void(SpanData)>;

  // Not recorded, no context: what code gets when there is no trace at all.
  Span() = default;
  // Not recorded, but in `context` (carried on to children and to other services).
  static Span Unrecorded(TraceContext context);
  // Recorded: `data` filled with its context, parent, name, kind and start.
  static Span Recorded(SpanData data, Sink sink);

  bool recording() const { return state_ != nullptr && state_->sink != nullptr; }
  // Whether there is a trace context to propagate.
  bool has_context() const { return state_ != nullptr; }
  // This span's context: children are made in it and it is what goes in a traceparent.
  TraceContext context() const;

  // Names are often known only later (the model): the last name set before End is exported.
  void SetName(std::string name) const;
  void SetAttribute(std::string key, AttributeValue value) const;
  void AddEvent(std::string name, absl::Time time = absl::Now(),
                std::vector<Attribute> attributes = {}) const;
  // Marks the span failed: status error with `message`, and error.type = `type`.
  void SetError(absl::string_view type, absl::string_view message) const;
  // Ends the span at `end` and hands it to its sink; only the first call counts.
  void End(absl::Time end = absl::Now()) const;

 private:
  struct State {
    TraceContext context;
    Sink sink;  // null: not recorded
    absl::Mutex mutex;
    SpanData data ABSL_GUARDED_BY(mutex);
    bool ended ABSL_GUARDED_BY(mutex) = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace llmserve::common::tracing

#endif  // LLMSERVE_COMMON_TRACING_SPAN_H_
