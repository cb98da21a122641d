#include "gateway/router/worker_pool.h"

#include <grpcpp/generic/generic_stub.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "common/base/worker_api_limits.h"
#include "gateway/router/grpc_worker_call.h"

namespace llmserve::gateway {
namespace {

// The health service name a worker reports readiness under (worker_server.h).
constexpr char kReadinessService[] = "llmserve.worker.v1.Worker";
constexpr absl::Duration kTick = absl::Milliseconds(50);

// Splits "host:port" (or "[v6]:port"); nullopt without a valid port.
std::optional<std::pair<std::string, std::string>> SplitHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return std::nullopt;
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return std::nullopt;
  }
  std::string host(address.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, std::string(address.substr(colon + 1)));
}

// Every address `name` resolves to, as "ip:port" ("[ip]:port" for IPv6).
absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  // An authoritative "no such name / no records" is an answer: a headless Service whose pods are
  // all gone (scaled to zero) has none. Other failures (EAI_AGAIN: the resolver is unreachable)
  // are errors, and the caller keeps the last answer.
  bool no_records = error == EAI_NONAME;
#ifdef EAI_NODATA
  no_records = no_records || error == EAI_NODATA;
#endif
  if (no_records) return std::vector<std::string>();
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve worker DNS name ", host, ": ", gai_strerror(error)));
  }
  std::vector<std::string> addresses;
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    char text[NI_MAXHOST];
    if (getnameinfo(entry->ai_addr, entry->ai_addrlen, text, sizeof(text), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
      continue;
    }
    std::string address = entry->ai_family == AF_INET6 ? absl::StrCat("[", text, "]:", port)
                                                       : absl::StrCat(text, ":", port);
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
      addresses.push_back(std::move(address));
    }
  }
  freeaddrinfo(result);
  return addresses;
}

// grpc.health.v1.Health/Check without the health stubs: the request is {service}, the answer
// {status} with SERVING = 1. Returns whether the service is SERVING.
absl::StatusOr<bool> CheckServing(const std::shared_ptr<grpc::Channel>& channel,
                                  absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  std::string request =
      absl::StrCat("\n", std::string(1, sizeof(kReadinessService) - 1), kReadinessService);
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1), response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request_buffer,
                 &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("health check failed: ", status.error_message()));
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::UnavailableError("unreadable health answer");
  std::string bytes;
  for (const grpc::Slice& part : slices) {
    bytes.append(reinterpret_cast<const char*>(part.begin()), part.size());
  }
  return bytes == std::string("\x08\x01", 2);
}

}  // namespace

// The WatchLoad stream of one worker: reports go to the pool as they come.
class WorkerPool::LoadStream final : public grpc::ClientReadReactor<worker::v1::LoadReport> {
 public:
  LoadStream(WorkerPool* pool, std::string address, uint64_t generation)
      : pool_(pool), address_(std::move(address)), generation_(generation) {}

  void Start(worker::v1::Worker::Stub* stub, absl::Duration interval) {
    request_.set_interval_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(interval)));
    stub->async()->WatchLoad(&context_, &request_, this);
    StartRead(&report_);
    StartCall();
  }

  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    pool_->OnReport(address_, generation_, report_);
    StartRead(&report_);
  }

  void OnDone(const grpc::Status& status) override {
    pool_->OnStreamDone(address_, generation_, status, this);
    // The pool counts the stream gone only once its call is torn down (ClientContext included):
    // after that the pool may be destroyed and the process exit, and a context destroyed later
    // raced gRPC's own shutdown ("assertion failed: prior > 0" at exit).
    WorkerPool* const pool = pool_;
    delete this;
    pool->OnStreamDeleted();
  }

 private:
  WorkerPool* const pool_;
  const std::string address_;
  const uint64_t generation_;
  grpc::ClientContext context_;
  worker::v1::WatchLoadRequest request_;
  worker::v1::LoadReport report_;
};

