#include "gateway/admission/redis_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"

namespace llmserve::gateway {
namespace {

constexpr absl::Duration kBackoffInitial = absl::Milliseconds(100);
constexpr absl::Duration kBackoffMax = absl::Seconds(2);

int PollMillis(absl::Duration wait) {
  if (wait <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1))), 1000));
}

// Waits until `fd` is ready for `events` or `deadline`.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int n = poll(&p, 1, PollMillis(deadline - absl::Now()));
    if (n > 0) return (p.revents & (events | POLLERR | POLLHUP)) != 0;
    if (n < 0 && errno == EINTR) continue;
    if (absl::Now() >= deadline) return false;
  }
}

// One command and its reply on a fresh connection, before it is handed to the loop.
absl::StatusOr<RedisReply> Exchange(int fd, const std::vector<std::string>& command,
                                    absl::Time deadline) {
  const std::string bytes = EncodeRedisCommand(command);
  size_t sent = 0;
  while (sent < bytes.size()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return absl::DeadlineExceededError("write timed out");
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return absl::UnavailableError(strerror(errno));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string buffer;
  while (true) {
    RedisReply reply;
    absl::StatusOr<size_t> taken = ParseRedisReply(buffer, &reply);
    if (!taken.ok()) return taken.status();
    if (*taken > 0) return reply;
    if (!WaitFor(fd, POLLIN, deadline)) return absl::DeadlineExceededError("read timed out");
    char chunk[4096];
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n == 0) return absl::UnavailableError("connection closed");
    if (n < 0 && errno != EAGAIN && errno != EINTR) return absl::UnavailableError(strerror(errno));
    if (n > 0) buffer.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace

std::unique_ptr<RedisClient> RedisClient::Start(RedisClientOptions options) {
  std::unique_ptr<RedisClient> client(new RedisClient(std::move(options)));
  client->thread_ = std::thread([raw = client.get()] { raw->Loop(); });
  return client;
}

RedisClient::RedisClient(RedisClientOptions options) : options_(std::move(options)) {
  if (pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    LLMSERVE_LOG(FATAL) << "redis client: pipe2: " << strerror(errno);
  }
}

RedisClient::~RedisClient() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  Wake();
  thread_.join();
  Disconnect("the gateway is shutting down");
  close(wake_fds_[0]);
  close(wake_fds_[1]);
}

std::string RedisClient::Describe() const {
  return absl::StrCat("redis://", options_.url.host, ":", options_.url.port, "/", options_.url.db);
}

bool RedisClient::connected() const {
  absl::MutexLock lock(&mutex_);
  return connected_;
}

void RedisClient::Wake() {
  const char byte = 1;
  (void)!write(wake_fds_[1], &byte, 1);
}

void RedisClient::Send(std::vector<std::string> command, Callback done) {
  {
    absl::MutexLock lock(&mutex_);
    if (connected_ && !stopping_) {
      queue_.push_back(
          {EncodeRedisCommand(command), std::move(done), absl::Now() + options_.timeout});
      done = nullptr;
    }
  }
  if (done != nullptr) {
    return std::move(done)(absl::UnavailableError(absl::StrCat(Describe(), " is not connected")));
  }
  Wake();
}

int RedisClient::Connect() {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int error =
          getaddrinfo(options_.url.host.c_str(), options_.url.port.c_str(), &hints, &addresses);
      error != 0) {
    LLMSERVE_LOG(WARNING) << "redis: cannot resolve " << options_.url.host << ": "
                          << gai_strerror(error);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = addresses; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      close(fd);
      fd = -1;
      continue;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    if (!WaitFor(fd, POLLOUT, deadline) ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addresses);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<std::vector<std::string>> handshake;
  if (!options_.url.password.empty()) {
    handshake.push_back(
        options_.url.username.empty()
            ? std::vector<std::string>{"AUTH", options_.url.password}
            : std::vector<std::string>{"AUTH", options_.url.username, options_.url.password});
  }
  if (options_.url.db != 0) handshake.push_back({"SELECT", absl::StrCat(options_.url.db)});
  handshake.push_back({"PING"});
  for (const std::vector<std::string>& command : handshake) {
    absl::StatusOr<RedisReply> reply = Exchange(fd, command, deadline);
    if (!reply.ok() || reply->type == RedisReply::Type::kError) {
      LLMSERVE_LOG(WARNING) << "redis: " << command[0] << " failed: "
                            << (reply.ok() ? reply->text : reply.status().ToString());
      close(fd);
      return -1;
    }
  }
  return fd;
}

void RedisClient::Disconnect(const std::string& why) {
  std::deque<Command> failed;
  {
    absl::MutexLock lock(&mutex_);
    connected_ = false;
    failed.swap(queue_);
  }
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  read_buffer_.clear();
  write_buffer_.clear();
  for (Command& command : in_flight_) {
    std::move(command.done)(absl::UnavailableError(why));
  }
  in_flight_.clear();
  for (Command& command : failed) std::move(command.done)(absl::UnavailableError(why));
}

void RedisClient::Loop() {
  absl::Duration backoff = kBackoffInitial;
  absl::Time next_connect = absl::InfinitePast();
  bool was_connected = false;
  while (true) {
    {
      absl::MutexLock lock(&mutex_);
      if (stopping_) return;
    }
    char drain[64];
    while (read(wake_fds_[0], drain, sizeof(drain)) > 0) {
    }
    if (fd_ < 0) {
      if (absl::Now() < next_connect) {
        pollfd wake{.fd = wake_fds_[0], .events = POLLIN, .revents = 0};
        poll(&wake, 1, PollMillis(next_connect - absl::Now()));
        continue;
      }
      fd_ = Connect();
      if (fd_ < 0) {
        if (was_connected) LLMSERVE_LOG(WARNING) << "redis: " << Describe() << " is unreachable";
        was_connected = false;
        next_connect = absl::Now() + backoff;
        backoff = std::min(backoff * 2, kBackoffMax);
        continue;
      }
      LLMSERVE_LOG(INFO) << "redis: connected to " << Describe();
      was_connected = true;
      backoff = kBackoffInitial;
      absl::MutexLock lock(&mutex_);
      connected_ = true;
    }
    {
      absl::MutexLock lock(&mutex_);
      while (!queue_.empty()) {
        write_buffer_ += queue_.front().bytes;
        queue_.front().bytes.clear();
        in_flight_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    absl::Time earliest = absl::Now() + absl::Seconds(1);
    if (!in_flight_.empty()) earliest = std::min(earliest, in_flight_.front().deadline);
    pollfd polls[2] = {
        {.fd = fd_,
         .events = static_cast<short>(POLLIN | (write_buffer_.empty() ? 0 : POLLOUT)),
         .revents = 0},
        {.fd = wake_fds_[0], .events = POLLIN, .revents = 0}};
    if (poll(polls, 2, PollMillis(earliest - absl::Now())) < 0 && errno != EINTR) {
      Disconnect(absl::StrCat("redis: poll: ", strerror(errno)));
      continue;
    }
    if ((polls[0].revents & (POLLERR | POLLHUP)) != 0 && (polls[0].revents & POLLIN) == 0) {
      Disconnect(absl::StrCat(Describe(), " closed the connection"));
      continue;
    }
    if ((polls[0].revents & POLLOUT) != 0) {
      const ssize_t n = send(fd_, write_buffer_.data(), write_buffer_.size(), MSG_NOSIGNAL);
      if (n > 0) {
        write_buffer_.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        Disconnect(absl::StrCat(Describe(), ": ", strerror(errno)));
        continue;
      }
    }
    if ((polls[0].revents & POLLIN) != 0) {
      char chunk[16384];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        Disconnect(absl::StrCat(Describe(), " closed the connection"));
        continue;
      }
      if (n > 0) read_buffer_.append(chunk, static_cast<size_t>(n));
      bool broken = false;
      while (!in_flight_.empty()) {
        RedisReply reply;
        absl::StatusOr<size_t> taken = ParseRedisReply(read_buffer_, &reply);
        if (!taken.ok()) {
          Disconnect(absl::StrCat(Describe(), ": ", taken.status().message()));
          broken = true;
          break;
        }
        if (*taken == 0) break;
        read_buffer_.erase(0, *taken);
        Command command = std::move(in_flight_.front());
        in_flight_.pop_front();
        std::move(command.done)(std::move(reply));
      }
      if (broken) continue;
    }
    if (!in_flight_.empty() && absl::Now() >= in_flight_.front().deadline) {
      Disconnect(absl::StrCat(Describe(), " did not answer within ",
                              absl::FormatDuration(options_.timeout)));
      next_connect = absl::Now() + backoff;
    }
  }
}

}  // namespace llmserve::gateway
