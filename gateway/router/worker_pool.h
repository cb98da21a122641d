// The gateway's view of its workers: where they are (a static list and/or a DNS name
// re-resolved periodically, e.g. a Kubernetes headless service), whether they are ready (gRPC
// health, readiness service name), what they serve (GetModelInfo) and how loaded they are, with
// their prefix-cache contents (a WatchLoad stream per worker, read by a callback reactor: no
// thread per worker).
//
// One monitor thread discovers workers and probes the ones not streaming; a worker that fails
// is marked down and retried with exponential backoff. Route() picks a worker for a request with
// the configured policy (routing_policy.h) among the ready workers serving the model.
//
// Thread-safe: every public method may be called from any thread.

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
#include "gateway/router/prefix_index.h"
#include "gateway/router/routing_policy.h"
#include "gateway/router/watched_call.h"
#include "llmserve/worker/v1/worker.grpc.pb.h"

namespace llmserve::gateway {

struct WorkerPoolOptions {
  // host:port of each worker.
  std::vector<std::string> workers;
  // name:port entries, each resolving to some workers' addresses (all A/AAAA records, e.g. one
  // Kubernetes headless Service per worker group), re-resolved every dns_refresh.
  std::vector<std::string> worker_dns;
  absl::Duration dns_refresh = absl::Seconds(10);
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
};

// INVALID_ARGUMENT naming the option: no workers at all, an address without a port, durations
// out of range.
absl::Status ValidateWorkerPoolOptions(const WorkerPoolOptions& options);

// A worker chosen for one request.
struct RoutedWorker {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<const worker::v1::ModelInfo> model_info;
  RoutingDecision decision;
};

// What the pool knows of one worker (for /readyz, ListModels, metrics and tests).
struct WorkerStatus {
  std::string address;
  bool ready = false;
  bool draining = false;
  // Set once GetModelInfo answered.
  std::shared_ptr<const worker::v1::ModelInfo> model_info;
  worker::v1::LoadReport last_report;
  size_t cached_blocks = 0;
  std::string last_error;
};

class WorkerPool {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(const WorkerPoolOptions& options);
  ~WorkerPool();

  // A ready, non-draining worker serving `model` (empty: any model) for a prompt of
  // `prompt_tokens` with `cache_salt`, skipping `excluded` addresses (earlier failed attempts).
  // NOT_FOUND when no worker ever served the model; UNAVAILABLE when none is ready now.
  absl::StatusOr<RoutedWorker> Route(absl::string_view model,
                                     absl::Span<const int32_t> prompt_tokens,
                                     absl::string_view cache_salt,
                                     const absl::flat_hash_set<std::string>& excluded = {});

  // A call to `address` failed before its first token: mark it down until probes bring it back.
  void ReportFailure(const std::string& address, const std::string& error);

  std::vector<WorkerStatus> Workers() const;
  // Watches `call`, a call to the worker at `address`, until Unwatch (which must come before the
  // call is destroyed): the monitor aborts it when it or its worker falls silent.
  void Watch(const std::string& address, WatchedCall* call);
  void Unwatch(WatchedCall* call);

  // Every model a worker has described since the pool started (also after its workers left).
  std::vector<std::string> KnownModels() const;
  RoutingPolicy routing_policy() const { return options_.routing.policy; }
  bool AnyReady() const;

 private:
  class LoadStream;
  struct Worker {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<worker::v1::Worker::Stub> stub;
    bool ready = false;
    bool draining = false;
    // The live WatchLoad stream, or null (then the monitor probes it when next_probe comes).
    LoadStream* stream = nullptr;
    absl::Time last_report_time = absl::InfinitePast();
    std::shared_ptr<const worker::v1::ModelInfo> model_info;
    worker::v1::LoadReport last_report;
    std::string last_error;
    absl::Time next_probe = absl::InfinitePast();
    absl::Duration backoff;
    // Bumped when the worker is marked down, so a stale stream's reports are ignored.
    uint64_t generation = 0;
  };

  explicit WorkerPool(const WorkerPoolOptions& options);
  void MonitorLoop();
  // How long a worker may say nothing (no load report) before it is treated as gone.
  absl::Duration HeartbeatWindow() const {
    return std::max(3 * options_.load_interval, absl::Seconds(5));
  }
  // Resolves every worker_dns entry; called without the lock, as a slow resolver must not stall
  // routing. An entry that fails keeps its last answer (a DNS hiccup must not empty the pool).
  void ResolveWorkerDns();
  // Adds the workers of the static list and of the last DNS answers, drops the others.
  void Discover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Probes one worker (health + model info) and, when ready, starts its load stream.
  void Probe(const std::string& address);
  void MarkDown(Worker& worker, const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
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

  const WorkerPoolOptions options_;
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mutex_);
  PrefixIndex prefix_index_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_set<std::string> known_models_ ABSL_GUARDED_BY(mutex_);
  uint64_t round_robin_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  int live_streams_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time next_dns_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  // The last answer for each worker_dns entry, and the problem last logged for it (empty: none).
  absl::flat_hash_map<std::string, std::vector<std::string>> dns_addresses_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, std::string> dns_problems_ ABSL_GUARDED_BY(mutex_);
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