absl::Status ValidateWorkerPoolOptions(const WorkerPoolOptions& options) {
  if (options.workers.empty() && options.worker_dns.empty()) {
    return absl::InvalidArgumentError("no workers: give --workers host:port,... or --worker_dns");
  }
  for (const std::string& address : options.workers) {
    if (!SplitHostPort(address).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers: \"", address, "\" is not host:port"));
    }
  }
  for (const std::string& name : options.worker_dns) {
    if (!SplitHostPort(name).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--worker_dns: \"", name, "\" is not name:port"));
    }
  }
  if (options.load_interval < absl::Milliseconds(50) || options.load_interval > absl::Seconds(60)) {
    return absl::InvalidArgumentError("the load report interval must be in [50ms, 60s]");
  }
  if (options.probe_timeout <= absl::ZeroDuration() ||
      options.probe_interval <= absl::ZeroDuration() ||
      options.backoff_initial <= absl::ZeroDuration() ||
      options.dns_refresh <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("probe, backoff and DNS refresh durations must be positive");
  }
  if (options.backoff_max < options.backoff_initial || options.backoff_max > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker_backoff_max must be in [", absl::FormatDuration(options.backoff_initial),
        " (the first backoff), 1h], got ", absl::FormatDuration(options.backoff_max)));
  }
  if (options.stream_idle_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stream_idle_timeout must be 0 (no limit) or positive, got ",
                     absl::FormatDuration(options.stream_idle_timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(const WorkerPoolOptions& options) {
  if (absl::Status valid = ValidateWorkerPoolOptions(options); !valid.ok()) return valid;
  std::unique_ptr<WorkerPool> pool(new WorkerPool(options));
  pool->monitor_ = std::thread([raw = pool.get()] { raw->MonitorLoop(); });
  if (!options.worker_dns.empty()) {
    pool->dns_thread_ = std::thread([raw = pool.get()] { raw->DnsLoop(); });
  }
  return pool;
}

WorkerPool::WorkerPool(const WorkerPoolOptions& options)
    : options_(options), snapshot_(std::make_shared<RoutingSnapshot>()) {}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
  // A resolver call in progress is waited for (getaddrinfo cannot be interrupted).
  if (dns_thread_.joinable()) dns_thread_.join();
  absl::MutexLock lock(&mutex_);
  for (auto& [address, worker] : workers_) {
    if (worker->stream != nullptr) worker->stream->Cancel();
  }
  // Streams call back into the pool until their OnDone: wait for every one.
  mutex_.Await(absl::Condition(
      +[](int* live) { return *live == 0; }, &live_streams_));
}

void WorkerPool::DnsLoop() {
  while (true) {
    ResolveWorkerDns();
    absl::MutexLock lock(&mutex_);
    mutex_.AwaitWithTimeout(absl::Condition(&stopping_), options_.dns_refresh);
    if (stopping_) return;
  }
}

void WorkerPool::MonitorLoop() {
  while (true) {
    std::vector<std::string> to_probe;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.AwaitWithTimeout(absl::Condition(&stopping_), kTick);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      Discover();
      for (auto& [address, worker] : workers_) {
        if (worker->stream != nullptr && now - worker->last_report_time > HeartbeatWindow()) {
          // Silent past the heartbeat: treat as gone (OnStreamDone marks it down).
          worker->stream->Cancel();
        }
        if (worker->stream == nullptr && now >= worker->next_probe) to_probe.push_back(address);
      }
    }
    AbortSilentCalls(HeartbeatWindow());
    for (const std::string& address : to_probe) Probe(address);
  }
}

void WorkerPool::Watch(const std::string& address, WatchedCall* call) {
  absl::MutexLock lock(&calls_mutex_);
  if (calls_.emplace(call, address).second) ++calls_per_worker_[address];
}

void WorkerPool::Unwatch(WatchedCall* call) {
  absl::MutexLock lock(&calls_mutex_);
  auto it = calls_.find(call);
  if (it == calls_.end()) return;
  auto count = calls_per_worker_.find(it->second);
  if (--count->second == 0) calls_per_worker_.erase(count);
  calls_.erase(it);
}

