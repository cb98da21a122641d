// A Redis connection for the gateway's global rate limits: commands are pipelined on one TCP
// connection by one thread of its own, so that no request thread ever waits on Redis I/O.
//
// Send() queues a command and returns; its callback runs once on the client's thread with the
// reply, or at once on the caller's thread with UNAVAILABLE when the connection is down (callers
// then apply their failure policy instead of waiting). A command without a reply within `timeout`
// drops the connection (replies are matched to commands by order, so a late reply cannot be
// trusted): every command in flight fails with UNAVAILABLE, and the client connects again with
// backoff (100 ms doubling to 2 s), authenticating (AUTH) and selecting the database (SELECT) from
// the URL first.
//
// Thread-safe.

#ifndef LLMSERVE_GATEWAY_ADMISSION_REDIS_CLIENT_H_
#define LLMSERVE_GATEWAY_ADMISSION_REDIS_CLIENT_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/admission/redis_protocol.h"

namespace llmserve::gateway {

struct RedisClientOptions {
  RedisUrl url;
  // A command's reply, and a connection with its handshake.
  absl::Duration timeout = absl::Milliseconds(100);
  absl::Duration connect_timeout = absl::Seconds(1);
};

class RedisClient {
 public:
  using Callback = absl::AnyInvocable<void(absl::StatusOr<RedisReply> reply) &&>;

  // Starts the connection thread; it connects in the background.
  static std::unique_ptr<RedisClient> Start(RedisClientOptions options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  void Send(std::vector<std::string> command, Callback done) ABSL_LOCKS_EXCLUDED(mutex_);
  bool connected() const ABSL_LOCKS_EXCLUDED(mutex_);
  std::string Describe() const;

 private:
  struct Command {
    std::string bytes;
    Callback done;
    absl::Time deadline;
  };

  explicit RedisClient(RedisClientOptions options);
  void Loop();
  // Connects and authenticates: the socket, or -1 (the error logged).
  int Connect();
  // Ends the connection; every command sent or queued fails with `why`.
  void Disconnect(const std::string& why);
  void Wake();

  const RedisClientOptions options_;
  int wake_fds_[2] = {-1, -1};
  mutable absl::Mutex mutex_;
  std::deque<Command> queue_ ABSL_GUARDED_BY(mutex_);
  bool connected_ ABSL_GUARDED_BY(mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // The connection thread's own.
  int fd_ = -1;
  std::deque<Command> in_flight_;
  std::string read_buffer_;
  std::string write_buffer_;
  std::thread thread_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_REDIS_CLIENT_H_
