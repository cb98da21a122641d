#include "gateway/router/worker_pool.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "common/base/worker_api_limits.h"
#include "gateway/router/dns_resolver.h"
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

}  // namespace

// The WatchLoad stream of one worker: reports go to the pool as they come.
class WorkerPool::LoadStream final : public grpc::ClientReadReactor<worker::v1::LoadReport> {
 public:
  LoadStream(WorkerPool* pool, std::string address, uint64_t generation)
      : pool_(pool), address_(std::move(address)), generation_(generation) {}

  void Start(const std::shared_ptr<grpc::Channel>& channel, absl::Duration interval) {
    request_.set_interval_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(interval)));
    // A stub of its own: the worker's entry (and the channel's other users) may go first.
    stub_ = worker::v1::Worker::NewStub(channel);
    stub_->async()->WatchLoad(&context_, &request_, this);
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
  std::unique_ptr<worker::v1::Worker::Stub> stub_;
  grpc::ClientContext context_;
  worker::v1::WatchLoadRequest request_;
  worker::v1::LoadReport report_;
};

// One probe of a worker on gRPC's callback API: grpc.health.v1.Health/Check (through the generic
// stub: the request is {service}, the answer {status} with SERVING = 1), then GetModelInfo when
// it serves. Its result goes to the pool, and it deletes itself.
class WorkerPool::ProbeCall {
 public:
  ProbeCall(WorkerPool* pool, std::string address, std::shared_ptr<grpc::Channel> channel,
            absl::Duration timeout)
      : pool_(pool),
        address_(std::move(address)),
        channel_(std::move(channel)),
        deadline_(absl::ToChronoTime(absl::Now() + timeout)),
        generic_stub_(channel_),
        stub_(worker::v1::Worker::NewStub(channel_)) {
    health_context_.set_deadline(deadline_);
    info_context_.set_deadline(deadline_);
  }

  void Start() {
    const std::string request =
        absl::StrCat("\n", std::string(1, sizeof(kReadinessService) - 1), kReadinessService);
    grpc::Slice slice(request);
    health_request_ = grpc::ByteBuffer(&slice, 1);
    generic_stub_.UnaryCall(&health_context_, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                            &health_request_, &health_response_,
                            [this](grpc::Status status) { OnHealth(status); });
  }

  // Ends the probe soon (its result: CANCELLED). Either context may not have started its call:
  // gRPC cancels a call at its start when its context was cancelled before.
  void Cancel() {
    health_context_.TryCancel();
    info_context_.TryCancel();
  }

 private:
  // Whether a health answer ({status}, SERVING = 1) says SERVING. Read in place: no grpc::Slice
  // of ours takes (and frees) the transport's buffers, whose reuse inside gRPC TSan cannot see.
  static absl::StatusOr<bool> Serving(grpc::ByteBuffer& response) {
    std::string bytes;
    {
      grpc::ProtoBufferReader reader(&response);
      if (!reader.status().ok()) return absl::UnavailableError("unreadable health answer");
      const void* data = nullptr;
      int size = 0;
      while (reader.Next(&data, &size)) bytes.append(static_cast<const char*>(data), size);
    }
    response.Clear();
    return bytes == std::string("\x08\x01", 2);
  }

  void OnHealth(const grpc::Status& status) {
    if (!status.ok()) {
      return Finish(
          {absl::UnavailableError(absl::StrCat("health check failed: ", status.error_message()))});
    }
    const absl::StatusOr<bool> serving = Serving(health_response_);
    if (!serving.ok()) return Finish({serving.status()});
    if (!*serving) return Finish({absl::UnavailableError("not ready (health NOT_SERVING)")});
    info_ = std::make_shared<worker::v1::ModelInfo>();
    stub_->async()->GetModelInfo(&info_context_, &info_request_, info_.get(),
                                 [this](grpc::Status status) { OnModelInfo(status); });
  }

  void OnModelInfo(const grpc::Status& status) {
    if (!status.ok()) {
      return Finish(
          {absl::UnavailableError(absl::StrCat("GetModelInfo failed: ", status.error_message()))});
    }
    Finish({absl::OkStatus(), std::move(info_)});
  }

  void Finish(ProbeResult result) {
    pool_->OnProbeDone(address_, this, std::move(result));
    // As for streams: counted gone only once its contexts are torn down.
    WorkerPool* const pool = pool_;
    delete this;
    pool->OnProbeDeleted();
  }

