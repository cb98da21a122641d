// The seam between the worker pool and name resolution: Resolve answers later, through a
// callback, so that a resolver that does not answer (a DNS server that drops packets) delays
// nothing but that name's next refresh. DnsResolver (dns_resolver.h, c-ares) is what the gateway
// runs; tests script answers or hold them back (tests/testing/fake_host_resolver.h).
//
// Thread-safe: Resolve may be called from any thread.

#ifndef LLMSERVE_GATEWAY_ROUTER_HOST_RESOLVER_H_
#define LLMSERVE_GATEWAY_ROUTER_HOST_RESOLVER_H_

#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

namespace llmserve::gateway {

class HostResolver {
 public:
  // Every address the name has, as "ip:port" ("[ip]:port" for IPv6), without duplicates. An
  // authoritative "no such name / no records" is an empty list (a headless Service scaled to zero
  // has none); UNAVAILABLE when no answer came (the caller keeps its last one); CANCELLED when the
  // resolver was destroyed first.
  using Callback = absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>) &&>;

  virtual ~HostResolver() = default;

  // Starts resolving `host` and returns at once; `done` runs exactly once, on the resolver's own
  // thread, or before Resolve returns when the answer is known at once: call it without holding a
  // lock that `done` takes.
  virtual void Resolve(const std::string& host, const std::string& port, Callback done) = 0;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_HOST_RESOLVER_H_
