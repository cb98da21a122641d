#include "gateway/router/dns_resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"

namespace llmserve::gateway {

struct DnsResolver::Lookup {
  std::string host;
  std::string port;
  Callback done;
};

namespace {

ares_channel AsChannel(void* channel) { return static_cast<ares_channel>(channel); }

// "ip:port" or "[ipv6]:port" with a numeric address: what ares_set_servers_ports_csv reads.
bool IsNumericServer(const std::string& server) {
  const size_t colon = server.rfind(':');
  if (colon == std::string::npos) return false;
  int port = 0;
  if (!absl::SimpleAtoi(server.substr(colon + 1), &port) || port < 1 || port > 65535) return false;
  std::string host = server.substr(0, colon);
  unsigned char address[sizeof(in6_addr)];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), address) == 1;
  }
  return inet_pton(AF_INET, host.c_str(), address) == 1;
}

// Called by c-ares, on the loop thread, once per lookup.
void OnAddressInfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* result) {
  std::unique_ptr<DnsResolver::Lookup> lookup(static_cast<DnsResolver::Lookup*>(arg));
  absl::StatusOr<std::vector<std::string>> answer;
  if (status == ARES_SUCCESS) {
    std::vector<std::string> addresses;
    for (const ares_addrinfo_node* node = result != nullptr ? result->nodes : nullptr;
         node != nullptr; node = node->ai_next) {
      char text[INET6_ADDRSTRLEN];
      std::string address;
      if (node->ai_family == AF_INET &&
          inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(node->ai_addr)->sin_addr, text,
                    sizeof(text)) != nullptr) {
        address = absl::StrCat(text, ":", lookup->port);
      } else if (node->ai_family == AF_INET6 &&
                 inet_ntop(AF_INET6,
                           &reinterpret_cast<const sockaddr_in6*>(node->ai_addr)->sin6_addr, text,
                           sizeof(text)) != nullptr) {
        address = absl::StrCat("[", text, "]:", lookup->port);
      } else {
        continue;
      }
      if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
        addresses.push_back(std::move(address));
      }
    }
    answer = std::move(addresses);
  } else if (status == ARES_ENOTFOUND || status == ARES_ENODATA) {
    // Authoritative: the name has no addresses (now).
    answer = std::vector<std::string>();
  } else if (status == ARES_ECANCELLED || status == ARES_EDESTRUCTION) {
    answer = absl::CancelledError(absl::StrCat("resolving ", lookup->host, " was cancelled"));
  } else {
    answer = absl::UnavailableError(
        absl::StrCat("cannot resolve ", lookup->host, ": ", ares_strerror(status)));
  }
  if (result != nullptr) ares_freeaddrinfo(result);
  std::move(lookup->done)(std::move(answer));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DnsResolver>> DnsResolver::Create(
    const DnsResolverOptions& options) {
  for (const std::string& server : options.servers) {
    if (!IsNumericServer(server)) {
      return absl::InvalidArgumentError(
          absl::StrCat("DNS server \"", server, "\" is not ip:port or [ipv6]:port"));
    }
  }
  if (options.attempt_timeout < absl::Milliseconds(1) || options.attempts < 1) {
    return absl::InvalidArgumentError("DNS attempt timeout and attempts must be positive");
  }
  static absl::once_flag library_once;
  static int library_status = ARES_SUCCESS;
  absl::call_once(library_once, [] { library_status = ares_library_init(ARES_LIB_INIT_ALL); });
  if (library_status != ARES_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cannot initialize c-ares: ", ares_strerror(library_status)));
  }
  ares_options ares{};
  ares.timeout = static_cast<int>(absl::ToInt64Milliseconds(options.attempt_timeout));
  ares.tries = options.attempts;
  ares_channel channel = nullptr;
  if (const int status = ares_init_options(&channel, &ares, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
      status != ARES_SUCCESS) {
    return absl::InternalError(absl::StrCat("cannot start c-ares: ", ares_strerror(status)));
  }
  if (!options.servers.empty()) {
    const std::string servers = absl::StrJoin(options.servers, ",");
    if (const int status = ares_set_servers_ports_csv(channel, servers.c_str());
        status != ARES_SUCCESS) {
      ares_destroy(channel);
      return absl::InvalidArgumentError(
          absl::StrCat("DNS servers \"", servers, "\": ", ares_strerror(status)));
    }
  }
  std::unique_ptr<DnsResolver> resolver(new DnsResolver(channel));
  int pipe_ends[2];
  if (pipe2(pipe_ends, O_NONBLOCK | O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create the DNS resolver's pipe: errno ", errno));
  }
  resolver->wake_read_ = pipe_ends[0];
  resolver->wake_write_ = pipe_ends[1];
  resolver->thread_ = std::thread([raw = resolver.get()] { raw->Loop(); });
  return resolver;
}

DnsResolver::DnsResolver(void* channel) : channel_(channel) {}

DnsResolver::~DnsResolver() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  ares_destroy(AsChannel(channel_));
  if (wake_read_ >= 0) close(wake_read_);
  if (wake_write_ >= 0) close(wake_write_);
}

void DnsResolver::Resolve(const std::string& host, const std::string& port, Callback done) {
  auto lookup = std::make_unique<Lookup>(Lookup{host, port, std::move(done)});
  {
    absl::MutexLock lock(&mutex_);
    if (!stopping_) {
      queued_.push_back(std::move(lookup));
      lookup = nullptr;
    }
  }
  if (lookup != nullptr) {
    std::move(lookup->done)(absl::CancelledError("the DNS resolver is stopping"));
    return;
  }
  Wake();
}

void DnsResolver::Wake() {
  const char byte = 1;
  // A full pipe already wakes the loop.
  [[maybe_unused]] const ssize_t written = write(wake_write_, &byte, 1);
}

void DnsResolver::Loop() {
  const ares_channel channel = AsChannel(channel_);
  while (true) {
    std::vector<std::unique_ptr<Lookup>> starting;
    bool stop = false;
    {
      absl::MutexLock lock(&mutex_);
      starting.swap(queued_);
      stop = stopping_;
    }
    if (stop) {
      for (std::unique_ptr<Lookup>& lookup : starting) {
        std::move(lookup->done)(absl::CancelledError("the DNS resolver is stopping"));
      }
      break;
    }
    for (std::unique_ptr<Lookup>& lookup : starting) {
      ares_addrinfo_hints hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = ARES_AI_NUMERICSERV;
      Lookup* raw = lookup.release();
      // May answer at once (a numeric address, /etc/hosts): OnAddressInfo runs inside.
      ares_getaddrinfo(channel, raw->host.c_str(), raw->port.c_str(), &hints, OnAddressInfo, raw);
    }

    ares_socket_t sockets[ARES_GETSOCK_MAXNUM];
    const int mask = ares_getsock(channel, sockets, ARES_GETSOCK_MAXNUM);
    std::vector<pollfd> polled = {{.fd = wake_read_, .events = POLLIN, .revents = 0}};
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short events = 0;
      if (ARES_GETSOCK_READABLE(mask, i)) events |= POLLIN;
      if (ARES_GETSOCK_WRITABLE(mask, i)) events |= POLLOUT;
      if (events != 0) polled.push_back({.fd = sockets[i], .events = events, .revents = 0});
    }
    timeval wait{};
    const timeval* next_timeout = ares_timeout(channel, nullptr, &wait);
    const int timeout_ms =
        next_timeout == nullptr
            ? -1
            : static_cast<int>(next_timeout->tv_sec * 1000 + (next_timeout->tv_usec + 999) / 1000);
    const int ready = poll(polled.data(), polled.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      LLMSERVE_LOG(WARNING) << "DNS resolver: poll failed, errno " << errno;
    }
    if ((polled[0].revents & POLLIN) != 0) {
      char drained[64];
      while (read(wake_read_, drained, sizeof(drained)) > 0) {
      }
    }
    bool any_socket = false;
    for (size_t i = 1; i < polled.size(); ++i) {
      const short revents = polled[i].revents;
      if (revents == 0) continue;
      any_socket = true;
      const bool readable = (revents & (POLLIN | POLLERR | POLLHUP)) != 0;
      const bool writable = (revents & POLLOUT) != 0;
      ares_process_fd(channel, readable ? polled[i].fd : ARES_SOCKET_BAD,
                      writable ? polled[i].fd : ARES_SOCKET_BAD);
    }
    // Retries and timeouts of the lookups in flight.
    if (!any_socket) ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  }
  // Every lookup still waiting for a server ends now (its callback says CANCELLED).
  ares_cancel(channel);
}

}  // namespace llmserve::gateway