  WorkerPool* const pool_;
  const std::string address_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::chrono::system_clock::time_point deadline_;
  grpc::GenericStub generic_stub_;
  std::unique_ptr<worker::v1::Worker::Stub> stub_;
  grpc::ClientContext health_context_;
  grpc::ByteBuffer health_request_;
  grpc::ByteBuffer health_response_;
  grpc::ClientContext info_context_;
  worker::v1::GetModelInfoRequest info_request_;
  std::shared_ptr<worker::v1::ModelInfo> info_;
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
  std::shared_ptr<HostResolver> resolver = options.resolver;
  if (resolver == nullptr && !options.worker_dns.empty()) {
    absl::StatusOr<std::unique_ptr<DnsResolver>> dns = DnsResolver::Create({});
    if (!dns.ok()) return dns.status();
    resolver = *std::move(dns);
  }
  std::unique_ptr<WorkerPool> pool(new WorkerPool(options, std::move(resolver)));
  pool->monitor_ = std::thread([raw = pool.get()] { raw->MonitorLoop(); });
  return pool;
}

WorkerPool::WorkerPool(const WorkerPoolOptions& options, std::shared_ptr<HostResolver> resolver)
    : options_(options),
      clock_(common::Clock::OrReal(options.clock)),
      resolver_(std::move(resolver)),
      snapshot_(std::make_shared<RoutingSnapshot>()) {
  {
    absl::MutexLock lock(&resolver_target_->mutex);
    resolver_target_->pool = this;
  }
  absl::MutexLock lock(&mutex_);
  for (const std::string& name : options_.worker_dns) {
    const auto [host, port] = *SplitHostPort(name);
    dns_names_[name] = {.host = host, .port = port};
  }
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
  {
    // Waits for an answer being applied; later ones find no pool. The resolver itself (when the
    // pool made it) cancels its lookups when the last reference goes, without waiting for them.
    absl::MutexLock lock(&resolver_target_->mutex);
    resolver_target_->pool = nullptr;
  }
  absl::MutexLock lock(&mutex_);
  for (auto& [address, worker] : workers_) {
    if (worker->stream != nullptr) worker->stream->Cancel();
    if (worker->probe != nullptr) worker->probe->Cancel();
  }
  for (LoraAdapterCall* call : lora_calls_) call->Cancel();
  // Streams, probes and LoRA calls call back into the pool until they are deleted: wait for
  // every one.
  mutex_.Await(absl::Condition(
      +[](WorkerPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mutex_) {
        return pool->live_streams_ == 0 && pool->live_probes_ == 0 && pool->live_lora_calls_ == 0;
      },
      this));
}

