// Serves Prometheus collectables over HTTP at /metrics (prometheus-cpp's Exposer), with the
// failure to bind turned into a Status instead of an exception.
//
// Thread-safe: Register may be called from any thread; scrapes run on the exposer's own threads.

#ifndef LLMSERVE_COMMON_METRICS_METRICS_EXPOSER_H_
#define LLMSERVE_COMMON_METRICS_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}

namespace llmserve::common {

class MetricsExposer {
 public:
  // Listens on `host`:`port` (port 0 picks a free one). UNAVAILABLE naming the address when it
  // cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(const std::string& host, int port);
  ~MetricsExposer();

  // Adds a collectable to /metrics. The exposer keeps a weak reference: the caller owns it.
  void Register(const std::shared_ptr<prometheus::Collectable>& collectable);

  // The port it listens on.
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_METRICS_METRICS_EXPOSER_H_
