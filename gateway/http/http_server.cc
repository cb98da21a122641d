#include "gateway/http/http_server.h"

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// GCC 12 needs <utility> before Asio (docs/building.md, "Dependencies").
#include <boost/asio.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/log_throttle.h"
#include "common/base/logging.h"
#include "gateway/http/connection.h"
#include "gateway/http/http_stream.h"

namespace llmserve::gateway::http {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using common::LogThrottle;
using tcp = asio::ip::tcp;

// After Shutdown's grace: how long the forced closes and the I/O threads' last handlers get before
// the io_context is stopped regardless.
constexpr absl::Duration kForcedCloseWait = absl::Seconds(2);
// Pause before accepting again after an error such as EMFILE, so as not to spin.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);
// Out of file descriptors, accept() fails at every retry until connections close: the first
// failure is logged, then one per interval with the count in between.
constexpr absl::Duration kAcceptErrorLogInterval = absl::Seconds(10);

void LogAcceptError(const error_code& ec, LogThrottle& throttle) {
  const std::optional<int64_t> skipped = throttle.Record(absl::Now());
  if (!skipped.has_value()) return;
  const std::string repeats = *skipped > 0
                                  ? absl::StrCat(*skipped, " more since the last message")
                                  : absl::StrCat("logged at most once every ",
                                                 absl::FormatDuration(kAcceptErrorLogInterval));
  LLMSERVE_LOG(WARNING) << "HTTP accept failed: " << ec.message() << " (" << repeats
                        << "); retrying every " << kAcceptRetryDelay.count() << " ms";
}

}  // namespace

struct HttpServer::Impl {
  // Destroyed last: connections reach it until the io_context is gone.
  ServerContext context;
  std::unique_ptr<asio::io_context> io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  int port = 0;

  absl::Mutex accept_mu;
  std::unique_ptr<tcp::acceptor> acceptor ABSL_GUARDED_BY(accept_mu);
  std::unique_ptr<asio::steady_timer> accept_retry ABSL_GUARDED_BY(accept_mu);
  bool accepting ABSL_GUARDED_BY(accept_mu) = false;
  LogThrottle accept_error_log{kAcceptErrorLogInterval};

  absl::Mutex state_mu;
  bool shut_down ABSL_GUARDED_BY(state_mu) = false;
  int threads_running ABSL_GUARDED_BY(state_mu) = 0;

  void AcceptNext() ABSL_LOCKS_EXCLUDED(accept_mu);
  void OnAccept(const error_code& ec, tcp::socket socket) ABSL_LOCKS_EXCLUDED(accept_mu);
  void RunIoThread();
  std::vector<std::shared_ptr<Connection>> LiveConnections();
  // Waits until no connection is open or `timeout` passed; true when none is open.
  bool AwaitNoConnections(absl::Duration timeout);
  void CloseConnectionsAfterResponses();
  void StopAccepting();
  void Shutdown(absl::Duration grace);
};