void WorkerPool::MonitorLoop() {
  while (true) {
    std::vector<std::string> lookups;
    std::vector<ProbeCall*> probes;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.AwaitWithTimeout(absl::Condition(&stopping_), kTick);
      if (stopping_) return;
      const absl::Time now = clock_->Now();
      lookups = DueLookups(now);
      Discover();
      for (auto& [address, worker] : workers_) {
        if (worker->stream != nullptr && now - worker->last_report_time > HeartbeatWindow()) {
          // Silent past the heartbeat: treat as gone (OnStreamDone marks it down).
          worker->stream->Cancel();
        }
        if (worker->stream == nullptr && worker->probe == nullptr && now >= worker->next_probe) {
          probes.push_back(NewProbe(*worker));
        }
      }
    }
    // Started without the lock: a call that fails at once may report on this thread.
    for (ProbeCall* probe : probes) probe->Start();
    for (const std::string& name : lookups) StartLookup(name);
    AbortSilentCalls(HeartbeatWindow());
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
  const absl::Time now = clock_->Now();
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

std::vector<std::string> WorkerPool::DueLookups(absl::Time now) {
  std::vector<std::string> due;
  for (auto& [name, dns] : dns_names_) {
    if (dns.in_flight || now < dns.next_lookup) continue;
    dns.in_flight = true;
    due.push_back(name);
  }
  return due;
}

void WorkerPool::StartLookup(const std::string& name) {
  std::string host, port;
  {
    absl::MutexLock lock(&mutex_);
    const DnsName& dns = dns_names_.at(name);
    host = dns.host;
    port = dns.port;
  }
  resolver_->Resolve(
      host, port,
      [target = resolver_target_, name](absl::StatusOr<std::vector<std::string>> answer) {
        absl::MutexLock lock(&target->mutex);
        if (target->pool != nullptr) target->pool->OnResolved(name, std::move(answer));
      });
}

void WorkerPool::OnResolved(const std::string& name,
                            absl::StatusOr<std::vector<std::string>> answer) {
  absl::MutexLock lock(&mutex_);
  DnsName& dns = dns_names_.at(name);
  dns.in_flight = false;
  dns.next_lookup = clock_->Now() + options_.dns_refresh;
  std::string problem;
  if (!answer.ok()) {
    problem = absl::StrCat("worker DNS name ", name, ": ", answer.status().message(),
                           " (keeping its last ", dns.addresses.size(), " addresses)");
  } else {
    if (answer->empty()) problem = absl::StrCat("worker DNS name ", name, " has no addresses");
    dns.addresses = *std::move(answer);
  }
  // Logged when it changes, not every refresh.
  if (problem != dns.problem) {
    if (problem.empty()) {
      LLMSERVE_LOG(INFO) << "worker DNS name " << name << " resolves again";
    } else {
      LLMSERVE_LOG(WARNING) << problem;
    }
    dns.problem = std::move(problem);
  }
}

void WorkerPool::Discover() {
  absl::flat_hash_set<std::string> wanted(options_.workers.begin(), options_.workers.end());
  for (const auto& [name, dns] : dns_names_) {
    wanted.insert(dns.addresses.begin(), dns.addresses.end());
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
    worker->backoff = options_.backoff_initial;
    workers_[address] = std::move(worker);
  }
  bool changed = false;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (wanted.contains(it->first)) {
      ++it;
      continue;
    }
    // Gone from DNS. Its stream or probe (if any) ends on its own: its callback finds no worker.
    if (it->second->stream != nullptr) it->second->stream->Cancel();
    if (it->second->probe != nullptr) it->second->probe->Cancel();
    {
      absl::MutexLock prefix_lock(&prefix_mutex_);
      prefix_index_.Remove(it->first);
    }
    workers_.erase(it++);
    changed = true;
  }
  if (changed) PublishLocked();
}

WorkerPool::ProbeCall* WorkerPool::NewProbe(Worker& worker) {
  worker.probe = new ProbeCall(this, worker.address, worker.channel, options_.probe_timeout);
  ++live_probes_;
  return worker.probe;
}

void WorkerPool::OnProbeDone(const std::string& address, const ProbeCall* probe,
                             ProbeResult result) {
  LoadStream* stream = nullptr;
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mutex_);
    const auto it = workers_.find(address);
    // Gone from DNS since, or gone and back (then this is not its probe).
    if (it == workers_.end() || it->second->probe != probe) return;
    Worker& worker = *it->second;
    worker.probe = nullptr;
    if (stopping_) return;
    if (!result.status.ok()) return MarkDown(worker, std::string(result.status.message()));
    worker.model_info = std::move(result.model_info);
    if (known_models_.insert(worker.model_info->model_name()).second) PublishLocked();
    ++worker.generation;
    worker.last_report_time = clock_->Now();
    stream = new LoadStream(this, address, worker.generation);
    worker.stream = stream;
    ++live_streams_;
    channel = worker.channel;
  }
  // Ready once the first report (a snapshot of its cache) arrives. Started without the lock, as
  // a probe is; the destructor waits for the stream, so the pool outlives this call.
  stream->Start(channel, options_.load_interval);
}

void WorkerPool::OnProbeDeleted() {
  absl::MutexLock lock(&mutex_);
  --live_probes_;
}

void WorkerPool::MarkDown(Worker& worker, const std::string& error) {
  worker.ready = false;
  worker.last_error = error;
  ++worker.generation;
  worker.next_probe = clock_->Now() + worker.backoff;
  worker.backoff = std::min(2 * worker.backoff, options_.backoff_max);
  {
    absl::MutexLock prefix_lock(&prefix_mutex_);
    prefix_index_.Remove(worker.address);
  }
  PublishLocked();
}

