// The gateway's view of its workers: where they are (a static list and/or a DNS name
// re-resolved periodically, e.g. a Kubernetes headless service), whether they are ready (gRPC
// health, readiness service name), what they serve (GetModelInfo) and how loaded they are, with
// their prefix-cache contents (a WatchLoad stream per worker, read by a callback reactor: no
// thread per worker).
//
// One monitor thread drives everything and never waits on I/O: every tick it starts the DNS
// lookups that are due (host_resolver.h: answers come back through callbacks), adds and drops
// workers from the answers, starts a probe (health, then model info, on gRPC's callback API) of
// each worker that has no live load stream and whose backoff has passed, cuts the streams of
// workers silent past their heartbeat, and aborts calls whose worker fell silent. So a worker that
// accepts connections and never answers, or a DNS server that never replies, costs one probe or
// lookup in flight and delays nothing else. A worker that fails is marked down and probed again
// with exponential backoff. Every change of a worker's state (a load report, a probe, a failure,
// a DNS change) publishes an immutable snapshot of the routable workers; Route() picks among the
// current snapshot's workers with the configured policy (routing_policy.h) and never takes the
// lock that discovery, probes and reports hold. The prefix index is the one thing it reads in
// place, under a reader lock that report handling holds only to apply a report's events: copying
// every worker's cached-block set on each report (5 per second per worker) would cost far more
// than it saves.
//
// The gateway's WorkerClient (worker_client.h). Thread-safe: every public method may be called
// from any thread.

#ifndef LLMSERVE_GATEWAY_ROUTER_WORKER_POOL_H_
#define LLMSERVE_GATEWAY_ROUTER_WORKER_POOL_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/clock.h"
#include "gateway/router/host_resolver.h"
#include "gateway/router/lora_adapter_call.h"
#include "gateway/router/prefix_index.h"
#include "gateway/router/prompt_routing_hashes.h"
#include "gateway/router/routing_policy.h"
#include "gateway/router/watched_call.h"
#include "gateway/router/worker_client.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"

namespace llmserve::gateway {

struct WorkerPoolOptions {
  // host:port of each worker.
  std::vector<std::string> workers;
  // name:port entries, each resolving to some workers' addresses (all A/AAAA records, e.g. one
  // Kubernetes headless Service per worker group), re-resolved every dns_refresh.
  std::vector<std::string> worker_dns;
  absl::Duration dns_refresh = absl::Seconds(10);
  // Resolves the worker_dns names (tests: a scripted or silent resolver); empty: DNS through
  // c-ares with the system's configuration (dns_resolver.h). An answer with no addresses empties
  // that name's workers; an error keeps its last answer.
  std::shared_ptr<HostResolver> resolver;
  // How often a worker without a live load stream is probed.
  absl::Duration probe_interval = absl::Seconds(1);
  // Deadline of each probe call (health, model info).
  absl::Duration probe_timeout = absl::Seconds(3);
  // WatchLoad interval asked of each worker.
  absl::Duration load_interval = absl::Milliseconds(200);
  // A call to a worker that receives nothing for this long is aborted (UNAVAILABLE; retried
  // elsewhere when it had no token yet). Zero: no limit. Calls are also aborted sooner when their
  // worker falls silent (no load report either) past its heartbeat window.
  absl::Duration stream_idle_timeout = absl::Minutes(5);
  // Backoff after a failure: doubles from the first value up to the second.
  absl::Duration backoff_initial = absl::Milliseconds(500);
  absl::Duration backoff_max = absl::Seconds(30);
  RoutingOptions routing;
  // How to reach workers: plaintext by default, TLS / mutual TLS when set.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The name the workers' certificates carry, when it is not the address dialled (workers found by
  // IP address through DNS usually have certificates for a service name).
  std::string tls_server_name;
  // What heartbeats, backoffs, idle timeouts and DNS refreshes are judged by (null: the real
  // clock; tests: a simulated one, which the monitor reads every 50 ms of real time). gRPC
  // deadlines stay on the real clock. Must outlive the pool.
  const common::Clock* clock = nullptr;
};

// INVALID_ARGUMENT naming the option: no workers at all, an address without a port, durations
// out of range.
absl::Status ValidateWorkerPoolOptions(const WorkerPoolOptions& options);

class WorkerPool final : public WorkerClient {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(const WorkerPoolOptions& options);
  ~WorkerPool() override;