void HttpServer::Impl::AcceptNext() {
  absl::MutexLock lock(&accept_mu);
  if (!accepting) return;
  // Each connection gets its own strand: with several I/O threads its handlers still run one at
  // a time, so a Connection needs no lock.
  acceptor->async_accept(
      asio::any_io_executor(asio::make_strand(*io)),
      [this](const error_code& ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void HttpServer::Impl::OnAccept(const error_code& ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted) return;  // StopAccepting closed the acceptor
  if (ec) {
    LogAcceptError(ec, accept_error_log);
    absl::MutexLock lock(&accept_mu);
    if (!accepting) return;
    accept_retry->expires_after(kAcceptRetryDelay);
    accept_retry->async_wait([this](const error_code& wait_error) {
      if (!wait_error) AcceptNext();
    });
    return;
  }
  try {
    auto connection = std::make_shared<Connection>(std::move(socket), &context);
    connection->Start();
  } catch (const std::exception& e) {
    // OpenSSL could not set up the session (out of memory): drop this client, keep accepting.
    LLMSERVE_LOG(ERROR) << "HTTP connection setup failed: " << e.what();
  }
  AcceptNext();
}

void HttpServer::Impl::RunIoThread() {
  for (;;) {
    try {
      io->run();
      break;
    } catch (const std::exception& e) {
      LLMSERVE_LOG(ERROR) << "exception on an HTTP I/O thread: " << e.what();
    } catch (...) {
      LLMSERVE_LOG(ERROR) << "non-standard exception on an HTTP I/O thread";
    }
  }
  absl::MutexLock lock(&state_mu);
  --threads_running;
}

std::vector<std::shared_ptr<Connection>> HttpServer::Impl::LiveConnections() {
  std::vector<std::shared_ptr<Connection>> connections;
  absl::MutexLock lock(&context.mu);
  connections.reserve(context.live.size());
  for (const auto& [raw, weak] : context.live) {
    if (std::shared_ptr<Connection> connection = weak.lock()) {
      connections.push_back(std::move(connection));
    }
  }
  return connections;
}

bool HttpServer::Impl::AwaitNoConnections(absl::Duration timeout) {
  absl::MutexLock lock(&context.mu);
  return context.mu.AwaitWithTimeout(
      absl::Condition(
          +[](ServerContext* c) { return c->live.empty(); }, &context),
      timeout);
}

void HttpServer::Impl::CloseConnectionsAfterResponses() {
  // Connections accepted from now on see the flag at their first request.
  if (context.draining.exchange(true)) return;
  for (std::shared_ptr<Connection>& connection : LiveConnections()) {
    asio::post(connection->executor(), [connection] { connection->Drain(); });
  }
}

void HttpServer::Impl::StopAccepting() {
  {
    absl::MutexLock lock(&accept_mu);
    if (!accepting) return;
    accepting = false;
    // Closing here, not on an I/O thread, makes refusal immediate once this returns.
    error_code ec;
    acceptor->close(ec);
    accept_retry->cancel();
  }
  CloseConnectionsAfterResponses();
}

void HttpServer::Impl::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&state_mu);
    if (shut_down) return;
    shut_down = true;
  }
  LLMSERVE_CHECK(!io->get_executor().running_in_this_thread())
      << "HttpServer::Shutdown called on one of its own I/O threads";
  StopAccepting();
  if (!AwaitNoConnections(grace)) {
    for (std::shared_ptr<Connection>& connection : LiveConnections()) {
      asio::post(connection->executor(), [connection] { connection->Close(); });
    }
    AwaitNoConnections(kForcedCloseWait);
  }
  // No writer may post from now on; what was posted still runs (or is destroyed with io).
  {
    absl::MutexLock lock(&context.gate->mu);
    context.gate->open = false;
  }
  // Let the I/O threads finish the remaining handlers, then stop them regardless.
  work.reset();
  {
    absl::MutexLock lock(&state_mu);
    state_mu.AwaitWithTimeout(absl::Condition(
                                  +[](int* running) { return *running == 0; }, &threads_running),
                              kForcedCloseWait);
  }
  io->stop();
  for (std::thread& thread : threads) thread.join();
  threads.clear();
  {
    absl::MutexLock lock(&accept_mu);
    accept_retry.reset();
    acceptor.reset();
  }
  // Destroys what is still queued, and with it any connection left; they run on_close.
  io.reset();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              Handler handler) {
  if (handler == nullptr) return absl::InvalidArgumentError("HttpServer: handler is null");
  if (options.io_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("HttpServer: io_threads must be at least 1, got ", options.io_threads));
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HttpServer: invalid port ", options.port));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        options.tls_key_file.empty()
            ? "HttpServer: tls_cert_file is set but tls_key_file is not (TLS needs both)"
            : "HttpServer: tls_key_file is set but tls_cert_file is not (TLS needs both)");
  }
  const std::string address = absl::StrCat(options.host, ":", options.port);
  try {
    auto impl = std::make_unique<Impl>();
    impl->context.options = options;
    impl->context.handler = std::move(handler);
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::unique_ptr<asio::ssl::context>> tls =
          MakeServerTlsContext(options.tls_cert_file, options.tls_key_file);
      if (!tls.ok()) return tls.status();
      impl->context.tls = *std::move(tls);
    }
    impl->io = std::make_unique<asio::io_context>(options.io_threads);

    error_code ec;
    tcp::endpoint endpoint;
    const asio::ip::address ip = asio::ip::make_address(options.host, ec);
    if (!ec) {
      endpoint = tcp::endpoint(ip, static_cast<unsigned short>(options.port));
    } else {
      tcp::resolver resolver(*impl->io);
      const auto results =
          resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, ec);
      if (ec || results.empty()) {
        return absl::UnavailableError(absl::StrCat("HTTP server cannot resolve ", address, ": ",
                                                   ec ? ec.message() : "no address"));
      }
      endpoint = results.begin()->endpoint();
    }

    {
      absl::MutexLock lock(&impl->accept_mu);
      impl->acceptor = std::make_unique<tcp::acceptor>(*impl->io);
      impl->accept_retry = std::make_unique<asio::steady_timer>(*impl->io);
      tcp::acceptor& acceptor = *impl->acceptor;
      acceptor.open(endpoint.protocol(), ec);
      if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) acceptor.bind(endpoint, ec);
      if (!ec) acceptor.listen(options.listen_backlog, ec);
      if (ec) {
        return absl::UnavailableError(
            absl::StrCat("HTTP server cannot listen on ", address, ": ", ec.message()));
      }
      impl->port = acceptor.local_endpoint(ec).port();
      impl->accepting = true;
    }
    impl->work.emplace(impl->io->get_executor());
    Impl* raw = impl.get();
    std::unique_ptr<HttpServer> server(new HttpServer(std::move(impl)));
    // From here on the server's destructor cleans up, also after a failure below.
    for (int i = 0; i < options.io_threads; ++i) {
      {
        absl::MutexLock lock(&raw->state_mu);
        ++raw->threads_running;
      }
      raw->threads.emplace_back([raw] { raw->RunIoThread(); });
    }
    raw->AcceptNext();
    return server;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("HTTP server on ", address, ": ", e.what()));
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { impl_->Shutdown(absl::ZeroDuration()); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::CloseConnectionsAfterResponses() { impl_->CloseConnectionsAfterResponses(); }

void HttpServer::StopAccepting() { impl_->StopAccepting(); }

void HttpServer::Shutdown(absl::Duration grace) { impl_->Shutdown(grace); }

int HttpServer::active_connections() const {
  absl::MutexLock lock(&impl_->context.mu);
  return static_cast<int>(impl_->context.live.size());
}

}  // namespace llmserve::gateway::http
