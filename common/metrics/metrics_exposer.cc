#include "common/metrics/metrics_exposer.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace llmserve::common {

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(const std::string& host,
                                                                      int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is outside [0, 65535]"));
  }
  const std::string address = absl::StrCat(host, ":", port);
  try {
    // Two threads: a scrape never waits behind another slow one.
    auto exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
    const std::vector<int> ports = exposer->GetListeningPorts();
    if (ports.empty()) {
      return absl::UnavailableError(absl::StrCat("metrics server: not listening on ", address));
    }
    return std::unique_ptr<MetricsExposer>(new MetricsExposer(std::move(exposer), ports[0]));
  } catch (const std::exception& e) {
    // CivetWeb reports a port in use (or a bad address) by throwing from the constructor.
    return absl::UnavailableError(
        absl::StrCat("metrics server: cannot listen on ", address, ": ", e.what()));
  }
}

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsExposer::~MetricsExposer() = default;

void MetricsExposer::Register(const std::shared_ptr<prometheus::Collectable>& collectable) {
  exposer_->RegisterCollectable(collectable);
}

}  // namespace llmserve::common