void WorkerPool::AbortSilentCalls(absl::Duration silence) {
  const absl::Time now = absl::Now();
  // When each worker was last heard from; a worker no longer in the pool (it left DNS) is not
  // judged by its heartbeat: its calls run on, bounded by the idle timeout.
  absl::flat_hash_map<std::string, absl::Time> last_heard;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [address, worker] : workers_) last_heard[address] = worker->last_report_time;
  }
  absl::MutexLock lock(&calls_mutex_);
  for (auto it = calls_.begin(); it != calls_.end();) {
    WatchedCall* call = it->first;
    const std::string& address = it->second;
    const absl::Duration idle = now - call->last_activity();
    std::string reason;
    if (options_.stream_idle_timeout > absl::ZeroDuration() &&
        idle > options_.stream_idle_timeout) {
      reason = absl::StrCat("the worker ", address, " sent nothing on this request for ",
                            absl::FormatDuration(absl::Trunc(idle, absl::Seconds(1))),
                            " (--stream_idle_timeout ",
                            absl::FormatDuration(options_.stream_idle_timeout), ")");
    } else if (const auto heard = last_heard.find(address);
               heard != last_heard.end() && idle > silence && now - heard->second > silence) {
      reason = absl::StrCat("the worker ", address, " stopped responding (no load report and ",
                            "nothing on this request for ",
                            absl::FormatDuration(absl::Trunc(idle, absl::Seconds(1))), ")");
    }
    if (reason.empty()) {
      ++it;
      continue;
    }
    LLMSERVE_LOG(WARNING) << "aborting a call: " << reason;
    call->Abort(absl::UnavailableError(reason));
    auto count = calls_per_worker_.find(address);
    if (--count->second == 0) calls_per_worker_.erase(count);
    calls_.erase(it++);
  }
}

void WorkerPool::ResolveWorkerDns() {
  for (const std::string& name : options_.worker_dns) {
    const auto [host, port] = *SplitHostPort(name);
    absl::StatusOr<std::vector<std::string>> resolved =
        options_.resolver ? options_.resolver(host, port) : Resolve(host, port);
    absl::MutexLock lock(&mutex_);
    // Logged when it changes, not every refresh.
    std::string& last_problem = dns_problems_[name];
    std::string problem;
    if (!resolved.ok()) {
      problem = absl::StrCat(resolved.status().message(), " (keeping its last ",
                             dns_addresses_[name].size(), " addresses)");
    } else {
      if (resolved->empty()) problem = absl::StrCat("worker DNS name ", name, " has no addresses");
      dns_addresses_[name] = *std::move(resolved);
    }
    if (problem != last_problem) {
      if (problem.empty()) {
        LLMSERVE_LOG(INFO) << "worker DNS name " << name << " resolves again";
      } else {
        LLMSERVE_LOG(WARNING) << problem;
      }
      last_problem = std::move(problem);
    }
  }
}

void WorkerPool::Discover() {
  absl::flat_hash_set<std::string> wanted(options_.workers.begin(), options_.workers.end());
  for (const auto& [name, addresses] : dns_addresses_) {
    wanted.insert(addresses.begin(), addresses.end());
  }
  for (const std::string& address : wanted) {
    if (workers_.contains(address)) continue;
    auto worker = std::make_unique<Worker>();
    worker->address = address;
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(common::kWorkerApiMaxMessageBytes);
    if (!options_.tls_server_name.empty()) {
      arguments.SetSslTargetNameOverride(options_.tls_server_name);
    }
    worker->channel = grpc::CreateCustomChannel(
        address,
        options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
        arguments);
    worker->stub = worker::v1::Worker::NewStub(worker->channel);
    worker->backoff = options_.backoff_initial;
    workers_[address] = std::move(worker);
  }
  bool changed = false;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (wanted.contains(it->first)) {
      ++it;
      continue;
    }
    // Gone from DNS. Its stream (if any) ends on its own: OnStreamDone finds no worker.
    if (it->second->stream != nullptr) it->second->stream->Cancel();
    {
      absl::MutexLock prefix_lock(&prefix_mutex_);
      prefix_index_.Remove(it->first);
    }
    workers_.erase(it++);
    changed = true;
  }
  if (changed) PublishLocked();
}