  absl::StatusOr<RoutedWorker> Route(absl::string_view model, PromptRoutingHashes& prompt,
                                     const absl::flat_hash_set<std::string>& excluded) override;
  void ReportFailure(const std::string& address, const std::string& error) override;
  std::unique_ptr<WorkerCall> NewCall(const RoutedWorker& worker,
                                      worker::v1::GenerateRequest request,
                                      const WorkerCallOptions& options,
                                      std::shared_ptr<WorkerCallObserver> observer) override;
  void LoadLoraAdapter(const std::string& address,
                       const worker::v1::LoadLoraAdapterRequest& request, absl::Time deadline,
                       absl::AnyInvocable<void(absl::Status) &&> done) override;
  void UnloadLoraAdapter(const std::string& address, const std::string& lora_name,
                         absl::Time deadline,
                         absl::AnyInvocable<void(absl::Status) &&> done) override;
  void OnLoraAdapterMissing(const std::string& address, const std::string& lora_name) override;
  std::vector<WorkerStatus> Workers() const override;
  std::vector<std::string> KnownModels() const override;
  bool AnyReady() const override;
  RoutingPolicy routing_policy() const override { return options_.routing.policy; }
  const common::Clock* clock() const { return clock_; }

  // Watches `call`, a call to the worker at `address`, until Unwatch (which must come before the
  // call is destroyed): the monitor aborts it when it or its worker falls silent.
  void Watch(const std::string& address, WatchedCall* call);
  void Unwatch(WatchedCall* call);

 private:
  // What Route reads: the workers that may take a request now, as of the last state change.
  struct RoutableWorker {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<const worker::v1::ModelInfo> model_info;
    int32_t running = 0;
    int32_t waiting = 0;
    int32_t kv_blocks_total = 0;
    int32_t kv_blocks_free = 0;
    // Sorted.
    std::vector<std::string> lora_adapters;
  };
  struct RoutingSnapshot {
    std::vector<RoutableWorker> workers;
    absl::flat_hash_set<std::string> known_models;
  };

  class LoadStream;
  class ProbeCall;
  // A LoRA adapter loaded (true) or unloaded through this pool that the worker's load reports do
  // not say yet: assumed until a report says it, or until `until` (another gateway may have undone
  // it meanwhile).
  struct LoraChange {
    bool loaded = false;
    absl::Time until;
  };
  // What a probe found: health and, when serving, the model info.
  struct ProbeResult {
    absl::Status status;
    std::shared_ptr<const worker::v1::ModelInfo> model_info;
  };
  // Where the resolver's callbacks find the pool: cleared, under its lock, when the pool goes, so
  // that a resolver that answers late (or a test's that never does) calls into nothing.
  struct ResolverTarget {
    absl::Mutex mutex;
    WorkerPool* pool ABSL_GUARDED_BY(mutex) = nullptr;
  };
  // One worker_dns entry.
  struct DnsName {
    std::string host;
    std::string port;
    // The last answer, kept through errors (a DNS hiccup must not empty the pool).
    std::vector<std::string> addresses;
    // The problem last logged for it (empty: none), so that it is logged when it changes.
    std::string problem;
    absl::Time next_lookup = absl::InfinitePast();
    bool in_flight = false;
  };
  struct Worker {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    bool ready = false;
    bool draining = false;
    // The live WatchLoad stream, or null (then the monitor probes it when next_probe comes).
    LoadStream* stream = nullptr;
    // The probe in flight, or null.
    ProbeCall* probe = nullptr;
    absl::Time last_report_time = absl::InfinitePast();
    std::shared_ptr<const worker::v1::ModelInfo> model_info;
    worker::v1::LoadReport last_report;
    std::string last_error;
    absl::Time next_probe = absl::InfinitePast();
    absl::Duration backoff;
    // Bumped when the worker is marked down, so a stale stream's reports are ignored.
    uint64_t generation = 0;
    // By adapter name.
    absl::flat_hash_map<std::string, LoraChange> lora_changes;
  };

