#include "common/tracing/tracer.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/host_name.h"
#include "common/base/logging.h"

namespace llmserve::common::tracing {
namespace {

constexpr int kExportAttempts = 3;

}  // namespace

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Create(const TracingFlags& flags,
                                                       std::string service,
                                                       std::string service_version) {
  absl::StatusOr<OtlpEndpoint> endpoint = ParseOtlpEndpoint(flags.endpoint);
  if (!endpoint.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--otlp_traces_endpoint: ", endpoint.status().message()));
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> headers =
      ParseOtlpHeaders(flags.headers);
  if (!headers.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--otlp_headers: ", headers.status().message()));
  }
  if (flags.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--otlp_timeout must be positive");
  }
  if (!(flags.sample_ratio >= 0 && flags.sample_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace_sample_ratio must be in [0, 1], got ", flags.sample_ratio));
  }
  OtlpHttpExporterOptions exporter{.endpoint = *std::move(endpoint),
                                   .headers = *std::move(headers),
                                   .gzip = flags.gzip,
                                   .timeout = flags.timeout,
                                   .resource = {{"service.name", service},
                                                {"service.version", service_version},
                                                {"host.name", common::HostName()},
                                                {"telemetry.sdk.name", std::string("llmserve")},
                                                {"telemetry.sdk.language", std::string("cpp")}},
                                   .scope = {.name = "llmserve", .version = service_version}};
  absl::StatusOr<std::unique_ptr<Tracer>> tracer =
      Start(std::make_unique<OtlpHttpExporter>(std::move(exporter)),
            {.sample_ratio = flags.sample_ratio});
  if (tracer.ok()) (*tracer)->content_ = flags.content;
  return tracer;
}

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Start(std::unique_ptr<SpanExporter> exporter,
                                                      TracerOptions options) {
  if (exporter == nullptr) return absl::InvalidArgumentError("tracer: no exporter");
  if (!(options.sample_ratio >= 0 && options.sample_ratio <= 1) || options.max_batch == 0 ||
      options.max_queued_spans == 0 || options.retry_initial <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("tracer: bad options");
  }
  std::unique_ptr<Tracer> tracer(new Tracer(std::move(exporter), options));
  tracer->thread_ = std::thread([raw = tracer.get()] { raw->ExportLoop(); });
  return tracer;
}

Tracer::Tracer(std::unique_ptr<SpanExporter> exporter, TracerOptions options)
    : exporter_(std::move(exporter)),
      options_(options),
      queue_(std::make_shared<Queue>(options.max_queued_spans)) {}

Tracer::~Tracer() {
  {
    absl::MutexLock lock(&queue_->mutex);
    queue_->stopping = true;
    queue_->stop_deadline = absl::Now() + options_.shutdown_flush;
  }
  thread_.join();
  const Stats final_stats = stats();
  if (final_stats.dropped > 0) {
    LLMSERVE_LOG(WARNING) << "tracing: " << final_stats.dropped << " spans were not exported to "
                          << exporter_->Describe();
  }
}

bool Tracer::SampleRoot(const TraceId& trace_id) const {
  if (options_.sample_ratio >= 1) return true;
  if (options_.sample_ratio <= 0) return false;
  // TraceIdRatioBased: the trace id's low 8 bytes as a number below ratio * 2^64, so that every
  // service sampling the same ratio decides the same for the same trace.
  uint64_t low = 0;
  for (int i = 8; i < 16; ++i) low = (low << 8) | trace_id[i];
  return static_cast<double>(low) < options_.sample_ratio * std::ldexp(1.0, 64);
}

Span Tracer::StartSpan(std::string name, SpanKind kind, const std::optional<TraceContext>& parent,
                       absl::Time start) {
  SpanData data;
  if (parent.has_value()) {
    data.context.trace_id = parent->trace_id;
    data.context.flags = parent->flags;
    data.context.trace_state = parent->trace_state;
    data.parent_span_id = parent->span_id;
  } else {
    data.context.trace_id = NewTraceId();
    data.context.flags = SampleRoot(data.context.trace_id) ? kSampledFlag : 0;
  }
  data.context.span_id = NewSpanId();
  if (!data.context.sampled()) return Span::Unrecorded(data.context);
  data.name = std::move(name);
  data.kind = kind;
  data.start = start;
  return Span::Recorded(std::move(data),
                        [queue = queue_](SpanData span) { queue->Add(std::move(span)); });
}

Span StartChildSpan(Tracer* tracer, const Span& parent, std::string name, SpanKind kind,
                    absl::Time start) {
  if (tracer == nullptr) return parent;
  return tracer->StartSpan(
      std::move(name), kind,
      parent.has_context() ? std::optional<TraceContext>(parent.context()) : std::nullopt, start);
}

void Tracer::Queue::Add(SpanData span) {
  absl::MutexLock lock(&mutex);
  if (closed || spans.size() >= max_queued) {
    ++stats.dropped;
    return;
  }
  spans.push_back(std::move(span));
}

Tracer::Stats Tracer::stats() const {
  absl::MutexLock lock(&queue_->mutex);
  Stats stats = queue_->stats;
  stats.queued = static_cast<int64_t>(queue_->spans.size() + queue_->in_flight);
  return stats;
}

bool Tracer::WaitForFlush(absl::Time deadline) {
  Queue& queue = *queue_;
  absl::MutexLock lock(&queue.mutex);
  auto flushed = [&queue]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.mutex) {
    return queue.spans.empty() && queue.in_flight == 0;
  };
  return queue.mutex.AwaitWithDeadline(absl::Condition(&flushed), deadline);
}

void Tracer::ExportLoop() {
  Queue& queue = *queue_;
  while (true) {
    std::vector<SpanData> batch;
    {
      absl::MutexLock lock(&queue.mutex);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.mutex) {
        return queue.spans.size() >= options_.max_batch || queue.stopping;
      };
      // A batch goes when full, at shutdown, or export_interval after the last one.
      queue.mutex.AwaitWithTimeout(absl::Condition(&ready), options_.export_interval);
      if (queue.spans.empty()) {
        if (queue.stopping) {
          queue.closed = true;
          return;
        }
        continue;
      }
      const size_t n = std::min(queue.spans.size(), options_.max_batch);
      batch.assign(std::make_move_iterator(queue.spans.begin()),
                   std::make_move_iterator(queue.spans.begin() + static_cast<ptrdiff_t>(n)));
      queue.spans.erase(queue.spans.begin(), queue.spans.begin() + static_cast<ptrdiff_t>(n));
      queue.in_flight = n;
    }
    ExportBatch(batch);
  }
}

void Tracer::ExportBatch(std::vector<SpanData>& batch) {
  Queue& queue = *queue_;
  const auto n = static_cast<int64_t>(batch.size());
  absl::Duration backoff = options_.retry_initial;
  for (int attempt = 1;; ++attempt) {
    const absl::Status status = exporter_->Export(batch);
    const absl::Time now = absl::Now();
    const bool retryable = absl::IsUnavailable(status) || absl::IsResourceExhausted(status);
    bool dropped = false;
    {
      absl::MutexLock lock(&queue.mutex);
      if (status.ok()) {
        queue.stats.exported += n;
        queue.in_flight = 0;
        return;
      }
      ++queue.stats.export_failures;
      // Telemetry is not kept at the cost of memory: the batch goes, counted.
      dropped = !retryable || attempt == kExportAttempts || now + backoff > queue.stop_deadline;
      if (dropped) {
        queue.stats.dropped += n;
        queue.in_flight = 0;
      }
    }
    // Logged outside the queue's lock, which every span's end needs.
    if (dropped) {
      if (std::optional<int64_t> skipped = drop_log_.Record(now)) {
        LLMSERVE_LOG(WARNING) << "tracing: dropping " << n << " spans: " << status << " ("
                              << *skipped << " more drops not logged)";
      }
      return;
    }
    absl::MutexLock lock(&queue.mutex);
    const bool was_stopping = queue.stopping;
    auto stop_changed = [&queue, was_stopping]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.mutex) {
      return queue.stopping != was_stopping;
    };
    queue.mutex.AwaitWithDeadline(absl::Condition(&stop_changed), now + backoff);
    backoff *= 2;
  }
}

}  // namespace llmserve::common::tracing