void WorkerPool::Probe(const std::string& address) {
  std::shared_ptr<grpc::Channel> channel;
  worker::v1::Worker::Stub* stub = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    const auto it = workers_.find(address);
    if (it == workers_.end() || it->second->stream != nullptr) return;
    channel = it->second->channel;
    stub = it->second->stub.get();  // lives as long as the worker entry; see below
  }
  absl::StatusOr<bool> serving = CheckServing(channel, options_.probe_timeout);
  std::shared_ptr<worker::v1::ModelInfo> info;
  grpc::Status info_status;
  if (serving.ok() && *serving) {
    info = std::make_shared<worker::v1::ModelInfo>();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.probe_timeout));
    // The stub is only destroyed by Discover on this same thread, so it is alive here.
    info_status = stub->GetModelInfo(&context, worker::v1::GetModelInfoRequest(), info.get());
  }
  absl::MutexLock lock(&mutex_);
  const auto it = workers_.find(address);
  if (it == workers_.end() || stopping_) return;
  Worker& worker = *it->second;
  if (!serving.ok()) return MarkDown(worker, std::string(serving.status().message()));
  if (!*serving) return MarkDown(worker, "not ready (health NOT_SERVING)");
  if (!info_status.ok()) {
    return MarkDown(worker, absl::StrCat("GetModelInfo failed: ", info_status.error_message()));
  }
  worker.model_info = std::move(info);
  if (known_models_.insert(worker.model_info->model_name()).second) PublishLocked();
  ++worker.generation;
  worker.last_report_time = absl::Now();
  auto* stream = new LoadStream(this, address, worker.generation);
  worker.stream = stream;
  ++live_streams_;
  // Ready once the first report (a snapshot of its cache) arrives.
  stream->Start(worker.stub.get(), options_.load_interval);
}

void WorkerPool::MarkDown(Worker& worker, const std::string& error) {
  worker.ready = false;
  worker.last_error = error;
  ++worker.generation;
  worker.next_probe = absl::Now() + worker.backoff;
  worker.backoff = std::min(2 * worker.backoff, options_.backoff_max);
  {
    absl::MutexLock prefix_lock(&prefix_mutex_);
    prefix_index_.Remove(worker.address);
  }
  PublishLocked();
}

void WorkerPool::PublishLocked() {
  auto snapshot = std::make_shared<RoutingSnapshot>();
  snapshot->known_models = known_models_;
  for (const auto& [address, worker] : workers_) {
    if (!worker->ready || worker->draining || worker->model_info == nullptr) continue;
    const worker::v1::LoadReport& load = worker->last_report;
    snapshot->workers.push_back({.address = address,
                                 .channel = worker->channel,
                                 .model_info = worker->model_info,
                                 .running = static_cast<int32_t>(load.running()),
                                 .waiting = static_cast<int32_t>(load.waiting()),
                                 .kv_blocks_total = static_cast<int32_t>(load.kv_blocks_total()),
                                 .kv_blocks_free = static_cast<int32_t>(load.kv_blocks_free())});
  }
  // A fixed order, so that turns among equals go round the same way whatever the map's order.
  std::sort(snapshot->workers.begin(), snapshot->workers.end(),
            [](const RoutableWorker& a, const RoutableWorker& b) { return a.address < b.address; });
  absl::MutexLock lock(&snapshot_mutex_);
  snapshot_ = std::move(snapshot);
}

std::shared_ptr<const WorkerPool::RoutingSnapshot> WorkerPool::snapshot() const {
  absl::MutexLock lock(&snapshot_mutex_);
  return snapshot_;
}

void WorkerPool::OnReport(const std::string& address, uint64_t generation,
                          const worker::v1::LoadReport& report) {
  absl::MutexLock lock(&mutex_);
  const auto it = workers_.find(address);
  if (it == workers_.end() || it->second->generation != generation) return;
  Worker& worker = *it->second;
  worker.last_report = report;
  worker.last_report_time = absl::Now();
  worker.draining = report.draining();
  worker.ready = !report.draining();
  worker.backoff = options_.backoff_initial;
  worker.last_error.clear();
  {
    absl::MutexLock prefix_lock(&prefix_mutex_);
    prefix_index_.Apply(address, report);
  }
  PublishLocked();
}

void WorkerPool::OnStreamDone(const std::string& address, uint64_t generation,
                              const grpc::Status& status, const LoadStream* stream) {
  absl::MutexLock lock(&mutex_);
  const auto it = workers_.find(address);
  if (it == workers_.end()) return;
  Worker& worker = *it->second;
  if (worker.stream == stream) worker.stream = nullptr;
  if (worker.generation == generation && !stopping_) {
    MarkDown(worker, status.ok() ? "load stream ended (worker stopping)"
                                 : absl::StrCat("load stream failed: ", status.error_message()));
  }
}

void WorkerPool::OnStreamDeleted() {
  absl::MutexLock lock(&mutex_);
  --live_streams_;
}

