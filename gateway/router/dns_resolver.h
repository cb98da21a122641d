// The gateway's HostResolver: DNS through c-ares, on one thread of its own that waits on the
// resolver's sockets (Envoy's Network::DnsResolver is the model). Unlike getaddrinfo, a lookup
// can be abandoned: destroying the resolver cancels every lookup in flight and returns at once,
// however long a DNS server takes to answer (or never does).
//
// It reads the system's configuration as getaddrinfo does for a Kubernetes pod: /etc/hosts
// first, then the servers, search domains and ndots of /etc/resolv.conf.
//
// Thread-safe: Resolve may be called from any thread; callbacks run on the resolver's thread.

#ifndef LLMSERVE_GATEWAY_ROUTER_DNS_RESOLVER_H_
#define LLMSERVE_GATEWAY_ROUTER_DNS_RESOLVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/router/host_resolver.h"

namespace llmserve::gateway {

struct DnsResolverOptions {
  // "ip:port" of the DNS servers to ask instead of /etc/resolv.conf's (tests: a server of their
  // own on a random port). Empty: the system's.
  std::vector<std::string> servers;
  // How long to wait for a server's answer before asking again, and how many times to ask: a
  // lookup gives up after about their product.
  absl::Duration attempt_timeout = absl::Seconds(2);
  int attempts = 2;
};

class DnsResolver final : public HostResolver {
 public:
  // INVALID_ARGUMENT naming the option, or INTERNAL when c-ares cannot start.
  static absl::StatusOr<std::unique_ptr<DnsResolver>> Create(const DnsResolverOptions& options);
  // Cancels the lookups in flight (their callbacks get CANCELLED) and stops the thread.
  ~DnsResolver() override;

  void Resolve(const std::string& host, const std::string& port, Callback done) override;

  // One lookup (declared here for c-ares' callback, defined in the .cc).
  struct Lookup;

 private:
  explicit DnsResolver(void* channel);
  void Loop();
  // Wakes the loop's poll.
  void Wake();

  // The ares_channel; only the loop thread uses it once the thread runs.
  void* const channel_;
  // A pipe: Resolve and the destructor write a byte to it so that the loop's poll returns.
  int wake_read_ = -1;
  int wake_write_ = -1;
  absl::Mutex mutex_;
  std::vector<std::unique_ptr<Lookup>> queued_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_DNS_RESOLVER_H_