std::vector<std::string> WorkerPool::LoraAdaptersOf(const Worker& worker) const {
  // Its latest load report's list (each lists them all), else its model info's.
  std::vector<std::string> names;
  if (worker.last_report.sequence() > 0) {
    names.assign(worker.last_report.lora_adapters().begin(),
                 worker.last_report.lora_adapters().end());
  } else if (worker.model_info != nullptr) {
    names.assign(worker.model_info->lora_adapters().begin(),
                 worker.model_info->lora_adapters().end());
  }
  for (const auto& [name, change] : worker.lora_changes) {
    if (change.loaded) {
      names.push_back(name);
    } else {
      names.erase(std::remove(names.begin(), names.end(), name), names.end());
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
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
                                 .kv_blocks_free = static_cast<int32_t>(load.kv_blocks_free()),
                                 .lora_adapters = LoraAdaptersOf(*worker)});
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
  worker.last_report_time = clock_->Now();
  worker.draining = report.draining();
  worker.ready = !report.draining();
  worker.backoff = options_.backoff_initial;
  worker.last_error.clear();
  const absl::Time now = clock_->Now();
  absl::erase_if(worker.lora_changes, [&](const auto& entry) {
    const bool listed = std::find(report.lora_adapters().begin(), report.lora_adapters().end(),
                                  entry.first) != report.lora_adapters().end();
    return listed == entry.second.loaded || now >= entry.second.until;
  });
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
      if (!prompt.lora_adapter().empty() &&
          !std::binary_search(worker.lora_adapters.begin(), worker.lora_adapters.end(),
                              prompt.lora_adapter())) {
        continue;
      }
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
    return absl::UnavailableError(absl::StrCat(
        "no ready worker", model.empty() ? "" : " for ", model,
        prompt.lora_adapter().empty()
            ? ""
            : absl::StrCat(" with LoRA adapter \"", prompt.lora_adapter(), "\" loaded"),
        excluded.empty() ? "" : " left to try"));
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

void WorkerPool::LoadLoraAdapter(const std::string& address,
                                 const worker::v1::LoadLoraAdapterRequest& request,
                                 absl::Time deadline,
                                 absl::AnyInvocable<void(absl::Status) &&> done) {
  StartLoraCall(address, &request, request.lora_name(), deadline, std::move(done));
}

void WorkerPool::UnloadLoraAdapter(const std::string& address, const std::string& lora_name,
                                   absl::Time deadline,
                                   absl::AnyInvocable<void(absl::Status) &&> done) {
  StartLoraCall(address, nullptr, lora_name, deadline, std::move(done));
}

void WorkerPool::StartLoraCall(const std::string& address,
                               const worker::v1::LoadLoraAdapterRequest* load,
                               const std::string& name, absl::Time deadline,
                               absl::AnyInvocable<void(absl::Status) &&> done) {
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mutex_);
    const auto it = workers_.find(address);
    if (!stopping_ && it != workers_.end()) {
      channel = it->second->channel;
      ++live_lora_calls_;
    }
  }
  if (channel == nullptr) {
    return std::move(done)(absl::UnavailableError(absl::StrCat("no worker ", address, " now")));
  }
  const bool loading = load != nullptr;
  auto* call = new LoraAdapterCall(
      std::move(channel), deadline,
      [this, address, name, loading, done = std::move(done)](LoraAdapterCall* self,
                                                             absl::Status status) mutable {
        {
          absl::MutexLock lock(&mutex_);
          lora_calls_.erase(self);
          const auto found = workers_.find(address);
          if (status.ok() && found != workers_.end()) {
            // Assumed for two heartbeats: a report that still does not say it by then comes from
            // a worker where someone else undid it.
            found->second->lora_changes[name] = {.loaded = loading,
                                                 .until = clock_->Now() + 2 * HeartbeatWindow()};
            PublishLocked();
          }
        }
        std::move(done)(std::move(status));
      },
      [this] {
        absl::MutexLock lock(&mutex_);
        --live_lora_calls_;
      });
  {
    absl::MutexLock lock(&mutex_);
    lora_calls_.insert(call);
    // The destructor cancelled those it found; this one came after.
    if (stopping_) call->Cancel();
  }
  if (loading) {
    call->StartLoad(*load);
  } else {
    call->StartUnload(name);
  }
}

void WorkerPool::OnLoraAdapterMissing(const std::string& address, const std::string& lora_name) {
  absl::MutexLock lock(&mutex_);
  const auto it = workers_.find(address);
  if (it == workers_.end()) return;
  // Until a report stops listing it (or lists it again after a load), as for an unload.
  it->second->lora_changes[lora_name] = {.loaded = false,
                                         .until = clock_->Now() + 2 * HeartbeatWindow()};
  PublishLocked();
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
                        .lora_adapters = LoraAdaptersOf(*worker),
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