void WorkerPool::ReportFailure(const std::string& address, const std::string& error) {
  absl::MutexLock lock(&mutex_);
  const auto it = workers_.find(address);
  if (it == workers_.end()) return;
  MarkDown(*it->second, error);
  if (it->second->stream != nullptr) it->second->stream->Cancel();
}

absl::StatusOr<RoutedWorker> WorkerPool::Route(absl::string_view model, PromptRoutingHashes& prompt,
                                               const absl::flat_hash_set<std::string>& excluded) {
  const std::shared_ptr<const RoutingSnapshot> current = snapshot();
  absl::flat_hash_map<std::string, int32_t> in_flight;
  {
    absl::MutexLock calls_lock(&calls_mutex_);
    in_flight = calls_per_worker_;
  }
  std::vector<const RoutableWorker*> eligible;
  std::vector<RoutingCandidate> candidates;
  {
    absl::ReaderMutexLock prefix_lock(&prefix_mutex_);
    for (const RoutableWorker& worker : current->workers) {
      if (excluded.contains(worker.address)) continue;
      if (!model.empty() && worker.model_info->model_name() != model) continue;
      const auto flying = in_flight.find(worker.address);
      eligible.push_back(&worker);
      candidates.push_back({.worker = worker.address,
                            .running = worker.running,
                            .waiting = worker.waiting,
                            .kv_blocks_total = worker.kv_blocks_total,
                            .kv_blocks_free = worker.kv_blocks_free,
                            .matched_blocks = prefix_index_.MatchedBlocks(
                                worker.address, prompt.ForBlockSize(static_cast<int32_t>(
                                                    worker.model_info->block_size()))),
                            .in_flight = flying == in_flight.end() ? 0 : flying->second});
    }
  }
  std::optional<RoutingDecision> decision;
  {
    absl::MutexLock turn_lock(&turn_mutex_);
    decision = ChooseWorker(candidates, options_.routing, &round_robin_);
  }
  if (!decision.has_value()) {
    if (!model.empty() && !current->known_models.contains(model)) {
      std::vector<std::string> known(current->known_models.begin(), current->known_models.end());
      std::sort(known.begin(), known.end());
      return absl::NotFoundError(
          absl::StrCat("model \"", model, "\" is not served here; known models: ",
                       known.empty() ? "none yet" : absl::StrJoin(known, ", ")));
    }
    return absl::UnavailableError(absl::StrCat("no ready worker", model.empty() ? "" : " for ",
                                               model, excluded.empty() ? "" : " left to try"));
  }
  const RoutableWorker& chosen = *eligible[decision->index];
  return RoutedWorker{.address = chosen.address,
                      .model_info = chosen.model_info,
                      .decision = *decision,
                      .connection = chosen.channel};
}

std::unique_ptr<WorkerCall> WorkerPool::NewCall(const RoutedWorker& worker,
                                                worker::v1::GenerateRequest request,
                                                const WorkerCallOptions& options,
                                                std::shared_ptr<WorkerCallObserver> observer) {
  return std::make_unique<GrpcWorkerCall>(
      this, worker.address, std::static_pointer_cast<grpc::Channel>(worker.connection),
      std::move(request), options, std::move(observer));
}

std::vector<WorkerStatus> WorkerPool::Workers() const {
  absl::MutexLock lock(&mutex_);
  absl::ReaderMutexLock prefix_lock(&prefix_mutex_);
  std::vector<WorkerStatus> statuses;
  for (const auto& [address, worker] : workers_) {
    statuses.push_back({.address = address,
                        .ready = worker->ready,
                        .draining = worker->draining,
                        .model_info = worker->model_info,
                        .last_report = worker->last_report,
                        .cached_blocks = prefix_index_.NumBlocks(address),
                        .last_error = worker->last_error});
  }
  std::sort(statuses.begin(), statuses.end(),
            [](const WorkerStatus& a, const WorkerStatus& b) { return a.address < b.address; });
  return statuses;
}

std::vector<std::string> WorkerPool::KnownModels() const {
  const std::shared_ptr<const RoutingSnapshot> current = snapshot();
  std::vector<std::string> models(current->known_models.begin(), current->known_models.end());
  std::sort(models.begin(), models.end());
  return models;
}

bool WorkerPool::AnyReady() const { return !snapshot()->workers.empty(); }

}  // namespace llmserve::gateway