  WorkerPool(const WorkerPoolOptions& options, std::shared_ptr<HostResolver> resolver);
  void MonitorLoop();
  // How long a worker may say nothing (no load report) before it is treated as gone.
  absl::Duration HeartbeatWindow() const {
    return std::max(3 * options_.load_interval, absl::Seconds(5));
  }
  // The worker_dns names whose lookup is due, marked in flight: the caller starts them after
  // releasing the lock.
  std::vector<std::string> DueLookups(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StartLookup(const std::string& name);
  void OnResolved(const std::string& name, absl::StatusOr<std::vector<std::string>> answer);
  // Adds the workers of the static list and of the last DNS answers, drops the others.
  void Discover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A probe of `worker` (health + model info), registered with it; the caller starts it after
  // releasing the lock.
  ProbeCall* NewProbe(Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A probe finished: when the worker is ready, its load stream starts.
  void OnProbeDone(const std::string& address, const ProbeCall* probe, ProbeResult result);
  // ... and is deleted: the destructor waits for every probe to get here.
  void OnProbeDeleted();
  void MarkDown(Worker& worker, const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Publishes the routing snapshot of the workers' state now; after every change of it.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::shared_ptr<const RoutingSnapshot> snapshot() const;
  // Aborts the watched calls that are idle past stream_idle_timeout, or whose worker has been
  // silent (no load report, no message on the call) for `silence`.
  void AbortSilentCalls(absl::Duration silence);
  void OnReport(const std::string& address, uint64_t generation,
                const worker::v1::LoadReport& report);
  // A stream ended: no longer the worker's (no Cancel reaches it after this).
  void OnStreamDone(const std::string& address, uint64_t generation, const grpc::Status& status,
                    const LoadStream* stream);
  // ... and is deleted: the destructor waits for every stream to get here.
  void OnStreamDeleted();
  // Starts a LoadLoraAdapter (`load` set) or UnloadLoraAdapter call of adapter `name`.
  void StartLoraCall(const std::string& address, const worker::v1::LoadLoraAdapterRequest* load,
                     const std::string& name, absl::Time deadline,
                     absl::AnyInvocable<void(absl::Status) &&> done);
  // `worker`'s adapters now: its report's (or model info's) with its unconfirmed changes.
  std::vector<std::string> LoraAdaptersOf(const Worker& worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const WorkerPoolOptions options_;
  const common::Clock* const clock_;
  const std::shared_ptr<HostResolver> resolver_;
  const std::shared_ptr<ResolverTarget> resolver_target_ = std::make_shared<ResolverTarget>();
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_set<std::string> known_models_ ABSL_GUARDED_BY(mutex_);
  // Written with mutex_ held too (reports, failures, discovery); read by Route without it.
  mutable absl::Mutex prefix_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  PrefixIndex prefix_index_ ABSL_GUARDED_BY(prefix_mutex_);
  // The current routing snapshot: the lock guards only the pointer's copy.
  mutable absl::Mutex snapshot_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  std::shared_ptr<const RoutingSnapshot> snapshot_ ABSL_GUARDED_BY(snapshot_mutex_);
  // Whose turn it is among equally loaded workers; its own lock, so that two requests routed at
  // the same moment take different turns.
  absl::Mutex turn_mutex_;
  uint64_t round_robin_ ABSL_GUARDED_BY(turn_mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  int live_streams_ ABSL_GUARDED_BY(mutex_) = 0;
  int live_probes_ ABSL_GUARDED_BY(mutex_) = 0;
  // LoRA adapter calls in flight (cancelled by the destructor), and those not deleted yet.
  absl::flat_hash_set<LoraAdapterCall*> lora_calls_ ABSL_GUARDED_BY(mutex_);
  int live_lora_calls_ ABSL_GUARDED_BY(mutex_) = 0;
  // The worker_dns entries, by their "name:port".
  absl::flat_hash_map<std::string, DnsName> dns_names_ ABSL_GUARDED_BY(mutex_);
  // Calls in flight, by the address of their worker. A lock of its own: calls come and go on
  // every request, and must not wait for routing.
  absl::Mutex calls_mutex_ ABSL_ACQUIRED_AFTER(mutex_);
  absl::flat_hash_map<WatchedCall*, std::string> calls_ ABSL_GUARDED_BY(calls_mutex_);
  // Watched calls per worker address (what Route counts as this gateway's own in-flight load).
  absl::flat_hash_map<std::string, int32_t> calls_per_worker_ ABSL_GUARDED_BY(calls_mutex_);
  std::thread monitor_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ROUTER_WORKER_POOL_H_
